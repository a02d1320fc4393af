"""The timings of `capscope bench`: pairs/s through `Scorer.score_batch`, the
word encoding against plain open_clip, re-scores of a cached image (and where
their milliseconds go), pairs/s by caption length, and what the machine
spent (peak memory)."""
from __future__ import annotations

import platform
import resource
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from capscope.bench.speed.timed_models import clear_caches, text_backbone
from capscope.bench.speed.timed_pairs import make_long_pairs, make_pairs
from capscope.demo.scenes import COLOURS, KINDS
from capscope.metrics import families, hice, image_cache, scorer as scorer_module
from capscope.metrics.text import EOT_ID, SOT_ID, bpe_pieces, tokenize


def word_encoding_speedup(scorer, captions: list[str], repeats: int = 2) -> dict:
    backbone = text_backbone(scorer.metrics.get("infometic") or next(iter(scorer.metrics.values())))
    ids = [p.id for c in captions for p in bpe_pieces(c, tokenize(c, scorer.nlp), backbone.tokenizer)]
    full = torch.zeros(len(ids), 77, dtype=torch.long)
    for row, piece in enumerate(ids):
        full[row, :3] = torch.tensor([SOT_ID, piece, EOT_ID])

    def ours():
        backbone.clear_caches()
        backbone.encode_pieces(ids)

    def every_piece_short():
        backbone.encode_ids([[SOT_ID, i, EOT_ID] for i in ids])

    @torch.inference_mode()
    def baseline():
        backbone.model.encode_text(full.to(backbone.device))

    # the baseline once: one pass of every piece at 77 tokens takes about 18 s on 2 CPU cores
    t_ours, t_short, t_base = best_time(ours, repeats), best_time(every_piece_short, repeats), best_time(baseline, 1)
    backbone.clear_caches()
    return {"pieces": len(ids), "distinct": len(set(ids)), "ours_s": t_ours, "baseline_s": t_base,
            "speedup": t_base / t_ours, "speedup_without_dedup": t_base / t_short}


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def pairs_per_second(scorer, pairs: list[dict], batch_size: int, repeats: int = 1) -> float:
    """Pairs/s of `Scorer.score_batch`, the best of `repeats` runs, each from
    empty caches; each batch is given the next as its look-ahead, as `capscope
    score` gives it."""
    best = float("inf")
    for _ in range(repeats):
        clear_caches(scorer)
        start = time.perf_counter()
        for i in range(0, len(pairs), batch_size):
            rows = scorer.score_batch(pairs[i : i + batch_size], ahead=pairs[i + batch_size : i + 2 * batch_size])
            assert not any(r["error"] for r in rows), [r["error"] for r in rows if r["error"]]
        best = min(best, time.perf_counter() - start)
    return len(pairs) / best


def caption_length_speed(scorers: dict, n_pairs: int, batch_size: int, lengths=(20, 80, 200),
                         repeats: int = 1) -> dict:
    """Pairs/s of each metric on the short scene captions and on captions of
    about each of `lengths` words (distinct images), the best of `repeats` runs,
    with the windows read per caption."""
    sets = {"short": make_pairs(n_pairs, seed=3), **{str(w): make_long_pairs(n_pairs, w) for w in lengths}}
    out = {"words_per_caption": {k: float(np.mean([len(p["caption"].split()) for p in v])) for k, v in sets.items()},
           "pairs_per_s": {}, "windows_per_caption": {}}
    for name, scorer in scorers.items():
        out["pairs_per_s"][name], out["windows_per_caption"][name] = {}, {}
        for key, pairs in sets.items():
            out["pairs_per_s"][name][key] = pairs_per_second(scorer, pairs, batch_size, repeats)
            rows = scorer.score_batch(pairs[:2])
            out["windows_per_caption"][name][key] = float(np.mean([len(r["metrics"][name]["windows"]) for r in rows]))
    return out


def rescore_ms(scorer, pair: dict, runs: int, warmup: int = 5) -> dict:
    captions = [f"a {size} {colour} {shape} next to a {other} {shape2}."
                for size in ("small", "large") for colour in COLOURS for shape in KINDS
                for other in ("red", "blue") for shape2 in ("square", "circle")]
    for metric in scorer.metrics.values():  # no timed caption seen before (its phrases may have been, as an edit's)
        text_backbone(metric).forget_texts()
    scorer.score(pair["image"], pair["caption"], regions=pair["regions"])  # image features now cached
    times = []
    for i in range(warmup + runs):
        caption = captions[i % len(captions)] if i < len(captions) else f"{captions[i % len(captions)]} {i}"
        start = time.perf_counter()
        scorer.score(pair["image"], caption, regions=pair["regions"])
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1000)
    return {"p50": percentile(times, 50), "p95": percentile(times, 95), "runs": len(times)}


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


@contextmanager
def timed_sections(scorer, metric: str):
    """Wall time spent inside the main steps of one re-score (monkeypatched wrappers)."""
    spent: dict[str, float] = {}
    metric_obj = scorer.metrics[metric]
    clip = text_backbone(metric_obj)
    targets = [
        (scorer_module, "tokenize", "spaCy tokens"),
        (image_cache, "image_key", "image hash (cache key)"),
        (clip, "encode_ids", "CLIP text tower"),
        (metric_obj.backbone, "image_features", "image features (cache hit)"),
    ]
    if metric == "hice":
        targets.append((hice, "caption_phrases", "phrases"))
        targets.append((hice, "hice_scores", "HICE-S formulas"))
    elif metric in ("clip-s", "pac-s"):
        pass  # the text and image towers and one cosine: nothing else to time
    elif metric == "clip4dm":
        targets.append((metric_obj.relevance, "attribute_chunk", "text tower forward and backward"))
        targets.append((metric_obj, "word_scores", "word aggregation"))
    else:
        targets.append((metric_obj.model, "forward", "InfoMetIC head"))
        targets.append((families, "bpe_pieces", "BPE pieces"))
    patched = []
    for owner, attr, label in targets:
        own = attr in vars(owner)
        original = getattr(owner, attr)
        patched.append((owner, attr, original, own))
        setattr(owner, attr, _timer(original, label, spent))
    try:
        yield spent
    finally:
        for owner, attr, original, own in reversed(patched):
            if own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)


def _timer(fn, label: str, spent: dict):
    def wrapped(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - start
    return wrapped


def rescore_breakdown(scorer, metric: str, pair: dict, runs: int = 20) -> dict:
    """Mean milliseconds per step of one re-score; `other` is the rest of Scorer.score
    (0 where steps ran side by side: InfoMetIC's caption pass beside its head)."""
    scorer.score(pair["image"], pair["caption"], regions=pair["regions"])
    total = 0.0
    with timed_sections(scorer, metric) as spent:
        for i in range(runs):
            start = time.perf_counter()
            scorer.score(pair["image"], f"a large blue circle next to a red square {i}.", regions=pair["regions"])
            total += time.perf_counter() - start
    out = {label: 1000 * s / runs for label, s in spent.items()}
    out["other"] = max(0.0, 1000 * total / runs - sum(out.values()))
    return out


def synchronize(device) -> None:
    """Wait for the GPU's queued work, so that a timer reads what it cost."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def peak_gpu_mb(device) -> float | None:
    """Peak GPU memory allocated by torch since the last reset, in MB (None off CUDA)."""
    if not str(device).startswith("cuda"):
        return None
    return torch.cuda.max_memory_allocated() / 2**20


def reset_peak_gpu(device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if platform.system() == "Darwin" else peak / 1024


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}"
