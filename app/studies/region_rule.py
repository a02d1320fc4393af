"""Do region verdicts hold at any number of regions?
(`python -m capscope.studies.region_rule --out DIR`)

InfoMetIC's region scores share one softmax over every region (and the null
token), so the more regions an image has, the smaller each share: a fixed
cut (the paper's β = 0.1) that suits a handful of regions calls every region
"left out" at fifteen. This study puts the same demo scenes behind 4 to 40
regions and measures, per count, the AUROC of the region scores for
"mentioned" and the F1 of "mentioned" under the paper's fixed β, under the
`relative` rule (β·5/n, at most β: metrics.words.region_threshold) and under
the trivial rule that calls every region mentioned.

Each scene's regions are its shapes, then, in turn, proposals around a shape
(its box with every side moved by up to a sixth of its size, IoU >= 0.6 with
it, as a proposer gives several boxes around one object) and background
patches, until there are n, in a shuffled order. The caption is a clean demo
caption naming some of the shapes; a region is mentioned when it is, or lies
around, a shape the caption names. Scored with the demo model, regions given.
Writes DIR/region_rule.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from capscope.bench.gold_figures import f1
from capscope.demo.demo_captions import make_caption
from capscope.demo.demo_regions import distractor_box
from capscope.demo.scenes import make_scene, scene_rng
from capscope.metrics.constants import BETA
from capscope.metrics.regions import iou
from capscope.metrics.words import region_threshold

log = logging.getLogger(__name__)

COUNTS = (4, 8, 15, 25, 40)
RULES = ("paper", "relative")
MIN_PROPOSAL_IOU = 0.6


def proposal_around(box, rng, side: int = 224, attempts: int = 50):
    """A box around `box` as a proposer would give: each side moved by up to a sixth of the box's size."""
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    for _ in range(attempts):
        dx0, dx1 = rng.uniform(-w / 6, w / 6, size=2)
        dy0, dy1 = rng.uniform(-h / 6, h / 6, size=2)
        moved = (max(0, int(x0 + dx0)), max(0, int(y0 + dy0)), min(side, int(x1 + dx1)), min(side, int(y1 + dy1)))
        if moved[2] > moved[0] and moved[3] > moved[1] and iou(moved, box) >= MIN_PROPOSAL_IOU:
            return moved
    return tuple(box)


def scene_with_regions(seed: int, index: int, count: int) -> dict:
    """One scene, a clean caption, `count` regions (shapes, proposals around them, background), gold per region."""
    rng = scene_rng(seed, index)
    scene = make_scene(rng)
    caption = make_caption(scene, rng)
    regions = [(tuple(s.box), i) for i, s in enumerate(scene.shapes)][:count]
    turn = 0
    while len(regions) < count:
        if turn % 2 == 0:
            shape = int(rng.integers(len(scene.shapes)))
            regions.append((proposal_around(scene.shapes[shape].box, rng), shape))
        else:
            box = distractor_box(rng, scene)
            if box is not None:
                regions.append((tuple(box), None))
        turn += 1
    order = rng.permutation(len(regions))
    regions = [regions[i] for i in order]
    return {"id": f"s{index:04d}-n{count}", "image": scene.image(), "caption": caption.text,
            "regions": [{"box": [int(v) for v in box]} for box, _ in regions],
            "gold": [shape is not None and shape in caption.referents for _, shape in regions]}


def figures(gold: list[bool], scores: list[float], decided: dict[str, list[bool]]) -> dict:
    from sklearn.metrics import roc_auc_score

    auroc = roc_auc_score(gold, scores) if 0 < sum(gold) < len(gold) else None
    return {"regions": len(gold), "mentioned": int(sum(gold)), "auroc": auroc,
            **{f"f1_{rule}": f1(gold, flags) for rule, flags in decided.items()},
            "f1_trivial": f1(gold, [True] * len(gold))}


def run(n: int, seed: int, counts: tuple[int, ...] = COUNTS, batch: int = 16) -> dict:
    from tqdm import tqdm

    from capscope.metrics.scorer import Scorer

    scorer = Scorer(["infometic"], device="cpu", regions="given")
    out = {"n_scenes": n, "seed": seed, "beta": BETA, "counts": {}}
    for count in tqdm(counts, desc="region counts", unit="count"):
        items = [scene_with_regions(seed, i, count) for i in range(n)]
        rows = []
        for start in range(0, n, batch):
            rows += scorer.score_batch([{k: item[k] for k in ("id", "image", "caption", "regions")}
                                        for item in items[start : start + batch]])
        gold, scores, decided = [], [], {rule: [] for rule in RULES}
        for item, row in zip(items, rows):
            region_scores = row["metrics"]["infometic"]["region_scores"]
            gold += item["gold"]
            scores += region_scores
            for rule in RULES:
                cut = region_threshold(rule, BETA, len(region_scores))
                decided[rule] += [s > cut for s in region_scores]
        out["demo"] = rows[0]["model"]["demo"]
        out["counts"][str(count)] = {**figures(gold, scores, decided),
                                     "relative_threshold": region_threshold("relative", BETA, count)}
    return out


def table(result: dict) -> str:
    lines = ["| regions an image | regions (mentioned) | AUROC | F1 paper β = 0.1 | F1 relative (threshold) | "
             "F1 trivial |", "|---|---|---|---|---|---|"]
    fmt = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    for count, f in result["counts"].items():
        lines.append(f"| {count} | {f['regions']} ({f['mentioned']}) | {fmt(f['auroc'])} | {fmt(f['f1_paper'])} | "
                     f"{fmt(f['f1_relative'])} ({f['relative_threshold']:.3f}) | {fmt(f['f1_trivial'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scenes", type=int, default=60, help="demo scenes per region count (default 60)")
    parser.add_argument("--seed", type=int, default=9, help="default 9")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result = run(args.scenes, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "region_rule.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
