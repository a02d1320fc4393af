"""`capscope bench`: speed figures of docs/formats.md §7, measured in one run.

Everything is built offline: open_clip ViT-B-32 with random weights (speed does
not depend on the weights), an InfoMetIC checkpoint with random weights in the
released layout (saved to a temporary file and loaded through
`Scorer(infometic_checkpoint=FILE)`, the user's path), and demo-size scenes of
coloured shapes whose boxes are the given regions.

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
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

CLIP_MODEL = "ViT-B-32"
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 70, 220),
           "yellow": (235, 200, 20), "purple": (140, 50, 190), "orange": (245, 130, 20)}
SHAPES = ("circle", "square", "triangle")
BENCH_METRICS = ("clip-s", "infometic", "hice", "clip4dm")  # registry names with a naive baseline here (NaiveRunner)
# pac-s and infoclip cost what clip-s and infometic cost: the same towers and passes, other weights or no head


# ---------------------------------------------------------------- data

def scene(rng: np.random.Generator, side: int = 224) -> tuple[Image.Image, list[list[float]], str]:
    """A light noisy background with 1-4 non-overlapping shapes; their boxes and a caption."""
    base = rng.integers(200, 256, size=3)
    pixels = np.clip(base + rng.normal(0, 8, size=(side, side, 3)), 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    draw = ImageDraw.Draw(image)
    boxes, words = [], []
    for _ in range(int(rng.integers(1, 5))):
        box = _free_box(rng, side, boxes)
        if box is None:
            break
        colour, shape = str(rng.choice(list(COLOURS))), str(rng.choice(SHAPES))
        _draw(draw, shape, box, COLOURS[colour])
        boxes.append(box)
        size = "large" if box[2] - box[0] > 56 else "small"
        words.append(f"a {size} {colour} {shape}")
    return image, boxes, " and ".join(words) + "."


def _free_box(rng, side: int, taken: list, attempts: int = 50):
    for _ in range(attempts):
        size = int(rng.integers(28, 97))
        x0, y0 = int(rng.integers(0, side - size)), int(rng.integers(0, side - size))
        box = [x0, y0, x0 + size, y0 + size]
        if all(box[2] <= t[0] or t[2] <= box[0] or box[3] <= t[1] or t[3] <= box[1] for t in taken):
            return box
    return None


def _draw(draw, shape: str, box, colour) -> None:
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        x0, y0, x1, y1 = box
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=colour)


def make_pairs(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        image, boxes, caption = scene(rng)
        pairs.append({"id": str(i), "image": image, "caption": caption, "regions": [{"box": b} for b in boxes]})
    return pairs


def make_shared_pairs(n: int, captions_per_image: int = 5, seed: int = 1) -> list[dict]:
    """Pairs in which each image carries several captions (as in COCO-style
    files or when several captioners are compared): the scene's caption and
    variants with one colour changed."""
    rng = np.random.default_rng(seed)
    pairs = []
    while len(pairs) < n:
        image, boxes, caption = scene(rng)
        for k in range(captions_per_image):
            pairs.append({"id": str(len(pairs)), "image": image, "regions": [{"box": b} for b in boxes],
                          "caption": caption if k == 0 else recolour(caption, rng)})
    return pairs[:n]


OPENINGS = ("", "there is ", "this shows ", "an image of ", "next to it, ")


def make_long_pairs(n: int, words: int, seed: int = 3) -> list[dict]:
    """Pairs whose captions run to about `words` words: sentences about the
    scene's shapes, each opened differently, as a detailed captioner writes."""
    pairs = make_pairs(n, seed)
    for pair in pairs:
        phrases = pair["caption"].rstrip(".").split(" and ")
        sentences, count, k = [], 0, 0
        while count < words:
            sentence = OPENINGS[k % len(OPENINGS)] + phrases[k % len(phrases)] + "."
            sentences.append(sentence)
            count += len(sentence.split())
            k += 1
        pair["caption"] = " ".join(sentences)
    return pairs


def caption_length_speed(scorers: dict, n_pairs: int, batch_size: int, lengths=(20, 80, 200)) -> dict:
    """Pairs/s of each metric on the short scene captions and on captions of
    about each of `lengths` words (distinct images), with the windows read per caption."""
    sets = {"short": make_pairs(n_pairs, seed=3), **{str(w): make_long_pairs(n_pairs, w) for w in lengths}}
    out = {"words_per_caption": {k: float(np.mean([len(p["caption"].split()) for p in v])) for k, v in sets.items()},
           "pairs_per_s": {}, "windows_per_caption": {}}
    for name, scorer in scorers.items():
        out["pairs_per_s"][name], out["windows_per_caption"][name] = {}, {}
        for key, pairs in sets.items():
            out["pairs_per_s"][name][key] = pairs_per_second(scorer, pairs, batch_size)
            rows = scorer.score_batch(pairs[:2])
            out["windows_per_caption"][name][key] = float(np.mean([len(r["metrics"][name]["windows"]) for r in rows]))
    return out


def recolour(caption: str, rng: np.random.Generator) -> str:
    words = caption.split()
    spots = [i for i, w in enumerate(words) if w in COLOURS]
    i = int(rng.choice(spots))
    words[i] = str(rng.choice([c for c in COLOURS if c != words[i]]))
    return " ".join(words)


# ---------------------------------------------------------------- models

def build_models(workdir: Path, device: str, metrics=BENCH_METRICS) -> dict:
    """Random-weight checkpoints saved to `workdir`, loaded back through Scorer."""
    from capscope.metrics.scorer import Scorer

    return {name: Scorer([name], device=device, regions="given", **files)
            for name, files in model_files(workdir, metrics).items()}


def model_files(workdir: Path, metrics=BENCH_METRICS) -> dict[str, dict]:
    """Per metric, the Scorer options naming its random-weight checkpoints in `workdir`."""
    import open_clip

    from capscope.metrics.infometic import HeadConfig, InfoMetIC

    torch.manual_seed(0)
    files = {}
    on_clip = [name for name in ("clip-s", "hice", "clip4dm") if name in metrics]  # metrics on the plain CLIP
    if on_clip:
        clip_file = workdir / "vit-b-32.pt"
        torch.save(open_clip.create_model(CLIP_MODEL, pretrained=None).state_dict(), clip_file)
        for name in on_clip:
            files[name] = {"clip_model": CLIP_MODEL, "clip_pretrained": str(clip_file)}
    if "infometic" in metrics:
        infometic_file = workdir / "best_model.pth"
        model = InfoMetIC(open_clip.create_model("ViT-B-32-quickgelu", pretrained=None), HeadConfig())
        torch.save({k: v for k, v in model.state_dict().items() if not k.endswith("attn_mask")}, infometic_file)
        del model
        files["infometic"] = {"infometic_checkpoint": str(infometic_file)}
    return files


def text_backbone(metric):
    """The CLIP a metric encodes text with (HICE-S wraps its image side around it as `clip`)."""
    return getattr(metric, "clip", None) or metric.backbone


def clear_caches(scorer) -> None:
    for metric in scorer.metrics.values():
        metric.backbone.clear_caches()  # HICE-S's image side clears its CLIP's as well


# ---------------------------------------------------------------- naive baselines

class NaiveRunner:
    """One pair at a time with plain open_clip calls: what reference code does."""

    def __init__(self, scorer, metric_name: str):
        import open_clip

        self.metric = scorer.metrics[metric_name]
        clip = text_backbone(self.metric)
        self.model, self.preprocess, self.device = clip.model, clip.preprocess, clip.device
        self.tokenizer = open_clip.get_tokenizer(CLIP_MODEL)
        self.name = metric_name
        self.image_seconds = 0.0  # time in the image tower (preprocessing included)

    @torch.inference_mode()
    def images(self, images: list[Image.Image]) -> torch.Tensor:
        start = time.perf_counter()
        batch = torch.stack([self.preprocess(im.convert("RGB")) for im in images]).to(self.device)
        feats = self.model.encode_image(batch).float().cpu()
        self.image_seconds += time.perf_counter() - start
        return feats

    @torch.inference_mode()
    def texts(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.encode_text(ids.to(self.device)).float().cpu()

    def score(self, pair: dict, nlp) -> dict:
        from capscope.metrics.regions import given_regions
        from capscope.metrics.text import tokenize

        image = pair["image"]
        if self.name == "clip4dm":
            return self._clip4dm(pair, image)
        if self.name == "clip-s":
            return self._clip_s(pair, image)
        regions = given_regions(pair["regions"], *image.size)
        tokens = tokenize(pair["caption"], nlp)
        return self._infometic(pair, image, regions, tokens) if self.name == "infometic" else self._hice(pair, image, regions, tokens)

    def _clip4dm(self, pair, image) -> dict:
        """The released loop: one pair per forward and backward pass, the image
        encoded again, 77 tokens, float32 (image_seconds is not split out: the
        image and text run in one graph there)."""
        from capscope.bench.clip4dm_released import released_clip4dm

        return released_clip4dm(self.model, self.preprocess, self.tokenizer, image, pair["caption"],
                                self.metric.epsilon, self.metric.layers)

    def _clip_s(self, pair, image) -> dict:
        """jmhessel/clipscore's computation, one pair at a time: the prompted caption at 77 tokens."""
        from capscope.metrics.clipscore import CLIP_S_WEIGHT, PROMPT, clip_s

        image_feats = self.images([image])
        text_feats = self.texts(self.tokenizer([PROMPT + pair["caption"]]))
        return {"clip-s": float(clip_s(image_feats, text_feats, CLIP_S_WEIGHT)[0])}

    def _hice(self, pair, image, regions, tokens) -> dict:
        from capscope.metrics.hice import hice_scores, masked_crop

        found = self.metric.phrases_of(pair["caption"], tokens)
        feats = self.images([image] + [masked_crop(image, r, self.metric.clip.crop) for r in regions])
        texts = self.texts(self.tokenizer([pair["caption"]] + [p.text for p in found]))
        return hice_scores(feats[0], texts[0], torch.cat([feats[1:], feats[:1]]), texts[1:])

    def _infometic(self, pair, image, regions, tokens) -> dict:
        from capscope.metrics.encoder import crop_region
        from capscope.metrics.text import EOT_ID, SOT_ID, bpe_pieces, model_ids

        metric = self.metric
        feats = self.images([image] + [crop_region(image, r) for r in regions])
        pieces = bpe_pieces(pair["caption"], tokens, metric.backbone.tokenizer)
        ids, mask, _ = model_ids(pieces, metric.max_len)
        t_g = self.texts(self.tokenizer([pair["caption"]]))
        per_position = torch.zeros(len(ids), 77, dtype=torch.long)
        for row, piece in enumerate(ids):
            per_position[row, :3] = torch.tensor([SOT_ID, piece, EOT_ID])
        tokens_feats = self.texts(per_position)
        boxes = torch.tensor([r.box for r in regions], dtype=torch.float32).reshape(1, -1, 4)
        inputs = (feats[:1], feats[None, 1:], boxes, torch.tensor([image.size], dtype=torch.float32),
                  t_g, tokens_feats[None], torch.tensor([mask], dtype=torch.float32))
        with torch.inference_mode():
            out = metric.model(*(t.to(self.device) for t in inputs))
        return {"precision": float(out[1][0]), "recall": float(out[0][0])}


# ---------------------------------------------------------------- measurements

def word_encoding_speedup(scorer, captions: list[str], repeats: int = 2) -> dict:
    from capscope.metrics.text import EOT_ID, SOT_ID, bpe_pieces, tokenize

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

    t_ours, t_short, t_base = (best_time(f, repeats) for f in (ours, every_piece_short, baseline))
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
    """Pairs/s of `Scorer.score_batch`, the best of `repeats` runs, each from empty caches."""
    best = float("inf")
    for _ in range(repeats):
        clear_caches(scorer)
        start = time.perf_counter()
        for i in range(0, len(pairs), batch_size):
            rows = scorer.score_batch(pairs[i : i + batch_size])
            assert not any(r["error"] for r in rows), [r["error"] for r in rows if r["error"]]
        best = min(best, time.perf_counter() - start)
    return len(pairs) / best


def naive_pairs_per_second(scorer, metric: str, pairs: list[dict], timing: dict | None = None,
                           repeats: int = 1) -> float:
    """Pairs/s of the naive loop, the best of `repeats` runs; `timing` receives
    the share of that run's time spent in the image tower, which any path that
    encodes the same images must pay."""
    best, share = float("inf"), None
    for _ in range(repeats):
        runner = NaiveRunner(scorer, metric)
        start = time.perf_counter()
        for pair in pairs:
            runner.score(pair, scorer.nlp)
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, share = elapsed, runner.image_seconds / elapsed
    if timing is not None and share:
        timing["image_tower_share"] = share
    return len(pairs) / best


# ---------------------------------------------------------------- CLIP-S throughput

def clip_s_throughput(device: str, n_pairs: int, batch_size: int, precisions=("fp32", "bf16", "fp16"),
                      pass_widths=(None,)) -> dict:
    """CLIP-S alone on `n_pairs` distinct images: pairs/s at each precision and
    GPU pass width (None: the encoder's own), the naive per-pair loop, and the
    host's ceiling: the same pipeline with both towers replaced by free
    stand-ins, which is what decoding, preprocessing, hashing, tokenizing and
    building rows cost the host alone (the GPU idles while it runs)."""
    from capscope.metrics import encoder
    from capscope.metrics.scorer import Scorer

    pairs = make_pairs(n_pairs, seed=2)
    out: dict = {"n_pairs": n_pairs, "batch_size": batch_size, "pairs_per_s": {}}
    with tempfile.TemporaryDirectory(prefix="capscope-bench-") as tmp:
        files = model_files(Path(tmp), ("clip-s",))["clip-s"]
        for precision in precisions:
            scorer = Scorer(["clip-s"], device=device, regions="given", precision=precision, **files)
            for width in pass_widths:
                with pass_width(encoder, device, width):
                    pairs_per_second(scorer, pairs[:batch_size], batch_size)  # warm-up
                    rate = pairs_per_second(scorer, pairs, batch_size)
                out["pairs_per_s"][f"{precision}" + (f", {width} rows a pass" if width else "")] = rate
        scorer = Scorer(["clip-s"], device=device, regions="given", **files)
        naive = pairs[: min(len(pairs), 256)]
        naive_pairs_per_second(scorer, "clip-s", naive[:4])  # warm-up
        out["naive_pairs_per_s"] = naive_pairs_per_second(scorer, "clip-s", naive)
        with free_towers(scorer.metrics["clip-s"].backbone):
            out["host_ceiling_pairs_per_s"] = pairs_per_second(scorer, pairs, batch_size)
    return out


@contextmanager
def pass_width(encoder, device: str, width: int | None):
    """The encoder's rows per pass on `device` set to `width` for the block."""
    kind = torch.device(device).type
    saved = (encoder.IMAGE_ROWS.get(kind), encoder.TEXT_ROWS.get(kind))
    if width:
        encoder.IMAGE_ROWS[kind] = encoder.TEXT_ROWS[kind] = width
    try:
        yield
    finally:
        for table, value in zip((encoder.IMAGE_ROWS, encoder.TEXT_ROWS), saved):
            if value is None:
                table.pop(kind, None)
            else:
                table[kind] = value


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


def peak_gpu_mb(device) -> float | None:
    """Peak GPU memory allocated by torch since the last reset, in MB (None off CUDA)."""
    if not str(device).startswith("cuda"):
        return None
    return torch.cuda.max_memory_allocated() / 2**20


def reset_peak_gpu(device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


# ---------------------------------------------------------------- precision

PRECISION_METRICS = BENCH_METRICS


def precision_figures(device: str, pairs: list[dict], batch_size: int, precisions=("fp32", "bf16", "fp16"),
                      metrics=PRECISION_METRICS) -> dict:
    """Per metric and precision: pairs/s on distinct images with random-weight
    ViT-B-32 models, and how far its rows are from fp32's on the same pairs;
    then the same gaps with capscope's trained demo model (meaningful verdicts)."""
    from capscope.metrics.loading import demo_model_path
    from capscope.metrics.scorer import Scorer

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


def rescore_ms(scorer, pair: dict, runs: int, warmup: int = 5) -> dict:
    captions = [f"a {size} {colour} {shape} next to a {other} {shape2}."
                for size in ("small", "large") for colour in COLOURS for shape in SHAPES
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


def region_source_seconds(sources=("classic", "sam", "yolo", "fastsam", "mobilesam"), side: int = 640,
                          device: str = "cpu", pretrained: bool = True, repeats: int = 1) -> dict:
    """Seconds per proposal on one side x side image (the best of `repeats`
    after one warm-up). A source whose weights are not here, or every source
    when `pretrained` is False (a machine that must not try to download), is
    timed with randomly initialised weights of the same architecture (the
    network's cost does not depend on them; the number of masks, and so the
    post-processing, does)."""
    from capscope.metrics.loading import ModelUnavailable
    from capscope.metrics.regions import PROPOSERS

    image = scene(np.random.default_rng(1), side)[0]
    out = {}
    with tempfile.TemporaryDirectory(prefix="capscope-bench-regions-") as tmp:
        for name in sources:
            proposer, weights = None, "pretrained"
            if pretrained or name == "classic":
                try:
                    proposer = PROPOSERS[name](device=device)
                except ModelUnavailable:
                    pass
            if proposer is None:
                checkpoint = random_checkpoint(name, Path(tmp))
                proposer, weights = PROPOSERS[name](checkpoint=checkpoint, device=device), "random"
            proposer.propose(image)  # warm-up
            times = []
            for _ in range(repeats):
                synchronize(device)
                start = time.perf_counter()
                regions = proposer.propose(image)
                synchronize(device)
                times.append(time.perf_counter() - start)
            out[name] = {"seconds": min(times), "regions": len(regions), "weights": weights}
    return out


def synchronize(device) -> None:
    """Wait for the GPU's queued work, so that a timer reads what it cost."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def random_checkpoint(source: str, folder: Path) -> str:
    """A checkpoint of the source's real architecture with random weights."""
    from capscope.metrics.segmenters import import_ultralytics

    torch.manual_seed(0)
    if source == "sam":
        from segment_anything import sam_model_registry

        path = folder / "sam_vit_b.pth"
        torch.save(sam_model_registry["vit_b"](checkpoint=None).state_dict(), path)
    elif source == "mobilesam":
        import_ultralytics()  # not a bare import: that would replace PIL's Image.open for the whole run
        from ultralytics.models.sam.build import build_mobile_sam

        path = folder / "mobile_sam.pt"
        torch.save(build_mobile_sam().state_dict(), path)
    elif source in ("yolo", "fastsam"):
        import_ultralytics()
        from ultralytics import YOLO

        path = folder / f"{source}.pt"
        YOLO("yolov8n.yaml" if source == "yolo" else "yolov8s-seg.yaml").save(str(path))
    else:
        raise ValueError(f"no random checkpoint for region source {source!r}")
    return str(path)


@contextmanager
def timed_sections(scorer, metric: str):
    """Wall time spent inside the main steps of one re-score (monkeypatched wrappers)."""
    from capscope.metrics import families, hice, scorer as scorer_module

    spent: dict[str, float] = {}
    metric_obj = scorer.metrics[metric]
    clip = text_backbone(metric_obj)
    targets = [
        (scorer_module, "tokenize", "spaCy tokens"),
        (scorer_module, "image_key", "image hash (cache key)"),
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
    """Mean milliseconds per step of one re-score; `other` is the rest of Scorer.score."""
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


# ---------------------------------------------------------------- the Ray engine

SCORE_LOG = re.compile(r"(\d+) pairs in ([\d.]+) s \(([\d.]+) pairs/s\), (\d+) with errors")


def ray_speed(device: str, metric: str, rows: int, captions_per_image: int, batch_size: int, workers: int) -> dict | None:
    """`capscope score` on one file, run here and with `--engine ray` on this
    machine (RAY_ADDRESS, else a cluster started here, else a new one): what the
    Ray path costs where it has nothing to spread over. None without Ray."""
    if importlib.util.find_spec("ray") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="capscope-bench-ray-") as tmp:
        folder = Path(tmp)
        files = model_files(folder, (metric,))[metric]
        write_pairs_file(make_shared_pairs(rows, captions_per_image), folder / "pairs.jsonl")
        command = [sys.executable, "-m", "capscope.cli", "score", "--input", str(folder / "pairs.jsonl"),
                   "--metric", metric, "--regions", "given", "--device", device, "--batch-size", str(batch_size)]
        command += [arg for key, value in files.items() for arg in (f"--{key.replace('_', '-')}", value)]
        local = timed_score(command + ["--output", str(folder / "local.jsonl")])
        ray = timed_score(command + ["--output", str(folder / "ray.jsonl"), "--engine", "ray", "--workers", str(workers)])
    return {"metric": metric, "rows": rows, "captions_per_image": captions_per_image, "workers": workers,
            "local": local, "ray": ray, "ratio": ray["rows_per_s"] / local["rows_per_s"]}


def write_pairs_file(pairs: list[dict], path: Path) -> None:
    """`capscope score` input: each distinct image saved once as PNG beside the file."""
    names: dict[int, str] = {}
    with path.open("w", encoding="utf-8") as out:
        for pair in pairs:
            image = pair["image"]
            if id(image) not in names:
                names[id(image)] = f"image{len(names)}.png"
                image.save(path.parent / names[id(image)])
            out.write(json.dumps({**pair, "image": names[id(image)]}) + "\n")


def timed_score(command: list[str]) -> dict:
    """Rows/s of the scoring loop as the command logs it (the Ray one includes
    starting its workers and their models) and the wall time of the whole command."""
    start = time.perf_counter()
    # the Ray run's instance serves this machine alone: keep it on loopback (Ray binds the machine's address otherwise)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    found = SCORE_LOG.search(done.stderr)
    if done.returncode != 0 or found is None or int(found.group(4)):
        raise RuntimeError(f"bench: capscope score failed: {done.stderr.strip()[-500:]}")
    rows, seconds = int(found.group(1)), float(found.group(2))
    return {"rows_per_s": float(found.group(3)), "loop_s": seconds, "wall_s": wall, "wall_rows_per_s": rows / wall}


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


def run(device: str = "auto", n_pairs: int = 24, rescore_runs: int = 50, batch_size: int = 16,
        metrics=BENCH_METRICS, region_sources=("classic", "sam", "yolo", "fastsam", "mobilesam"), breakdown: bool = True,
        captions_per_image: int = 5, ray_workers: int = 2, ray_rows: int = 100,
        precisions=("fp32", "bf16", "fp16"), region_weights: str = "auto", throughput_pairs: int = 0,
        caption_words=(20, 80, 200), repeats: int = 3) -> dict:
    from capscope.metrics.loading import resolve_device

    dev = resolve_device(device)
    pairs = make_pairs(n_pairs)
    with tempfile.TemporaryDirectory(prefix="capscope-bench-") as tmp:
        scorers = build_models(Path(tmp), str(dev), metrics)
    first = next(iter(scorers.values()))
    speed = word_encoding_speedup(scorers.get("infometic", first), [p["caption"] for p in pairs])
    result = {
        "device": f"{dev.type}: " + (torch.cuda.get_device_name(dev) if dev.type == "cuda" else machine()),
        "clip_model": f"{CLIP_MODEL} (random weights)",
        "word_encoding_speedup": speed["speedup"],
        "pairs_per_s": {}, "naive_pairs_per_s": {}, "rescore_ms": {},
        "peak_rss_mb": 0.0,
    }
    naive_timing: dict[str, dict] = {}
    shared = {"captions_per_image": captions_per_image, "pairs_per_s": {}, "naive_pairs_per_s": {}}
    shared_pairs = make_shared_pairs(n_pairs, captions_per_image) if captions_per_image > 1 else []
    peak_gpu: dict[str, float | None] = {}
    for name, scorer in scorers.items():
        pairs_per_second(scorer, pairs[: min(4, len(pairs))], batch_size)  # warm-up
        reset_peak_gpu(dev)
        result["pairs_per_s"][name] = pairs_per_second(scorer, pairs, batch_size, repeats)
        peak_gpu[name] = peak_gpu_mb(dev)
        naive_pairs_per_second(scorer, name, pairs[:2])  # warm-up
        naive_timing[name] = {}
        result["naive_pairs_per_s"][name] = naive_pairs_per_second(scorer, name, pairs, naive_timing[name], repeats)
        result["rescore_ms"][name] = rescore_ms(scorer, pairs[0], rescore_runs)
        if shared_pairs:
            shared["pairs_per_s"][name] = pairs_per_second(scorer, shared_pairs, batch_size, repeats)
            shared["naive_pairs_per_s"][name] = naive_pairs_per_second(scorer, name, shared_pairs, repeats=repeats)
    extra = {"word_encoding": speed, "n_pairs": n_pairs, "batch_size": batch_size, "repeats": repeats,
             "regions_per_pair": float(np.mean([len(p["regions"]) for p in pairs])),
             "naive_image_tower_share": {k: v["image_tower_share"] for k, v in naive_timing.items() if v}}
    if shared_pairs:
        extra["shared_images"] = shared
    if caption_words:
        extra["caption_length"] = caption_length_speed(scorers, n_pairs, batch_size, caption_words)
    if breakdown:
        extra["rescore_breakdown_ms"] = {name: rescore_breakdown(s, name, pairs[0]) for name, s in scorers.items()}
    if region_sources:
        extra["region_source_s_640px"] = region_source_seconds(region_sources, device=str(dev),
                                                               pretrained=region_weights != "random",
                                                               repeats=3 if dev.type == "cuda" else 1)
    if dev.type == "cuda":
        extra["peak_gpu_mb_batch"] = peak_gpu
    if throughput_pairs:
        extra["clip_s_throughput"] = clip_s_throughput(
            str(dev), throughput_pairs, max(batch_size, 256), ("fp32", *[p for p in precisions if p != "fp32"]),
            (None, 128) if dev.type == "cuda" else (None,))
    if len(precisions) > 1:
        extra["precision"] = precision_figures(str(dev), pairs, batch_size, ("fp32", *[p for p in precisions if p != "fp32"]),
                                               tuple(dict.fromkeys(("clip-s", *metrics))))
    if ray_workers:
        ray = ray_speed(dev.type, metrics[0], ray_rows, captions_per_image, batch_size, ray_workers)
        if ray is not None:
            extra["ray"] = ray
    result["peak_rss_mb"] = peak_rss_mb()
    if dev.type == "cuda":  # the largest of the per-metric peaks and of what ran after the last reset
        result["peak_gpu_mb"] = max([torch.cuda.max_memory_allocated() / 2**20, *filter(None, peak_gpu.values())])
    result["details"] = extra
    return result


def summary(result: dict) -> str:
    lines = [f"device: {result['device']}", f"CLIP: {result['clip_model']}",
             f"word encoding speed-up: {result['word_encoding_speedup']:.1f}x"]
    best = f"best of {result['details'].get('repeats', 1)} runs"
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
                     f"the host alone (towers free) {sweep['host_ceiling_pairs_per_s']:.0f}")
    lines.append(f"peak RSS: {result['peak_rss_mb']:.0f} MB")
    if result.get("peak_gpu_mb") is not None:
        lines.append(f"peak GPU memory (torch): {result['peak_gpu_mb']:.0f} MB")
    return "\n".join(lines)
