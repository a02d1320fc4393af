"""Does `capscope diagnose` find what is wrong with a captioner?
(`python -m capscope.studies.diagnose_recovery --out DIR`)

Three captioners of known faults caption the same demo scenes, each in the
COCO results layout beside one COCO captions annotations file (three true
captions per scene as references). All start from the same true caption of a
scene; then
- `colours` swaps one colour word in `--swap-share` of its captions,
- `shapes` swaps one shape word in `--swap-share` of its captions,
- `nearly-clean` swaps one size, colour or shape word in `--clean-share`,
each swap chosen so that its phrase fits no shape of the scene (a caption with
no such word stays true). `diagnose_captioners` scores them with the demo
model and the study sets what it found beside the truth: each captioner's
wrong-word rate, its dominant kind of error, its most frequent wrong words,
and the order of the captioners with paired 95% intervals. Writes
DIR/diagnose_recovery.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path

import numpy as np

from capscope.demo.demo_captions import make_caption, pollute
from capscope.demo.scenes import ATTRIBUTES, make_scene, scene_rng

log = logging.getLogger(__name__)

CAPTIONERS = {"colours": ("colour",), "shapes": ("kind",), "nearly-clean": ATTRIBUTES}
KIND_OF_ROLE = {"colour": "attribute", "size": "attribute", "kind": "object"}  # the word lists' kinds
REFERENCES = 3
TOP = 3          # most frequent wrong words compared


def write_captioners(out: Path, n: int, seed: int, swap_share: float, clean_share: float,
                     captioners: tuple[str, ...] | None = None) -> dict:
    """Scenes, the annotations file and each captioner's results file under
    `out` (`captioners`: some of CAPTIONERS, default all; the scenes and captions
    are the same whichever are written); returns the truth: per captioner the
    swapped words and their kinds."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    written = tuple(captioners or CAPTIONERS)
    results: dict[str, list] = {name: [] for name in CAPTIONERS}
    truth = {name: {"captions": 0, "swapped": [], "kinds": Counter()} for name in CAPTIONERS}
    for index in range(n):
        rng = scene_rng(seed, index)
        scene = make_scene(rng)
        file_name = f"scene{index:05d}.png"
        scene.image().save(out / "images" / file_name)
        images.append({"id": index + 1, "file_name": file_name, "width": 224, "height": 224})
        for k in range(REFERENCES):
            annotations.append({"id": len(annotations) + 1, "image_id": index + 1,
                                "caption": make_caption(scene, rng).text})
        true_caption = make_caption(scene, rng)
        for name, roles in CAPTIONERS.items():
            share = clean_share if name == "nearly-clean" else swap_share
            caption = true_caption
            if rng.random() < share:
                try:
                    caption = pollute(true_caption, scene, rng, roles=roles)
                except ValueError:  # no word of these roles can be made wrong: the caption stays true
                    pass
            if caption.wrong_word is not None:
                word = caption.words[caption.wrong_word]
                truth[name]["swapped"].append(word.text)
                truth[name]["kinds"][KIND_OF_ROLE[word.role]] += 1
            truth[name]["captions"] += 1
            results[name].append({"image_id": index + 1, "caption": caption.text})
    (out / "captions.json").write_text(json.dumps({"images": images, "annotations": annotations}))
    for name in written:
        (out / f"{name}.json").write_text(json.dumps(results[name]))
    return {name: truth[name] for name in written}


def compare_with_truth(summary, truth: dict, metric: str) -> dict:
    """Per captioner, what diagnose found beside the truth; and the order."""
    out = {"captioners": {}, "comparisons": []}
    for name, t in truth.items():
        found = summary.models[name].metrics[metric]
        judged = found.words.judged
        true_rate = len(t["swapped"]) / judged if judged else None
        true_top = [w for w, _ in Counter(t["swapped"]).most_common(TOP)]
        out["captioners"][name] = {
            "captions": t["captions"], "swapped_words": len(t["swapped"]), "words_judged": judged,
            "true_wrong_rate": true_rate, "found_wrong_rate": found.words.wrong_rate,
            "found_ci95": list(found.words.ci95),
            "true_dominant_type": t["kinds"].most_common(1)[0][0] if t["kinds"] else None,
            "found_dominant_type": found.dominant_error_type,
            "true_top_words": true_top,
            "found_top_words": [w.word for w in found.top_wrong_words[:TOP]],
            "found_share_of_errors": {k: e.share_of_errors for k, e in found.error_types.items()},
            "overall": found.scores["overall"].mean if "overall" in found.scores else None,
        }
    for c in summary.comparisons:
        if c.metric == metric and c.key == "overall":
            ta, tb = (len(truth[x]["swapped"]) / truth[x]["captions"] for x in (c.a, c.b))
            out["comparisons"].append({"a": c.a, "b": c.b, "true_swap_difference": ta - tb,
                                       "mean_difference": c.mean_difference, "ci95": list(c.ci95),
                                       "excludes_zero": c.decided, "a_wins": c.a_wins, "b_wins": c.b_wins})
    return out


def run(out: Path, n: int, seed: int, swap_share: float, clean_share: float, metric: str, draws: int) -> dict:
    from capscope.diagnose import diagnose_captioners

    truth = write_captioners(out, n, seed, swap_share, clean_share)
    summary = diagnose_captioners({name: out / f"{name}.json" for name in CAPTIONERS}, out / "report",
                                  metrics=[metric], annotations=out / "captions.json", images=out / "images",
                                  demo=True, device="cpu", draws=draws, seed=seed)
    found = compare_with_truth(summary, truth, metric)
    found["setup"] = {"scenes": n, "seed": seed, "swap_share": swap_share, "clean_share": clean_share,
                      "metric": metric, "type_source": summary.type_source, "bootstrap": draws}
    (out / "diagnose_recovery.json").write_text(json.dumps(found, indent=1) + "\n")
    return found


def table(found: dict) -> str:
    lines = ["| captioner | wrong rate: truth | found [95%] | dominant kind: truth / found | top wrong words: truth | found |",
             "|---|---|---|---|---|---|"]
    for name, c in found["captioners"].items():
        low, high = c["found_ci95"]
        lines.append(f"| {name} | {c['true_wrong_rate']:.3f} | {c['found_wrong_rate']:.3f} [{low:.3f}, {high:.3f}] | "
                     f"{c['true_dominant_type']} / {c['found_dominant_type']} | {', '.join(c['true_top_words'])} | "
                     f"{', '.join(c['found_top_words'])} |")
    lines += ["", "| a | b | true swap-rate difference | overall a − b [95%] | a wins / b wins |", "|---|---|---|---|---|"]
    for c in found["comparisons"]:
        low, high = c["ci95"]
        lines.append(f"| {c['a']} | {c['b']} | {c['true_swap_difference']:+.3f} | {c['mean_difference']:+.4f} "
                     f"[{low:+.4f}, {high:+.4f}] | {c['a_wins']} / {c['b_wins']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, default=300, help="demo scenes, one caption each per captioner")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--swap-share", type=float, default=0.6)
    parser.add_argument("--clean-share", type=float, default=0.1)
    parser.add_argument("--metric", default="infometic")
    parser.add_argument("--bootstrap", type=int, default=1000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    np.seterr(all="ignore")
    found = run(args.out, args.n, args.seed, args.swap_share, args.clean_share, args.metric, args.bootstrap)
    print(table(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
