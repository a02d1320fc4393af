"""`capscope bench` at each precision: CLIP-S's throughput at each precision
and GPU pass width against the naive loop and the host's ceiling
(clip_s_throughput), and each metric's pairs/s and how far its rows move from
fp32's (precision_figures)."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from capscope.bench.speed.timed_models import BENCH_METRICS, model_files, naive_pairs_per_second
from capscope.bench.speed.timed_pairs import make_pairs
from capscope.bench.speed.scoring_timings import pairs_per_second
from capscope.metrics import tower_passes
from capscope.metrics.loading import demo_model_path
from capscope.metrics.scorer import Scorer

PRECISION_METRICS = BENCH_METRICS


def clip_s_throughput(device: str, n_pairs: int, batch_size: int, precisions=("fp32", "bf16", "fp16"),
                      pass_widths=(None,)) -> dict:
    """CLIP-S alone on `n_pairs` distinct images: pairs/s at each precision and
    GPU pass width (None: the encoder's own), the naive per-pair loop, and the
    host's ceiling: the same pipeline with both towers replaced by free
    stand-ins, which is what decoding, preprocessing, hashing, tokenizing and
    building rows cost the host alone (the GPU idles while it runs). The
    ceiling is measured twice: with the pixels made floats on the host, as the
    CPU's path makes them, and with the host's part of a GPU's path, which
    sends the pixels as bytes and makes them floats on the device; each the
    best of 3 runs (each well under a second)."""
    pairs = make_pairs(n_pairs, seed=2)
    out: dict = {"n_pairs": n_pairs, "batch_size": batch_size, "pairs_per_s": {}}
    with tempfile.TemporaryDirectory(prefix="capscope-bench-") as tmp:
        files = model_files(Path(tmp), ("clip-s",))["clip-s"]
        for precision in precisions:
            scorer = Scorer(["clip-s"], device=device, regions="given", precision=precision, **files)
            for width in pass_widths:
                with pass_width(device, width):
                    pairs_per_second(scorer, pairs[:batch_size], batch_size)  # warm-up
                    rate = pairs_per_second(scorer, pairs, batch_size)
                out["pairs_per_s"][f"{precision}" + (f", {width} rows a pass" if width else "")] = rate
        scorer = Scorer(["clip-s"], device=device, regions="given", **files)
        naive = pairs[: min(len(pairs), 256)]
        naive_pairs_per_second(scorer, "clip-s", naive[:4])  # warm-up
        out["naive_pairs_per_s"] = naive_pairs_per_second(scorer, "clip-s", naive)
        backbone = scorer.metrics["clip-s"].backbone
        with free_towers(backbone):
            out["host_ceiling_pairs_per_s"] = pairs_per_second(scorer, pairs, batch_size, repeats=3)
            with host_as_for_gpu(backbone):
                pairs_per_second(scorer, pairs[:batch_size], batch_size)  # warm-up: the byte buffers
                out["host_ceiling_gpu_pairs_per_s"] = pairs_per_second(scorer, pairs, batch_size, repeats=3)
    return out


@contextmanager
def pass_width(device: str, width: int | None):
    """The encoder's rows per pass on `device` set to `width` for the block."""
    kind = torch.device(device).type
    saved = (tower_passes.IMAGE_ROWS.get(kind), tower_passes.TEXT_ROWS.get(kind))
    if width:
        tower_passes.IMAGE_ROWS[kind] = tower_passes.TEXT_ROWS[kind] = width
    try:
        yield
    finally:
        for table, value in zip((tower_passes.IMAGE_ROWS, tower_passes.TEXT_ROWS), saved):
            if value is None:
                table.pop(kind, None)
            else:
                table[kind] = value


@contextmanager
def host_as_for_gpu(backbone):
    """`backbone` on the CPU does the host's part of a CUDA device's path: its
    pass widths, its pixels as bytes (the next pass made on a thread), each
    pass copied once into a kept buffer, as a GPU's driver copies pageable
    memory through its staging buffers, and no floats made (the device makes
    them). Measurable on a machine without a GPU; with free towers only."""
    pixels, cuda, staging = backbone.pixels, torch.device("cuda"), {}

    def sent(host, device):
        if isinstance(host, torch.Tensor):
            return host
        if host.shape not in staging:  # the driver copies pageable memory through staging buffers it keeps
            staging[host.shape] = torch.empty(host.shape, dtype=torch.uint8)
        staging[host.shape].copy_(torch.from_numpy(host))
        pixels.recycle(host)
        return staging[host.shape]

    pixels.send = sent
    pixels.passes = lambda images, rows, device=None: type(pixels).passes(pixels, images, rows, cuda)
    saved = [(table, dict(table)) for table in (tower_passes.IMAGE_ROWS, tower_passes.TEXT_ROWS)]
    for table, _ in saved:
        table["cpu"] = table["cuda"]
    try:
        yield
    finally:
        del pixels.send, pixels.passes
        for table, values in saved:
            table.clear()
            table.update(values)


@contextmanager
def free_towers(backbone):
    """Both CLIP towers of `backbone` answer zeros at once (for the host's ceiling)."""
    model = backbone.model
    saved_image, saved_ids = model.encode_image, backbone.encode_ids
    model.encode_image = lambda pixels, **_: torch.zeros(pixels.shape[0], backbone.dim)
    backbone.encode_ids = lambda sequences, rows=None: torch.zeros(len(sequences), backbone.dim)
    try:
        yield
    finally:
        model.encode_image = saved_image
        del backbone.encode_ids  # the instance attribute goes; the method shows through again
        assert backbone.encode_ids.__func__ is saved_ids.__func__



def precision_figures(device: str, pairs: list[dict], batch_size: int, precisions=("fp32", "bf16", "fp16"),
                      metrics=PRECISION_METRICS) -> dict:
    """Per metric and precision: pairs/s on distinct images with random-weight
    ViT-B-32 models, and how far its rows are from fp32's on the same pairs;
    then the same gaps with capscope's trained demo model (meaningful verdicts)."""
    out: dict = {"random_weights": {}, "demo_model": {}}
    with tempfile.TemporaryDirectory(prefix="capscope-bench-") as tmp:
        files = model_files(Path(tmp), metrics)
        for name in metrics:
            runs = {}
            for precision in precisions:
                scorer = Scorer([name], device=device, regions="given", precision=precision, **files.get(name, {}))
                pairs_per_second(scorer, pairs[:2], batch_size)  # warm-up
                rate = pairs_per_second(scorer, pairs, batch_size)
                runs[precision] = (rate, scorer.score_batch(pairs))
            out["random_weights"][name] = precision_gaps(name, runs)
    if demo_model_path().is_file() and not os.environ.get("CAPSCOPE_NO_DEMO"):
        for name in ("clip-s", "infometic", "hice", "clip4dm"):
            runs = {}
            for precision in precisions:
                scorer = Scorer([name], device=device, regions="given", precision=precision)
                runs[precision] = (None, scorer.score_batch(pairs))
            out["demo_model"][name] = precision_gaps(name, runs)
    return out


def precision_gaps(metric: str, runs: dict[str, tuple[float | None, list[dict]]]) -> dict:
    """Each precision's pairs/s (and ratio to fp32) and largest gaps from fp32's rows."""
    base_rate, base_rows = runs["fp32"]
    out = {}
    for precision, (rate, rows) in runs.items():
        figures = {} if rate is None else {"pairs_per_s": rate, "speedup_vs_fp32": rate / base_rate}
        figures.update(row_gaps([r["metrics"][metric] for r in base_rows], [r["metrics"][metric] for r in rows]))
        out[precision] = figures
    return out


def row_gaps(base: list[dict], other: list[dict]) -> dict:
    """Largest |difference| of the global scores (absolute, and relative to
    the fp32 value), of token and region scores, and the share of word and
    region verdicts that changed."""
    score_abs, score_rel, token, region, changed, verdicts = {}, 0.0, 0.0, 0.0, 0, 0
    for a, b in zip(base, other):
        for key, value in a["scores"].items():
            gap = abs(b["scores"][key] - value)
            score_abs[key] = max(score_abs.get(key, 0.0), gap)
            score_rel = max(score_rel, gap / max(abs(value), 1e-12))
        for x, y in zip(a.get("token_scores") or [], b.get("token_scores") or []):
            if x is not None:
                token = max(token, abs(x - y))
        for x, y in zip(a.get("region_scores") or [], b.get("region_scores") or []):
            region = max(region, abs(x - y))
        pairs = list(zip(a.get("token_correct") or [], b.get("token_correct") or []))
        pairs += list(zip(a.get("region_mentioned") or [], b.get("region_mentioned") or []))
        judged = [(x, y) for x, y in pairs if x is not None]
        verdicts += len(judged)
        changed += sum(x != y for x, y in judged)
    return {"max_abs_score_diff": score_abs, "max_rel_score_diff": score_rel, "max_token_score_diff": token,
            "max_region_score_diff": region, "verdicts": verdicts,
            "verdicts_changed_share": changed / verdicts if verdicts else 0.0}
