"""`capscope bench`: speed figures of docs/formats.md §7, measured in one run.

Everything is built offline: open_clip ViT-B-32 with random weights (speed does
not depend on the weights), an InfoMetIC checkpoint with random weights in the
released layout (saved to a temporary file and loaded through
`Scorer(infometic_checkpoint=FILE)`, the user's path), and scenes of the demo
world (demo.scenes) whose shapes' boxes are the given regions.

Baselines, as the contract defines them:
- word encoding: the same pieces (every occurrence, as the released InfoMetIC
  code encodes every position) in one batch at the full 77-token context with
  plain open_clip `encode_text`;
- naive pairs/s: the same metric, model and regions, one pair at a time with
  plain open_clip calls: `encode_image` on the pair's image and crops,
  `encode_text` at 77 tokens, no batching across pairs and no cache;
- re-score: a new caption on an image whose features are cached, one pair
  through `Scorer.score`, timed end to end after warm-up.

Beside the contract's figures (`details`): the share of the naive loop spent in
the image tower (both paths encode the same images, so it bounds the ratio on a
CPU), pairs/s on files in which each image carries several captions, and, when
Ray is installed, `capscope score --engine ray` against the local run on one
file (`ray`: the Ray path's overhead on one machine).

The run and its summary are here; the parts are timed_pairs (the scenes and
captions), timed_models (the random-weight models and the naive loop),
scoring_timings, precision_timings, click_timings, region_timings and
ray_timings. Their names are offered here too.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from capscope.bench.speed.click_timings import click_latency, prompt_quality
from capscope.bench.speed.precision_timings import (
    PRECISION_METRICS, clip_s_throughput, free_towers, pass_width, precision_figures, precision_gaps, row_gaps,
)
from capscope.bench.speed.ray_timings import SCORE_LOG, ray_speed, timed_score
from capscope.bench.speed.region_timings import random_checkpoint, region_source_seconds
from capscope.bench.speed.scoring_timings import (
    best_time, caption_length_speed, machine, pairs_per_second, peak_gpu_mb, peak_rss_mb, percentile,
    reset_peak_gpu, rescore_breakdown, rescore_ms, synchronize, timed_sections, word_encoding_speedup,
)
from capscope.bench.speed.timed_models import (
    BENCH_METRICS, CLIP_MODEL, NaiveRunner, build_models, clear_caches, model_files, naive_pairs_per_second,
    runtime_costs, text_backbone,
)
from capscope.bench.speed.timed_pairs import (
    OPENINGS, make_long_pairs, make_pairs, make_shared_pairs, scene, write_pairs_file,
)
from capscope.metrics.loading import resolve_device

__all__ = [
    "BENCH_METRICS", "CLIP_MODEL", "OPENINGS", "PRECISION_METRICS", "SCORE_LOG", "NaiveRunner", "best_time",
    "build_models", "caption_length_speed", "clear_caches", "clip_s_throughput", "free_towers", "machine",
    "make_long_pairs", "make_pairs", "make_shared_pairs", "model_files", "naive_pairs_per_second",
    "pairs_per_second", "pass_width", "peak_gpu_mb", "peak_rss_mb", "percentile", "precision_figures",
    "precision_gaps", "random_checkpoint", "ray_speed", "region_source_seconds", "reset_peak_gpu",
    "rescore_breakdown", "rescore_ms", "row_gaps", "run", "scene", "spread", "summary", "synchronize", "text_backbone",
    "timed_score", "timed_sections", "word_encoding_speedup", "write_pairs_file",
]


def run(device: str = "auto", n_pairs: int = 24, rescore_runs: int = 50, batch_size: int = 16,
        metrics=BENCH_METRICS, region_sources=("classic", "sam", "yolo", "fastsam", "mobilesam"), breakdown: bool = True,
        captions_per_image: int = 5, ray_workers: int = 2, ray_rows: int = 100,
        precisions=("fp32", "bf16", "fp16"), region_weights: str = "auto", throughput_pairs: int = 0,
        caption_words=(20, 80, 200), repeats: int = 3, runtime: str = "auto",
        click_segmenters=("classic", "sam", "sam2"), naive_pairs: int = 8) -> dict:
    dev = resolve_device(device)
    pairs = make_pairs(n_pairs)
    with tempfile.TemporaryDirectory(prefix="capscope-bench-") as tmp:
        scorers = build_models(Path(tmp), str(dev), metrics, runtime)
    first = next(iter(scorers.values()))
    speed = word_encoding_speedup(scorers.get("infometic", first), [p["caption"] for p in pairs])
    result = {
        "device": f"{dev.type}: " + (torch.cuda.get_device_name(dev) if dev.type == "cuda" else machine()),
        "clip_model": f"{CLIP_MODEL} (random weights)",
        "word_encoding_speedup": speed["speedup"],
        "pairs_per_s": {}, "naive_pairs_per_s": {}, "rescore_ms": {},
        "peak_rss_mb": 0.0,
    }
    shared = {"captions_per_image": captions_per_image, "pairs_per_s": {}, "naive_pairs_per_s": {}}
    shared_pairs = make_shared_pairs(n_pairs, captions_per_image) if captions_per_image > 1 else []
    naive_timing, peak_gpu = _per_metric(scorers, dev, pairs, shared_pairs, batch_size, repeats, rescore_runs,
                                         result, shared, naive_pairs)
    extra = {"runtime": runtime_costs(scorers), "word_encoding": speed, "n_pairs": n_pairs, "batch_size": batch_size, "repeats": repeats,
             "regions_per_pair": float(np.mean([len(p["regions"]) for p in pairs])),
             "naive_pairs": len(spread(pairs, naive_pairs)),
             "naive_regions_per_pair": float(np.mean([len(p["regions"]) for p in spread(pairs, naive_pairs)])),
             "naive_image_tower_share": {k: v["image_tower_share"] for k, v in naive_timing.items() if v}}
    if shared_pairs:
        extra["shared_images"] = shared
    if caption_words:
        extra["caption_length"] = caption_length_speed(scorers, n_pairs, batch_size, caption_words, repeats)
    if breakdown:
        extra["rescore_breakdown_ms"] = {name: rescore_breakdown(s, name, pairs[0]) for name, s in scorers.items()}
    if region_sources:
        extra["region_source_s_640px"] = region_source_seconds(region_sources, device=str(dev),
                                                               pretrained=region_weights != "random",
                                                               repeats=3 if dev.type == "cuda" else 1)
    if click_segmenters:
        extra["click_segment"] = click_latency(click_segmenters, device=str(dev),
                                               pretrained=region_weights != "random")
        extra["click_prompts_noc"] = prompt_quality()  # the fallback: the one with meaningful masks offline
    if dev.type == "cuda":
        extra["peak_gpu_mb_batch"] = peak_gpu
    extra.update(_other_runs(dev, pairs, metrics, batch_size, precisions, throughput_pairs, captions_per_image,
                             ray_workers, ray_rows))
    result["peak_rss_mb"] = peak_rss_mb()
    if dev.type == "cuda":  # the largest of the per-metric peaks and of what ran after the last reset
        result["peak_gpu_mb"] = max([torch.cuda.max_memory_allocated() / 2**20, *filter(None, peak_gpu.values())])
    result["details"] = extra
    return result


def spread(pairs: list[dict], n: int) -> list[dict]:
    """`n` of `pairs`, evenly spaced in the order of their region counts (so that
    they hold as many regions per pair as all of them): what the naive loops
    time. A loop with no batching and no cache costs the same per pair on any
    like pairs, and the naive loops took most of a plain bench's minutes
    (InfoMetIC's runs near 0.6 pairs/s)."""
    if n <= 0 or n >= len(pairs):
        return pairs
    ordered = sorted(pairs, key=lambda p: len(p["regions"]))
    step = len(pairs) / n
    return [ordered[int((i + 0.5) * step)] for i in range(n)]


def _per_metric(scorers: dict, dev, pairs: list[dict], shared_pairs: list[dict], batch_size: int, repeats: int,
                rescore_runs: int, result: dict, shared: dict, naive_pairs: int = 0) -> tuple[dict, dict]:
    """Each metric's pairs/s, naive pairs/s (on `naive_pairs` of the pairs, 0: all)
    and re-score times into `result` (and on shared images into `shared`);
    returns (naive timing, peak GPU MB) per metric."""
    naive_timing: dict[str, dict] = {}
    peak_gpu: dict[str, float | None] = {}
    for name, scorer in scorers.items():
        pairs_per_second(scorer, pairs[: min(4, len(pairs))], batch_size)  # warm-up
        reset_peak_gpu(dev)
        result["pairs_per_s"][name] = pairs_per_second(scorer, pairs, batch_size, repeats)
        peak_gpu[name] = peak_gpu_mb(dev)
        naive_pairs_per_second(scorer, name, pairs[:2])  # warm-up
        naive_timing[name] = {}
        result["naive_pairs_per_s"][name] = naive_pairs_per_second(scorer, name, spread(pairs, naive_pairs),
                                                                   naive_timing[name], repeats)
        result["rescore_ms"][name] = rescore_ms(scorer, pairs[0], rescore_runs)
        if shared_pairs:
            shared["pairs_per_s"][name] = pairs_per_second(scorer, shared_pairs, batch_size, repeats)
            shared["naive_pairs_per_s"][name] = naive_pairs_per_second(scorer, name, spread(shared_pairs, naive_pairs),
                                                                       repeats=repeats)
    return naive_timing, peak_gpu


def _other_runs(dev, pairs: list[dict], metrics, batch_size: int, precisions, throughput_pairs: int,
                captions_per_image: int, ray_workers: int, ray_rows: int) -> dict:
    """The figures measured with models of their own: CLIP-S's throughput, the precisions, Ray."""
    extra = {}
    fp32_first = ("fp32", *[p for p in precisions if p != "fp32"])
    if throughput_pairs:
        extra["clip_s_throughput"] = clip_s_throughput(str(dev), throughput_pairs, max(batch_size, 256), fp32_first,
                                                       (None, 128) if dev.type == "cuda" else (None,))
    if len(precisions) > 1:
        extra["precision"] = precision_figures(str(dev), pairs, batch_size, fp32_first,
                                               tuple(dict.fromkeys(("clip-s", *metrics))))
    if ray_workers:
        ray = ray_speed(dev.type, metrics[0], ray_rows, captions_per_image, batch_size, ray_workers)
        if ray is not None:
            extra["ray"] = ray
    return extra


def first_use(cost: dict) -> str:
    """What an ONNX graph cost the first time it ran, as a summary line's end."""
    if "export_s" not in cost:
        return ""
    export = "found in the cache" if cost["export_s"] is None else f"exported in {cost['export_s']:.1f} s"
    return f" (graph {export}, sessions built in {cost['session_s']:.1f} s)"


def summary(result: dict) -> str:
    lines = [f"device: {result['device']}", f"CLIP: {result['clip_model']}",
             f"word encoding speed-up: {result['word_encoding_speedup']:.1f}x"]
    for name, cost in result["details"].get("runtime", {}).items():
        lines.append(f"{name}: text tower on {cost['runtime']}{first_use(cost)}")
    details = result["details"]
    best = f"best of {details.get('repeats', 1)} runs"
    if details.get("naive_pairs", details.get("n_pairs")) != details.get("n_pairs"):
        best += f"; the naive loop on {details['naive_pairs']} of the {details['n_pairs']} pairs"
    for name, rate in result["pairs_per_s"].items():
        naive = result["naive_pairs_per_s"][name]
        ms = result["rescore_ms"][name]
        lines.append(f"{name}: {rate:.2f} pairs/s (naive {naive:.2f}, {rate / naive:.1f}x, {best}); "
                     f"re-score p50 {ms['p50']:.0f} ms, p95 {ms['p95']:.0f} ms")
    for name, share in result["details"].get("naive_image_tower_share", {}).items():
        lines.append(f"{name}: the image tower takes {share:.0%} of the naive loop's time, "
                     f"so encoding the same images caps the ratio near {1 / max(share, 1e-9):.1f}x")
    shared = result["details"].get("shared_images")
    for name, rate in (shared or {}).get("pairs_per_s", {}).items():
        naive = shared["naive_pairs_per_s"][name]
        lines.append(f"{name}, {shared['captions_per_image']} captions per image: {rate:.2f} pairs/s "
                     f"(naive {naive:.2f}, {rate / naive:.1f}x)")
    lengths = result["details"].get("caption_length")
    for name, rates in (lengths or {}).get("pairs_per_s", {}).items():
        windows = lengths["windows_per_caption"][name]
        lines.append(f"{name} by caption length: " + ", ".join(
            f"{lengths['words_per_caption'][k]:.0f} words {v:.2f} pairs/s ({windows[k]:.1f} windows)"
            for k, v in rates.items()))
    for name, info in result["details"].get("region_source_s_640px", {}).items():
        took = "unavailable" if info["seconds"] is None else f"{info['seconds']:.2f} s, {info['regions']} regions"
        lines.append(f"regions {name} (640 px): {took}")
    for name, info in result["details"].get("click_segment", {}).items():
        if "error" in info:
            lines.append(f"click to segment, {name}: {info['error']}")
            continue
        lines.append(f"click to segment, {info['segmenter']} ({info['weights']} weights, {info['image_side']} px): "
                     f"a click {info['click_ms_p50']:.0f} ms p50 once the image is set "
                     f"(embedding {info['embedding_ms']:.0f} ms); the naive way "
                     f"{info['naive_click_ms_p50']:.0f} ms a click ({info['speedup']:.1f}x)")
    for name, runs in result["details"].get("precision", {}).get("random_weights", {}).items():
        demo = result["details"]["precision"]["demo_model"].get(name, {})
        for precision, figures in runs.items():
            if precision == "fp32":
                continue
            gaps, model = (demo[precision], "demo model") if precision in demo else (figures, "random weights")
            lines.append(f"{name} --precision {precision}: {figures['pairs_per_s']:.2f} pairs/s "
                         f"({figures['speedup_vs_fp32']:.2f}x fp32); {model}: largest score change "
                         f"{max(gaps['max_abs_score_diff'].values(), default=0):.1e}, "
                         f"verdicts changed {gaps['verdicts_changed_share']:.2%} of {gaps['verdicts']}")
    ray = result["details"].get("ray")
    if ray:
        lines.append(f"{ray['metric']} with --engine ray, {ray['workers']} workers on this machine: "
                     f"{ray['ray']['rows_per_s']:.2f} rows/s against {ray['local']['rows_per_s']:.2f} here "
                     f"({ray['ratio']:.2f}x); whole command {ray['ray']['wall_s']:.0f} s against {ray['local']['wall_s']:.0f} s")
    sweep = result["details"].get("clip_s_throughput")
    if sweep:
        rates = ", ".join(f"{k} {v:.0f}" for k, v in sweep["pairs_per_s"].items())
        lines.append(f"clip-s on {sweep['n_pairs']} distinct images, pairs/s: {rates}; naive {sweep['naive_pairs_per_s']:.0f}; "
                     f"the host alone (towers free) {sweep['host_ceiling_pairs_per_s']:.0f}, "
                     f"its part of a GPU's path {sweep['host_ceiling_gpu_pairs_per_s']:.0f}")
    lines.append(f"peak RSS: {result['peak_rss_mb']:.0f} MB")
    if result.get("peak_gpu_mb") is not None:
        lines.append(f"peak GPU memory (torch): {result['peak_gpu_mb']:.0f} MB")
    lines += [f"left out: {part}" for part in result["details"].get("left_out", [])]
    return "\n".join(lines)
