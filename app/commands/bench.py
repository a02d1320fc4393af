"""`capscope bench`: speed figures (docs/formats.md §7) measured in one run."""
from __future__ import annotations

import argparse
import json

from capscope.metrics.config import DEVICES, add_flags


ALL_REGION_SOURCES = "classic,sam,yolo,fastsam,mobilesam"
# The parts a plain `capscope bench` leaves out, to finish in minutes: what each measures and the flag that adds it
# (all of them took the default run past 15 minutes on 2 cores)
LONG_PARTS = {
    "region_sources": ("region sources on a 640 px image", f"--region-sources {ALL_REGION_SOURCES}"),
    "caption_words": ("long captions read in windows", "--caption-words 20,80,200"),
    "ray_workers": ("capscope score --engine ray against the local run", "--ray-workers 2"),
    "precision": ("bf16 and fp16 against fp32", "--precision fp32,bf16,fp16"),
    "throughput_pairs": ("CLIP-S alone at scale, with the host's ceiling", "--throughput-pairs 256"),
    "click_segmenters": ("click to segment with SAM and SAM 2 against the naive way",
                         "--click-segmenters classic,sam,sam2"),
}


def left_out(args: argparse.Namespace) -> list[str]:
    """The long parts this run does not measure, each with the flag that adds it."""
    skipped = {"region_sources": not args.region_sources.strip(), "caption_words": not args.caption_words.strip(),
               "ray_workers": args.ray_workers == 0, "precision": args.precision.strip() == "fp32",
               "throughput_pairs": args.throughput_pairs == 0,
               "click_segmenters": not {"sam", "sam2"} <= set(click_segmenters(args.click_segmenters))}
    return [f"{what} ({flag})" for part, (what, flag) in LONG_PARTS.items() if skipped[part]]


def register(sub) -> None:
    bench = sub.add_parser("bench", help="measure scoring speed against plain open_clip baselines (offline, random weights)")
    bench.add_argument("--json", action="store_true", help="print one JSON object (docs/formats.md §7)")
    bench.add_argument("--device", default="auto", choices=DEVICES)
    bench.add_argument("--pairs", type=int, default=24, help="distinct image-caption pairs for pairs/s")
    bench.add_argument("--naive-pairs", type=int, default=8,
                       help="of those, how many (evenly spaced) the naive loops time: a loop with no batching and no "
                            "cache runs at the same rate per pair on any like pairs (0: all)")
    bench.add_argument("--rescore-runs", type=int, default=50, help="timed re-scores after warm-up (at least 50 for the contract)")
    bench.add_argument("--batch-size", type=int, default=16)
    bench.add_argument("--repeats", type=int, default=3,
                       help="pairs/s, capscope's and the naive loop's alike, are the best of this many runs "
                            "(a shared machine's noise only ever slows a run down)")
    bench.add_argument("--captions-per-image", type=int, default=5,
                       help="also time files where each image carries this many captions (details.shared_images; 1: skip)")
    bench.add_argument("--metric", action="append", choices=["clip-s", "infometic", "hice", "clip4dm"],
                       help="default: all four")
    bench.add_argument("--region-sources", default="",
                       help=f"comma-separated region sources timed on a 640 px image, e.g. {ALL_REGION_SOURCES} "
                            "(default: none)")
    bench.add_argument("--region-weights", default="auto", choices=["auto", "random"],
                       help="auto: a region source's real weights where they can be had, else random ones of the same "
                            "architecture; random: never look for real ones (a machine that must not download)")
    bench.add_argument("--throughput-pairs", type=int, default=0,
                       help="also time CLIP-S alone on this many distinct images at each precision, with the host's "
                            "ceiling (details.clip_s_throughput; 0: skip)")
    bench.add_argument("--caption-words", default="",
                       help="also time each metric on captions of about these many words, read in windows, beside "
                            "the short ones, e.g. 20,80,200 (details.caption_length; default: none)")
    bench.add_argument("--ray-workers", type=int, default=0,
                       help="also time capscope score --engine ray with this many workers on this machine against "
                            "the local run, e.g. 2 (details.ray; needs the ray extra; default 0: skip)")
    bench.add_argument("--ray-rows", type=int, default=100, help="rows of the file both runs score")
    bench.add_argument("--precision", default="fp32",
                       help="comma-separated precisions timed against fp32 on the same pairs, with the change in "
                            "scores and verdicts, e.g. fp32,bf16,fp16 (details.precision; default fp32 alone: skip)")
    bench.add_argument("--click-segmenters", default="classic",
                       help="comma-separated click segmenters timed per click once the image is set, beside the "
                            "naive way, on a 640 px image: classic,sam,sam2 (details.click_segment; default classic; "
                            "none: skip)")
    add_flags(bench, ["runtime"])
    bench.add_argument("--plot", default=None, help="write a PNG of where the time goes in one re-score")
    bench.set_defaults(func=run_bench)


def checked_precisions(text: str) -> tuple[str, ...]:
    from capscope.metrics.constants import check_precision
    from capscope.common.errors import CapscopeError

    try:
        return tuple(dict.fromkeys(check_precision(p.strip()) for p in text.split(",") if p.strip()))
    except ValueError as err:
        raise CapscopeError(str(err)) from None


def caption_words(text: str) -> tuple[int, ...]:
    from capscope.common.errors import CapscopeError

    try:
        words = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        raise CapscopeError(f"--caption-words takes word counts such as 20,80,200, not {text!r}") from None
    if any(w < 1 for w in words):
        raise CapscopeError("--caption-words: each count must be at least 1")
    return words


def click_segmenters(text: str) -> tuple[str, ...]:
    from capscope.bench.speed.click_timings import CLICK_SEGMENTERS
    from capscope.common.errors import CapscopeError

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"))
    unknown = [n for n in names if n not in CLICK_SEGMENTERS]
    if unknown:
        raise CapscopeError(f"--click-segmenters: unknown {unknown[0]!r}; choose from {', '.join(CLICK_SEGMENTERS)}")
    return names


def at_least_one(value: int, flag: str) -> int:
    from capscope.common.errors import CapscopeError

    if value < 1:
        raise CapscopeError(f"{flag} must be at least 1, not {value}")
    return value


def run_bench(args: argparse.Namespace) -> int:
    from capscope.bench import speed

    sources = tuple(s for s in args.region_sources.split(",") if s.strip())
    result = speed.run(
        device=args.device, n_pairs=args.pairs, rescore_runs=args.rescore_runs, batch_size=args.batch_size,
        metrics=tuple(args.metric or speed.BENCH_METRICS), region_sources=sources,
        captions_per_image=args.captions_per_image, ray_workers=args.ray_workers, ray_rows=args.ray_rows,
        precisions=checked_precisions(args.precision), region_weights=args.region_weights,
        throughput_pairs=args.throughput_pairs, caption_words=caption_words(args.caption_words),
        repeats=at_least_one(args.repeats, "--repeats"), runtime=args.runtime,
        click_segmenters=click_segmenters(args.click_segmenters), naive_pairs=max(args.naive_pairs, 0),
    )
    result["details"]["left_out"] = left_out(args)
    if args.plot:
        from capscope.bench.plot import rescore_plot

        rescore_plot(result, args.plot)
    if args.json:
        print(json.dumps(result))
        return 0
    print(speed.summary(result))
    return 0
