"""Are the words past a model's window judged as well as the words inside it?
(`python -m capscope.studies.long_captions --out DIR`)

Long demo captions: for each demo scene, `--sentences` true sentences about
it (demo captions, each describing some of its shapes), one of them, chosen at
random, with one word swapped so that its phrase fits no shape. Scored with the
demo model, long captions read in windows (`--long-captions windows`). Per
metric, the wrong-word F1 of the words its model reads whole (inside the old
window: what `--long-captions cut` reads) and of the words past it, beside the
trivial rule that flags every word, and for the InfoMetIC family under both
token rules. Writes DIR/long_captions.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from capscope.bench.gold_figures import confusion_counts, f1
from capscope.demo.demo_captions import make_caption, pollute
from capscope.demo.demo_regions import scene_regions
from capscope.demo.scenes import make_scene, scene_rng
from capscope.metrics import windows
from capscope.metrics.constants import BETA

log = logging.getLogger(__name__)

METRICS = ("infometic", "clip4dm", "infoclip", "hice")
RULE_METRICS = ("infometic", "infoclip")  # the token rule decides their verdicts


def long_item(seed: int, index: int, sentences: tuple[int, int], nlp) -> dict:
    """One scene with a long caption of true sentences, one word of one of them
    swapped; tokens carry gold labels as in a CapTokenEval file."""
    from capscope.metrics.text import tokenize

    rng = scene_rng(seed, index)
    scene = make_scene(rng)
    regions = scene_regions(scene, rng)
    n = int(rng.integers(sentences[0], sentences[1] + 1))
    captions = [make_caption(scene, rng) for _ in range(n)]
    wrong_at = int(rng.integers(n))
    captions[wrong_at] = pollute(captions[wrong_at], scene, rng)
    text, wrong = "", None
    for k, caption in enumerate(captions):
        offset = len(text) + (1 if text else 0)
        text += (" " if text else "") + caption.text
        if k == wrong_at:
            start, end = caption.wrong_span()
            wrong = (offset + start, offset + end)
    tokens = []
    for token in tokenize(text, nlp):
        label = None
        if token.semantic:
            label = "incorrect" if token.start < wrong[1] and wrong[0] < token.end else "correct"
        tokens.append({**token.to_dict(), "label": label})
    return {"id": f"long{index:05d}", "image": scene.image(), "caption": text, "tokens": tokens,
            "regions": [{"box": [int(v) for v in r.box]} for r in regions], "sentences": n}


def old_window_end(metric, item: dict) -> int:
    """Where the metric's model stops reading the caption (its `cut`)."""
    from capscope.metrics.text import Token

    tokens = [Token(t["text"], t["start"], t["end"], t["semantic"]) for t in item["tokens"]]
    return windows.cut(item["caption"], tokens, metric.fits).end


def judged(items: list[dict], rows: list[dict], metric: str, ends: list[int], decide) -> dict:
    """Gold and decided wrong-word flags, and word scores, of the labelled words,
    inside and past the old window."""
    out = {"inside": ([], [], []), "past": ([], [], [])}
    for item, row, end in zip(items, rows, ends):
        result = row["metrics"][metric]
        for t, token in enumerate(item["tokens"]):
            if token["label"] is None:
                continue
            decided = decide(result, t)
            side = "inside" if token["start"] < end else "past"
            out[side][0].append(token["label"] == "incorrect")
            out[side][1].append(decided is False)
            out[side][2].append(result["token_scores"][t])
    return out


def figures(gold: list[bool], decided: list[bool], scores: list[float | None]) -> dict:
    """Wrong-word F1 and its parts, beside the trivial rule that flags every word,
    and the AUROC of the word scores (lower = more likely wrong; an unscored word last)."""
    from sklearn.metrics import roc_auc_score

    tp, fp, fn = confusion_counts(gold, decided)
    ranks = [float("inf") if s is None else s for s in scores]
    auroc = roc_auc_score(gold, [-r for r in ranks]) if 0 < sum(gold) < len(gold) else None
    return {"words": len(gold), "wrong": int(sum(gold)), "f1": f1(gold, decided), "auroc": auroc,
            "recall": tp / (tp + fn) if tp + fn else None,
            "false_alarm_rate": fp / (len(gold) - tp - fn) if len(gold) > tp + fn else None,
            "trivial_f1": f1(gold, [True] * len(gold))}


def run(n: int, seed: int, sentences: tuple[int, int], batch: int = 16) -> dict:
    from tqdm import tqdm

    from capscope.metrics.scorer import Scorer

    scorer = Scorer(list(METRICS), device="cpu", regions="given", long_captions="windows")
    items = [long_item(seed, i, sentences, scorer.nlp) for i in range(n)]
    rows = []
    for start in tqdm(range(0, n, batch), desc="long captions", unit="batch"):
        chunk = items[start : start + batch]
        rows += scorer.score_batch([{k: item[k] for k in ("id", "image", "caption", "tokens", "regions")}
                                    for item in chunk])
    out = {"n_captions": n, "seed": seed, "sentences": list(sentences),
           "words_per_caption": float(np.mean([len(i["caption"].split()) for i in items])),
           "demo": rows[0]["model"]["demo"], "metrics": {}}
    for name in METRICS:
        metric = scorer.metrics[name]
        ends = [old_window_end(metric, item) for item in items]
        rules = {"relative": lambda r, t: r["token_correct"][t]}
        if name in RULE_METRICS:
            rules["paper"] = lambda r, t: None if r["token_scores"][t] is None else r["token_scores"][t] > BETA
        out["metrics"][name] = {
            "windows_per_caption": float(np.mean([len(r["metrics"][name]["windows"]) for r in rows])),
            "truncated": sum(r["metrics"][name]["truncated"] for r in rows),
            **{rule: {side: figures(*pair) for side, pair in judged(items, rows, name, ends, decide).items()}
               for rule, decide in rules.items()},
        }
    return out


def table(result: dict) -> str:
    lines = ["| metric | rule | words inside | F1 inside (trivial) | words past | F1 past (trivial) | gap | "
             "AUROC inside, past |", "|---|---|---|---|---|---|---|---|"]
    for name, m in result["metrics"].items():
        for rule in ("relative", "paper"):
            if rule not in m:
                continue
            inside, past = m[rule]["inside"], m[rule]["past"]
            gap = None if inside["f1"] is None or past["f1"] is None else past["f1"] - inside["f1"]
            lines.append(f"| {name} | {rule} | {inside['words']} ({inside['wrong']} wrong) | "
                         f"{_num(inside['f1'])} ({_num(inside['trivial_f1'])}) | {past['words']} ({past['wrong']} wrong) | "
                         f"{_num(past['f1'])} ({_num(past['trivial_f1'])}) | {_num(gap, '+.3f')} | "
                         f"{_num(inside['auroc'])}, {_num(past['auroc'])} |")
    return "\n".join(lines)


def _num(value, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capscope.studies.long_captions", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200, help="long captions (one per scene)")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--sentences", type=int, nargs=2, default=(6, 12), metavar=("MIN", "MAX"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = run(args.n, args.seed, tuple(args.sentences))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "long_captions.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
