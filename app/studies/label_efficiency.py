"""How many labels does fine-tuning need, and does asking for the uncertain
items first help? (`python -m capscope.studies.label_efficiency --out DIR`)

For each appearance shift of the demo world (capscope.demo.shifts), in one run:
- a pool of shifted scenes (two items per scene, a clean caption and its
  polluted twin) and a separate held-out set of shifted scenes;
- orders over the pool (`--orders`): random (one per `--random-seeds`),
  uncertainty (the parent model's word and region verdicts closest to their
  threshold first, one caption per image per round: the queue's own
  `uncertainty` order), likely-wrong (the items whose words the parent most
  expects to be wrong first, one caption per image per round; a study order,
  not a queue order), and rounds (a random first round, then each round the
  items most uncertain under the child fine-tuned on the labels so far: the
  loop of train, activate, re-score the queue, label again);
- for each budget (items labelled), a simulated annotator labels the first
  items of the order from the gold labels, each label flipped with
  probability `noise`; the parent is fine-tuned on them with a fixed number of
  steps and scored on the held-out set and on unshifted demo scenes (does it
  forget its own world?).
Writes DIR/label_efficiency.json and DIR/label_efficiency.png.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

ORDERS = ("random", "uncertainty", "likely-wrong", "rounds")
KEYS = ("incorrect_token_f1", "incorrect_token_auroc", "text_accuracy", "region_auroc")


def simulated_labels(items: list[dict], noise: float, seed: int) -> list[dict]:
    """One annotator per item drawing on the gold labels, each flipped with probability `noise`."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise is a probability, from 0 to 1; got {noise}")
    rng = np.random.default_rng(seed)
    flip = {"correct": "incorrect", "incorrect": "correct", "mentioned": "unmentioned", "unmentioned": "mentioned"}
    out = []
    for item in items:
        tokens = [dict(t, label=flip[t["label"]] if t.get("label") and rng.random() < noise else t.get("label"))
                  for t in item["tokens"]]
        regions = [dict(r, label=flip[r["label"]] if r.get("label") and rng.random() < noise else r.get("label"))
                   for r in item["regions"]]
        out.append(dict(item, tokens=tokens, regions=regions))
    return out


def uncertainty_order(items: list[dict], predictions: list[dict]) -> list[int]:
    """Item indices in the queue's own `uncertainty` order (annotation/queue.py):
    word and region verdicts closest to the threshold first, one caption per
    image per round."""
    from capscope.annotation.queue import item_uncertainty
    from capscope.metrics.constants import DEFAULT_TOKEN_RULE

    return _interleaved(items, [item_uncertainty("infometic", p.get("token_scores"), p.get("region_scores"),
                                                 token_rule=DEFAULT_TOKEN_RULE, word_scale=1.0,
                                                 semantic=_semantic(item))
                                for item, p in zip(items, predictions)])


def likely_wrong_order(items: list[dict], predictions: list[dict]) -> list[int]:
    """Item indices, the items whose semantic words the parent most expects to
    be wrong first (the mean of 1 - `verdict_probability` against the word
    threshold), one caption per image per round. Items without a scored word come last."""
    from capscope.annotation.uncertainty import scored_words, verdict_probability
    from capscope.metrics.constants import BETA, DEFAULT_TOKEN_RULE
    from capscope.metrics.words import word_threshold

    def expected_wrong(item: dict, p: dict) -> float | None:
        words = scored_words(p.get("token_scores") or [], _semantic(item))
        threshold = word_threshold(DEFAULT_TOKEN_RULE, BETA, len(words), 1.0)
        return float(np.mean([1.0 - verdict_probability(s, threshold) for s in words])) if words else None

    return _interleaved(items, [expected_wrong(item, p) for item, p in zip(items, predictions)])


def _semantic(item: dict) -> list[bool]:
    return [bool(t.get("semantic")) for t in item["tokens"]]


def _interleaved(items: list[dict], values: list[float | None]) -> list[int]:
    """Item indices, highest value first (None: last), one caption per image per round."""
    from capscope.annotation.queue import interleave_by_image

    images = {image: k for k, image in enumerate(sorted({str(item["image"]) for item in items}))}
    return interleave_by_image([(i, images[str(item["image"])], -1.0 if value is None else value)
                                for i, (item, value) in enumerate(zip(items, values))])


def in_rounds(pool: list[dict], first: list[int], budget: int, args, fine_tune,
              name: str = "rounds") -> tuple[Path, list[dict]]:
    """The loop a team runs with the queue: label `round_size` items, fine-tune,
    score the rest of the pool with the new model, label the `round_size` most
    uncertain of them under it (the queue's `uncertainty` order), fine-tune
    again on everything labelled so far, and so on up to `budget`. The first
    round is the first items of `first` (a random order: the parent's doubt
    says little on a shift it fails on). Each fine-tune starts from the parent
    with the same steps as the other orders, so only the choice of items
    differs. Returns (the last child, what each round asked for)."""
    from capscope.bench.evaluate import predict

    labels = simulated_labels(pool, args.noise, args.seed + 7)   # each item's labels, whichever round asks
    chosen = [int(i) for i in first[: min(args.round_size, budget)]]
    asked = [{"order": "random", "items": len(chosen)}]
    child = fine_tune([labels[i] for i in chosen], f"{name}-{budget}-1")
    while len(chosen) < budget:
        taken = set(chosen)
        rest = [i for i in range(len(pool)) if i not in taken]
        unlabelled = [pool[i] for i in rest]
        predictions, _ = predict(_scorer(child), "infometic", unlabelled, Path("."))  # absolute paths
        ranked = [rest[k] for k in uncertainty_order(unlabelled, predictions)]
        more = ranked[: min(args.round_size, budget - len(chosen))]
        chosen += more
        asked.append({"order": "uncertainty", "items": len(more), "wrong_words": _wrong_words([pool[i] for i in more])})
        child = fine_tune([labels[i] for i in chosen], f"{name}-{budget}-{len(asked)}")
    return child, asked


def _wrong_words(items: list[dict]) -> int:
    return sum(t.get("label") == "incorrect" for item in items for t in item["tokens"])


def run(args) -> dict:
    from capscope.bench.evaluate import predict
    from capscope.bench.gold_figures import f1_difference
    from capscope.demo.dataset import write_demo_data
    from capscope.common.jsonl import read_json_lines
    from capscope.metrics.loading import demo_model_path
    from capscope.train.finetune import FinetuneConfig, finetune

    out = Path(args.out)
    random_seeds = args.random_seeds or [args.seed]
    parent = Path(args.init) if args.init else demo_model_path()
    own = out / "own"
    write_demo_data(own, args.held_scenes, seed=args.seed + 2, progress=False)
    result = {"parent": parent.name, "steps": args.steps, "noise": args.noise, "budgets": args.budgets,
              "replay": args.replay, "orders": args.orders,
              **({"round_size": args.round_size} if "rounds" in args.orders else {}),
              **({"random_seeds": random_seeds} if len(random_seeds) > 1 else {}),
              "pool_scenes": args.pool_scenes, "held_scenes": args.held_scenes, "shifts": {}}
    for shift in args.shifts:
        pool_dir, held_dir = out / shift / "pool", out / shift / "held"
        write_demo_data(pool_dir, args.pool_scenes, seed=args.seed, progress=False, shift=shift)
        write_demo_data(held_dir, args.held_scenes, seed=args.seed + 1, progress=False, shift=shift)
        pool = read_json_lines(pool_dir / "captokeneval.jsonl")
        for item in pool:
            item["image"] = str(pool_dir / item["image"])
        permutations = {p: list(np.random.default_rng(p).permutation(len(pool))) for p in random_seeds}
        orders = {}
        if {"uncertainty", "likely-wrong"} & set(args.orders):
            parent_predictions = predict(_scorer(parent), "infometic", pool, pool_dir)[0]
            orders["uncertainty"] = uncertainty_order(pool, parent_predictions)
            orders["likely-wrong"] = likely_wrong_order(pool, parent_predictions)
        held_items = read_json_lines(held_dir / "captokeneval.jsonl")
        before = _held_out(parent, held_dir, held_items)[0]
        shift_result = {"before": {k: before.get(k) for k in KEYS}, "runs": []}
        decided: dict[tuple[str, int], list[list[dict]]] = {}   # (order, labels): each child's held-out verdicts

        def fine_tune(chosen: list[dict], name: str, order_name: str) -> Path:
            child = out / shift / f"{name}.pt"
            finetune(FinetuneConfig(
                out=child, init=parent, items=chosen, base_dir=pool_dir,
                labels={"source": "simulated", "order": order_name}, holdout=0.0, minutes=None,
                steps=args.steps, seed=args.seed, threads=args.threads, replay=args.replay, progress=False))
            return child

        for order_name, permutation in _studied(args.orders, random_seeds):
            ranked = permutations[permutation] if permutation is not None else orders[order_name]
            name = order_name if permutation is None or len(random_seeds) == 1 else f"{order_name}{permutation}"
            for budget in args.budgets:
                started = time.monotonic()
                if order_name == "rounds":
                    child, asked = in_rounds(pool, ranked, budget, args,
                                             lambda chosen, child_name: fine_tune(chosen, child_name, "rounds"), name)
                    asked_for = {"rounds": asked}
                else:
                    first = [pool[i] for i in ranked[:budget]]
                    child = fine_tune(simulated_labels(first, args.noise, args.seed + budget), f"{name}-{budget}",
                                      order_name)
                    asked_for = {"wrong_words": _wrong_words(first)}
                after, verdicts = _held_out(child, held_dir, held_items)
                decided.setdefault((order_name, budget), []).append(verdicts)
                run = {"order": order_name, **({"permutation": permutation} if permutation is not None else {}),
                       "labels": budget, **{k: after.get(k) for k in KEYS},
                       "incorrect_token_f1_ci95": _rounded(f1_difference(held_items, [verdicts])["ci95"]),
                       "own_world_f1": _own_world_f1(child, own),
                       "seconds": round(time.monotonic() - started, 1), **asked_for}
                log.info("%s %s", shift, run)
                shift_result["runs"].append(run)
                shift_result["against_random"] = against_random(held_items, decided)
                (out / "label_efficiency.json").write_text(
                    json.dumps(result | {"shifts": result["shifts"] | {shift: shift_result}}, indent=1))
        result["shifts"][shift] = shift_result
    result["parent_own_world_f1"] = _own_world_f1(parent, own)
    (out / "label_efficiency.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "label_efficiency.png")
    return result


def _studied(orders: list[str], random_seeds: list[int]) -> list[tuple[str, int | None]]:
    """(order, permutation seed) pairs to run: random and rounds (whose first
    round is random) once per seed, the others once."""
    return [(order, seed) for order in orders
            for seed in (random_seeds if order in ("random", "rounds") else [None])]


def _scorer(checkpoint: Path):
    from capscope.metrics.scorer import Scorer

    return Scorer(["infometic"], device="cpu", regions="given", infometic_checkpoint=str(checkpoint),
                  token_rule="relative")


def _held_out(checkpoint: Path, folder: Path, items: list[dict]) -> tuple[dict, list[dict]]:
    """The checkpoint's figures on the gold items of a demo-data folder, and
    its predictions there, decided at its own word threshold."""
    from capscope.bench.evaluate import figures_of, predict, redecided, word_scale_of
    from capscope.metrics.constants import BETA
    from capscope.metrics.verdict import Verdict

    scorer = _scorer(checkpoint)
    predictions, errors = predict(scorer, "infometic", items, folder)
    scale = word_scale_of(scorer, "infometic")
    figures = figures_of(items, predictions, errors, "infometic", token_rule="relative", beta=BETA, word_scale=scale)
    return figures, redecided(items, predictions, Verdict("relative", BETA, scale), "infometic")


def _own_world_f1(checkpoint: Path, folder: Path) -> float | None:
    from capscope.common.jsonl import read_json_lines

    return _held_out(checkpoint, folder, read_json_lines(folder / "captokeneval.jsonl"))[0]["incorrect_token_f1"]


def against_random(items: list[dict], decided: dict[tuple[str, int], list[list[dict]]]) -> list[dict]:
    """Each other order's held-out F1 less random order's (the mean over its
    permutations), with the same labels and with twice as many (the goal: at
    most half the labels for the same F1), each with a paired bootstrap 95%
    interval over held-out images."""
    from capscope.bench.gold_figures import f1_difference

    out = []
    for (order, labels), children in decided.items():
        for random_labels in (labels, 2 * labels) if order != "random" else ():
            if ("random", random_labels) in decided:
                found = f1_difference(items, children, decided[("random", random_labels)])
                out.append({"order": order, "labels": labels, "random_labels": random_labels,
                            "f1_difference": round(found["value"], 4), "ci95": _rounded(found["ci95"])})
    return out


def _rounded(interval: list[float] | None) -> list[float] | None:
    return None if interval is None else [round(x, 4) for x in interval]


def plot(result: dict, path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shifts = list(result["shifts"])
    fig, axes = plt.subplots(1, len(shifts), figsize=(4.2 * len(shifts), 3.4), squeeze=False)
    for ax, shift in zip(axes[0], shifts):
        data = result["shifts"][shift]
        for order, style in (("random", "o--"), ("uncertainty", "s-"), ("likely-wrong", "d-"), ("rounds", "^-")):
            by_budget: dict[int, list[float]] = {}
            for r in data["runs"]:
                if r["order"] == order:
                    by_budget.setdefault(r["labels"], []).append(r["incorrect_token_f1"])
            if not by_budget:
                continue
            budgets = sorted(by_budget)
            f1s = [by_budget[b] for b in budgets]
            runs_per_budget = max(map(len, f1s))  # random order over several permutations: their mean and range
            line, = ax.plot(budgets, [float(np.mean(v)) for v in f1s], style,
                            label=f"{order} (mean of {runs_per_budget})" if runs_per_budget > 1 else order)
            if runs_per_budget > 1:
                ax.fill_between(budgets, [min(v) for v in f1s], [max(v) for v in f1s], color=line.get_color(), alpha=0.15)
            else:
                _interval_bars(ax, [r for r in data["runs"] if r["order"] == order], line.get_color())
        ax.axhline(data["before"]["incorrect_token_f1"], color="grey", lw=1, label="before fine-tuning")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["labels"] for r in data["runs"]}))
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("labelled items")
        ax.set_ylabel("held-out wrong-word F1")
        ax.set_title(f"shift: {shift}", fontsize=10)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _interval_bars(ax, runs: list[dict], color) -> None:
    """Each run's bootstrap 95% interval of its held-out F1, where it has one."""
    runs = [r for r in runs if r.get("incorrect_token_f1_ci95")]
    if runs:
        f1s = [r["incorrect_token_f1"] for r in runs]
        ax.errorbar([r["labels"] for r in runs], f1s, fmt="none", ecolor=color, capsize=3, lw=1,
                    yerr=[[f - r["incorrect_token_f1_ci95"][0] for f, r in zip(f1s, runs)],
                          [r["incorrect_token_f1_ci95"][1] - f for f, r in zip(f1s, runs)]])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--init", default=None, help="parent checkpoint (default: the bundled demo model)")
    parser.add_argument("--shifts", nargs="+", default=["dark", "outline"])
    parser.add_argument("--budgets", nargs="+", type=int, default=[50, 100, 200, 400])
    parser.add_argument("--orders", nargs="+", choices=ORDERS, default=["random", "uncertainty"],
                        help="rounds: label --round-size items at random, fine-tune, then each next round the "
                             "items most uncertain under the newest child")
    parser.add_argument("--round-size", type=int, default=100)
    parser.add_argument("--pool-scenes", type=int, default=300)
    parser.add_argument("--held-scenes", type=int, default=1000,
                        help="held-out scenes; on 80 (160 items) one child's F1 stood 0.10 above its F1 on 1000")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--noise", type=float, default=0.03, help="chance the simulated annotator flips a label")
    parser.add_argument("--replay", default="demo", help="the parent's own world mixed in (see --replay of train infometic)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-seeds", nargs="+", type=int, default=None,
                        help="the permutation seeds of random order and of rounds' first round, one run each "
                             "(default: --seed)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.round_size < 1:
        parser.error("--round-size must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = run(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
