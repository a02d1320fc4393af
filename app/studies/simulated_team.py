"""Does capscope find a bad annotator, and make better gold than the majority?
(`python -m capscope.studies.simulated_team --out DIR`)

A team of simulated annotators with known behaviour labels a dataset through
the REST API, as people would: each asks for the next item and submits the
words they think wrong and the regions they think mentioned. Every semantic
word has a true label (wrong with probability `P_WRONG`) and every region one
(mentioned with `P_MENTIONED`). The team:
- three careful annotators, right on each unit with probability 0.95, 0.9 and 0.8;
- one who answers at random (a coin per unit);
- one who never marks a wrong colour word, and is otherwise right 95% of the time.
An admin first gives `controls` items their true labels as gold and marks them
controls, at a control rate of `rate`. Then gold is made by each method and
compared with the truth on the semantic words of the other items, and each
annotator's control accuracy interval with their accuracy over everything they
labelled. A simulated model, right on 85% of the units, is stored as the
predictions that model-aware gold weighs as one more voice. Writes
DIR/simulated_team.json and prints a summary.
"""
from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from capscope.annotation.consensus import METHODS

P_WRONG = 0.3
P_MENTIONED = 0.6
MODEL_ACCURACY = 0.85  # the simulated model's share of right verdicts (model-aware gold's extra voice)
COLOURS = frozenset({"red", "blue", "green", "yellow", "white", "black", "orange", "purple", "pink", "brown"})


@dataclass(frozen=True)
class Annotator:
    name: str
    password: str
    accuracy: float  # P(right) on each unit it has an opinion on
    blind_to_colour: bool = False  # never marks a wrong colour word


TEAM = (Annotator("careful-95", "careful-password-95", 0.95), Annotator("careful-90", "careful-password-90", 0.90),
        Annotator("careful-80", "careful-password-80", 0.80), Annotator("random", "random-password-1", 0.5),
        Annotator("colour-blind", "colour-password-1", 0.95, blind_to_colour=True))


@dataclass
class Truth:
    """The true labels of one item: wrong semantic words and mentioned regions."""
    wrong: set[int] = field(default_factory=set)
    mentioned: set[int] = field(default_factory=set)


def true_labels(item: dict, seed: int) -> Truth:
    """An item's truth, drawn from its id (the same for every annotator and every run)."""
    rng = random.Random(f"{seed}:{item['id']}")
    truth = Truth()
    for i, token in enumerate(item["tokens"]):
        if token["semantic"] and rng.random() < P_WRONG:
            truth.wrong.add(i)
    truth.mentioned = {r["index"] for r in item["regions"] if rng.random() < P_MENTIONED}
    return truth


def judge(annotator: Annotator, item: dict, truth: Truth, rng: random.Random) -> tuple[list[int], list[int], int, int]:
    """What `annotator` submits for `item`: (wrong words, mentioned regions,
    units right, units judged) over the semantic words and the regions."""
    right = units = 0
    wrong, mentioned = [], []
    for i, token in enumerate(item["tokens"]):
        if not token["semantic"]:
            continue
        is_wrong = i in truth.wrong
        if annotator.blind_to_colour and token["text"].lower() in COLOURS:
            says_wrong = False
        else:
            says_wrong = is_wrong if rng.random() < annotator.accuracy else not is_wrong
        wrong += [i] if says_wrong else []
        right, units = right + (says_wrong == is_wrong), units + 1
    for region in item["regions"]:
        is_mentioned = region["index"] in truth.mentioned
        says = is_mentioned if rng.random() < annotator.accuracy else not is_mentioned
        mentioned += [region["index"]] if says else []
        right, units = right + (says == is_mentioned), units + 1
    return wrong, mentioned, right, units


def run_study(client, admin: tuple[str, str], dataset: str, controls: int, rate: float = 0.2,
              seed: int = 0, team: tuple[Annotator, ...] = TEAM) -> dict:
    """Controls, then the team's labelling, then gold by every method; `client`
    speaks HTTP to a capscope server (httpx or FastAPI's TestClient) whose
    store holds `dataset` and the team's users. Returns the figures."""
    items = _all_items(client, admin, dataset)
    truths = {item["item_id"]: true_labels(item, seed) for item in items}
    control_ids = [item["item_id"] for item in items[:controls]]
    for item in items[:controls]:
        _make_control(client, admin, item, truths[item["item_id"]])
    _ok(client.put(f"/api/datasets/{dataset}/controls", json={"rate": rate}, auth=admin))

    accuracy = _label_everything(client, team, truths, seed)
    judged_words = sum(t["semantic"] for item in items[controls:] for t in item["tokens"])
    result = {"items": len(items), "controls": controls, "rate": rate, "team": [a.name for a in team],
              "semantic_words_judged": judged_words,
              "true_accuracy": accuracy, "gold_errors": {}, "handed_controls": {}}
    for method in METHODS:
        _ok(client.post(f"/api/datasets/{dataset}/gold", json={"method": method}, auth=admin))
        result["gold_errors"][method] = _gold_errors(client, admin, dataset, truths, set(control_ids),
                                                     {item["id"]: item["item_id"] for item in items})
    result["gold_errors"]["the model alone (trivial rule)"] = _model_errors(items, truths, set(control_ids))
    result["annotators"] = _ok(client.get(f"/api/datasets/{dataset}/annotators", auth=admin)).json()
    return result


def _model_errors(items: list[dict], truths: dict[int, Truth], controls: set[int]) -> int | None:
    """Semantic words of the non-control items where the stored model's own verdict is not the truth."""
    from capscope.annotation.uncertainty import verdict_probabilities
    from capscope.metrics.constants import DEFAULT_TOKEN_RULE  # the study judges by the default rule throughout

    errors, scored = 0, False
    for item in items:
        found = [p for p in item.get("predictions") or [] if p["metric"] == "infometic"]
        if not found or item["item_id"] in controls:
            continue
        semantic = [t["semantic"] for t in item["tokens"]]
        words, _ = verdict_probabilities("infometic", found[0]["token_scores"], found[0]["region_scores"], semantic,
                                         DEFAULT_TOKEN_RULE, 1.0)
        for i, p_wrong in enumerate(words):
            if p_wrong is not None:
                scored = True
                errors += (p_wrong > 0.5) != (i in truths[item["item_id"]].wrong)
    return errors if scored else None


def _ok(response):
    if response.status_code >= 400:
        raise RuntimeError(f"{response.request.method} {response.request.url}: {response.status_code} {response.text}")
    return response


def _all_items(client, admin, dataset: str) -> list[dict]:
    """Every item of the dataset with its tokens and regions, by id (an admin's read: GET /api/items/{id})."""
    ids, page = [], 1
    while True:
        listed = _ok(client.get("/api/items", params={"dataset": dataset, "page": page, "page_size": 500},
                                auth=admin)).json()
        ids += [row["item_id"] for row in listed["items"]]
        if page * listed["page_size"] >= listed["total"]:
            break
        page += 1
    return [_ok(client.get(f"/api/items/{item_id}", params={"predictions": "true"}, auth=admin)).json()
            for item_id in ids]


def _make_control(client, admin, item: dict, truth: Truth) -> None:
    tokens = [None if not t["semantic"] else ("incorrect" if i in truth.wrong else "correct")
              for i, t in enumerate(item["tokens"])]
    regions = ["mentioned" if r["index"] in truth.mentioned else "unmentioned" for r in item["regions"]]
    _ok(client.put(f"/api/items/{item['item_id']}/gold", json={"token_labels": tokens, "region_labels": regions},
                   auth=admin))
    _ok(client.put(f"/api/items/{item['item_id']}/control", json={"control": True}, auth=admin))


def _label_everything(client, team, truths: dict[int, Truth], seed: int) -> dict[str, float]:
    """The team, in turns, asks for items and submits them until none is left;
    each annotator's accuracy against the truth over everything they labelled."""
    rngs = {a.name: random.Random(f"{seed}:{a.name}") for a in team}
    tally = {a.name: [0, 0] for a in team}
    active = list(team)
    while active:
        for annotator in list(active):
            auth = (annotator.name, annotator.password)
            response = _ok(client.get("/api/items/next", auth=auth))
            if response.status_code == 204:
                active.remove(annotator)
                continue
            item = response.json()
            wrong, mentioned, right, units = judge(annotator, item, truths[item["item_id"]], rngs[annotator.name])
            _ok(client.put(f"/api/items/{item['item_id']}/labels", auth=auth,
                           json={"incorrect_tokens": wrong, "mentioned_regions": mentioned, "status": "submitted"}))
            tally[annotator.name][0] += right
            tally[annotator.name][1] += units
    return {name: right / units for name, (right, units) in tally.items() if units}


def _gold_errors(client, admin, dataset: str, truths: dict[int, Truth], controls: set[int],
                 ids: dict[str, int]) -> int:
    """Semantic words of the non-control items whose gold is not the truth (no gold counts as an error)."""
    export = _ok(client.get("/api/export", params={"format": "captokeneval", "dataset": dataset}, auth=admin))
    rows = [json.loads(line) for line in export.text.splitlines() if line.strip()]
    errors = 0
    for row in rows:
        item_id = ids.get(row["id"])
        if item_id is None or item_id in controls:
            continue
        truth = truths[item_id]
        for i, token in enumerate(row["tokens"]):
            if token["semantic"]:
                expected = "incorrect" if i in truth.wrong else "correct"
                errors += token["label"] != expected
    return errors


def main(argv=None) -> int:
    import httpx

    from capscope.studies.click_noc import serve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--items", type=int, default=240)
    parser.add_argument("--controls", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-accuracy", type=float, default=MODEL_ACCURACY)
    args = parser.parse_args(argv)
    db_url = prepare(args.out, args.items, args.model_accuracy, args.seed)
    process, url = serve(db_url, args.out / "data", "classic")
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            result = run_study(client, ADMIN, DATASET, args.controls, seed=args.seed)
    finally:
        process.terminate()
        process.wait(timeout=30)
    (args.out / "simulated_team.json").write_text(json.dumps(result, indent=2))
    print(summary(result))
    return 0


ADMIN = ("admin", "admin-password-1")
DATASET = "team"


def prepare(folder: Path, n_items: int, model_accuracy: float | None = MODEL_ACCURACY, seed: int = 0) -> str:
    """A fresh SQLite store in `folder` holding the dataset `DATASET` of `n_items`
    captions (3 annotators each), the admin `ADMIN` and the team, and with
    `model_accuracy` a simulated model's stored predictions (`add_model`); its URL."""
    from capscope.annotation.importer import ImportOptions, import_captions
    from capscope.annotation.users import add_user
    from capscope.db import Store

    folder.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{folder / 'simulated_team.db'}"
    store = Store(db_url)
    import_captions(store, _write_captions(folder, n_items), folder / "images",
                    ImportOptions(dataset=DATASET, annotators_per_item=3, regions="none", progress=False))
    add_user(store, *ADMIN, role="admin")
    for annotator in TEAM:
        add_user(store, annotator.name, annotator.password)
    if model_accuracy is not None:
        add_model(store, model_accuracy, seed)
    store.dispose()
    return db_url


def add_model(store, accuracy: float, seed: int = 0) -> int:
    """Stored InfoMetIC predictions of a simulated model that gets each semantic word's and
    region's verdict right with probability `accuracy`, a clear margin from the cut either way
    (shares of 3x or 1/3 the threshold of the default token rule). Returns how many were stored."""
    from capscope.annotation.votes import iter_items
    from capscope.db import Prediction
    from capscope.metrics.constants import BETA, DEFAULT_TOKEN_RULE
    from capscope.metrics.words import region_threshold, word_threshold

    rows = []
    for item in iter_items(store, DATASET):
        view = {"id": item.external_id, "tokens": item.tokens,
                "regions": [{"index": i} for i in range(len(item.regions))]}
        truth = true_labels(view, seed)
        rng = random.Random(f"{seed}:model:{item.external_id}")
        n_words = sum(t["semantic"] for t in item.tokens)
        cut = word_threshold(DEFAULT_TOKEN_RULE, BETA, n_words, 1.0)
        region_cut = region_threshold(DEFAULT_TOKEN_RULE, BETA, len(item.regions))
        tokens = []
        for i, token in enumerate(item.tokens):
            if not token["semantic"]:
                tokens.append(None)
                continue
            says_correct = (i not in truth.wrong) == (rng.random() < accuracy)
            tokens.append(cut * 3 if says_correct else cut / 3)
        regions = [region_cut * 3 if (i in truth.mentioned) == (rng.random() < accuracy) else region_cut / 3
                   for i in range(len(item.regions))]
        rows.append(Prediction(caption_id=item.caption_id, metric="infometic", model_version="simulated",
                               token_scores=tokens, region_scores=regions))
    store.run_write(lambda session: session.add_all(rows))
    return len(rows)


def _write_captions(folder: Path, n: int) -> Path:
    """`n` captions over 20 small pictures, each naming colours and shapes, with two boxes each."""
    from PIL import Image

    (folder / "images").mkdir(exist_ok=True)
    for i in range(20):
        Image.new("RGB", (64, 48), (200, 10 * i, 40)).save(folder / "images" / f"img{i:02d}.png")
    colours, shapes = sorted(COLOURS), ("square", "circle", "triangle", "star")
    rows = []
    for i in range(n):
        rng = random.Random(i)
        text = (f"a {rng.choice(colours)} {rng.choice(shapes)} beside a {rng.choice(colours)} "
                f"{rng.choice(shapes)} on a {rng.choice(colours)} table")
        rows.append({"id": f"item{i:05d}", "image": f"img{i % 20:02d}.png", "caption": text,
                     "regions": [{"box": [2, 2, 30, 30]}, {"box": [30, 10, 60, 40]}]})
    path = folder / "captions.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def summary(result: dict) -> str:
    lines = [f"{result['items']} items, {result['controls']} controls at rate {result['rate']}",
             f"gold: of {result['semantic_words_judged']} semantic words of the non-control items, not the truth: "
             + ", ".join(f"{m} {n}" for m, n in result["gold_errors"].items()),
             f"{'annotator':14} {'true':>6} {'control':>8} {'95% interval':>16} {'quality':>8}"]
    for row in result["annotators"]:
        interval = row["control_interval"] or [float("nan")] * 2
        lines.append(f"{row['annotator']:14} {result['true_accuracy'][row['annotator']]:6.3f} "
                     f"{row['control_accuracy'] or float('nan'):8.3f} {interval[0]:7.3f}-{interval[1]:.3f} "
                     f"{row['quality'] or float('nan'):8.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
