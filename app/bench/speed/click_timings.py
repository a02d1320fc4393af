"""`capscope bench`'s click to segment: for each segmenter, on one demo-world scene
drawn at 640 px, the image embedding's time and a click's time once the image is
set, beside the naive way (the image encoder run again at every click) in the
same run. SAM and SAM 2 run with their real weights when they are here, else with
random weights of the same architecture (the networks' cost does not depend on them:
such rows say `"weights": "random"`).

`prompt_quality` adds the NoC protocol (app/demo/click_targets.py: the first click at
the shape's innermost pixel, each next one at the innermost pixel of the larger
error) on the demo world's shapes, with clicks alone and with a box drawn around
the shape first (NoC@85, NoC@90, and the share of shapes a box alone brings to IoU
0.85); `first_click` the first click on a new image with its embedding made in the
background when the item was handed out against without (embedding + click)."""
from __future__ import annotations

import time

import numpy as np
import torch

from capscope.bench.speed.timed_pairs import scene
from capscope.bench.speed.scoring_timings import percentile, synchronize
from capscope.metrics.loading import ModelUnavailable

CLICK_SEGMENTERS = ("classic", "sam", "sam2", "sam2-tiny", "mobilesam")


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
    if name == "mobilesam":
        return cs.MobileSamClickSegmenter.with_random_weights(device=device), "random"
    return cs.Sam2ClickSegmenter(device=device, random_weights=True, size="tiny" if name == "sam2-tiny" else "small"), \
        "random"


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
        # the first click on a new image: embedding made ahead (look-ahead) or not
        without_ms = [_timed(lambda: segmenter.predict(segmenter.embed(image), prompts[0]), device)[1]
                      for _ in range(naive_clicks)]
        ahead_ms = []
        for _ in range(naive_clicks):
            ready = segmenter.embed(image)  # made in the background when the item was handed out
            ahead_ms.append(_timed(lambda: segmenter.predict(ready, prompts[0]), device)[1])
        p50, naive = percentile(click_ms, 50), percentile(naive_ms, 50)
        out[name] = {"segmenter": segmenter.name, "fallback": bool(segmenter.fallback), "weights": weights,
                     "image_side": max(image.size), "embedding_ms": embed_ms, "clicks": len(click_ms),
                     "click_ms_p50": p50, "click_ms_p90": percentile(click_ms, 90),
                     "naive_clicks": len(naive_ms), "naive_click_ms_p50": naive, "speedup": naive / p50,
                     "first_click_ms": {"embedded_ahead_p50": percentile(ahead_ms, 50),
                                        "without_p50": percentile(without_ms, 50)}}
    return out


def noc(segmenter, target: np.ndarray, embedding, box: bool, goal: float, max_clicks: int = 20) -> int:
    """Prompts (a box counts as one) until IoU >= goal by the NoC protocol; max_clicks + 1 when never."""
    from capscope.demo.click_targets import next_click
    from capscope.metrics.regions import iou

    ys, xs = np.nonzero(target)
    drawn = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)) if box else None
    points, predicted = [], np.zeros_like(target)
    if drawn is not None:
        predicted = np.asarray(segmenter.predict(embedding, [], drawn)[0], dtype=bool)
        if iou(predicted, target) >= goal:
            return 1
    while len(points) < max_clicks:
        points.append(next_click(target, predicted))
        predicted = np.asarray(segmenter.predict(embedding, list(points), drawn)[0], dtype=bool)
        if iou(predicted, target) >= goal:
            return len(points) + (drawn is not None)
    return max_clicks + 1


def prompt_quality(segmenter=None, scenes: int = 8, seed: int = 11) -> dict:
    """NoC@85 and NoC@90 on the demo world's named shapes, with clicks and with a box around
    the shape first; the share of shapes a box alone brings to IoU >= 0.85 (bar: 90 %)."""
    import tempfile
    from pathlib import Path

    from PIL import Image

    from capscope.metrics.click_segmenters import ClassicClickSegmenter
    from capscope.demo.click_targets import write_scenes
    from capscope.metrics.regions import iou

    segmenter = segmenter or ClassicClickSegmenter()
    shapes = []
    with tempfile.TemporaryDirectory() as folder:
        path, targets = write_scenes(Path(folder), scenes, seed)
        for line, (item_id, named) in zip(path.read_text().splitlines(), targets.items()):
            import json

            image = Image.open(Path(folder) / json.loads(line)["image"]).convert("RGB")
            for target, _noun in named:
                shapes.append((image, np.asarray(target, dtype=bool)))
    rows = {"clicks": {}, "box": {}}
    box_one = []
    for image, target in shapes:
        embedding = segmenter.embed(image)
        for way in rows:
            for goal in (0.85, 0.90):
                embedding.previous = {}
                rows[way].setdefault(goal, []).append(noc(segmenter, target, embedding, way == "box", goal))
        ys, xs = np.nonzero(target)
        embedding.previous = {}
        alone = segmenter.predict(embedding, [], (float(xs.min()), float(ys.min()), float(xs.max() + 1),
                                                  float(ys.max() + 1)))[0]
        box_one.append(iou(np.asarray(alone, dtype=bool), target))
    return {"segmenter": segmenter.name, "fallback": bool(segmenter.fallback), "shapes": len(shapes),
            **{f"{way}_noc{round(goal * 100)}": float(np.mean(v)) for way, goals in rows.items()
               for goal, v in goals.items()},
            "box_alone_iou_mean": float(np.mean(box_one)),
            "box_alone_reaches_85": float(np.mean([v >= 0.85 for v in box_one]))}


def _timed(call, device: str):
    synchronize(device)
    start = time.perf_counter()
    value = call()
    synchronize(device)
    return value, (time.perf_counter() - start) * 1000
