"""`capscope bench`'s click to segment: for each segmenter, on one demo-world scene
drawn at 640 px, the image embedding's time and a click's time once the image is
set, beside the naive way (the image encoder run again at every click) in the
same run. SAM and SAM 2 run with their real weights when they are here, else with
random weights of the same architecture (the networks' cost does not depend on them)."""
from __future__ import annotations

import time

import numpy as np
import torch

from capscope.bench.speed_pairs import scene
from capscope.bench.speed_timing import percentile, synchronize
from capscope.metrics.loading import ModelUnavailable

CLICK_SEGMENTERS = ("classic", "sam", "sam2")


def make_segmenter(name: str, device: str, pretrained: bool):
    """(segmenter, "pretrained" | "random" | "none")."""
    from capscope.metrics import click_segmenters as cs

    if name == "classic":
        return cs.ClassicClickSegmenter(), "none"
    if pretrained:
        try:
            return cs.make_click_segmenter(name, device), "pretrained"
        except ModelUnavailable:
            pass
    torch.manual_seed(0)
    if name == "sam":
        return cs.SamClickSegmenter.with_random_weights(device=device), "random"
    return cs.Sam2ClickSegmenter(device=device, random_weights=True), "random"


def click_prompts(boxes: list, n: int, rng: np.random.Generator) -> list[list[tuple[float, float, int]]]:
    """`n` growing prompts, as an annotator's clicks come: the first inside a shape, then
    positive clicks inside it and negative ones outside, alternating."""
    x0, y0, x1, y1 = boxes[0]
    points = [((x0 + x1) / 2, (y0 + y1) / 2, 1)]
    prompts = [list(points)]
    while len(prompts) < n:
        if len(points) % 2:
            point = (float(rng.uniform(0, x0 or 1)), float(rng.uniform(0, 640)), 0)
        else:
            point = (float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1)), 1)
        points.append(point)
        prompts.append(list(points))
    return prompts


def click_latency(segmenters=CLICK_SEGMENTERS, clicks: int = 8, naive_clicks: int = 3, device: str = "cpu",
                  pretrained: bool = True) -> dict:
    rng = np.random.default_rng(3)
    image, boxes, _ = scene(rng, 640)
    prompts = click_prompts(boxes, clicks, rng)
    out = {}
    for name in segmenters:
        try:
            segmenter, weights = make_segmenter(name, device, pretrained)
        except ModelUnavailable as err:  # sam2 not installed
            out[name] = {"error": str(err)}
            continue
        embedding = segmenter.embed(image)  # warm-up
        segmenter.predict(embedding, prompts[0])
        embed_ms = _timed(lambda: segmenter.embed(image), device)[1]
        embedding = segmenter.embed(image)
        click_ms = [_timed(lambda p=p: segmenter.predict(embedding, p), device)[1] for p in prompts]
        naive_ms = [_timed(lambda p=p: segmenter.predict(segmenter.embed(image), p), device)[1]
                    for p in prompts[:naive_clicks]]
        p50, naive = percentile(click_ms, 50), percentile(naive_ms, 50)
        out[name] = {"segmenter": segmenter.name, "fallback": bool(segmenter.fallback), "weights": weights,
                     "image_side": max(image.size), "embedding_ms": embed_ms, "clicks": len(click_ms),
                     "click_ms_p50": p50, "click_ms_p90": percentile(click_ms, 90),
                     "naive_clicks": len(naive_ms), "naive_click_ms_p50": naive, "speedup": naive / p50}
    return out


def _timed(call, device: str):
    synchronize(device)
    start = time.perf_counter()
    value = call()
    synchronize(device)
    return value, (time.perf_counter() - start) * 1000
