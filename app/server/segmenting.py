"""Click to segment on the server: one segmenter, image embeddings kept per image.

An item's image embedding is computed once (on the first click, or ahead when
the item is handed out) and kept for its clicks in a small LRU. Embeddings are
computed one at a time in one background thread, so a user who opens many
items cannot hold the segmenter for the others longer than one embedding each.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from capscope.annotation.refusals import Invalid
from capscope.metrics.click_segmenters import ClickSegmenter, Embedding, make_click_segmenter
from capscope.metrics.images import read_image
from capscope.metrics.regions import mask_to_box, mask_to_rle

log = logging.getLogger(__name__)

MAX_POINTS = 64  # clicks in one prompt
KEPT_EMBEDDINGS = 8
PER_USER = 2  # a user's segment calls running at once; more are refused (429)


class SegmentingBusy(Exception):
    """This user already has PER_USER segment calls running."""


class ClickService:
    """`segment(image_id, path, points, box)` -> the answer of POST /api/items/{id}/segment."""

    def __init__(self, name: str = "auto", device: str = "cpu", segmenter: ClickSegmenter | None = None):
        self.requested, self.device = name, device
        self._segmenter = segmenter
        self._load_lock = threading.Lock()
        self._kept: OrderedDict[int, Future] = OrderedDict()
        self._kept_lock = threading.Lock()
        self._embedder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="capscope-embed")
        self._running: dict[str, int] = {}
        self._segmenting: set[str] = set()  # users who have clicked to segment
        self._running_lock = threading.Lock()

    @property
    def segmenter(self) -> ClickSegmenter:
        with self._load_lock:
            if self._segmenter is None:
                self._segmenter = make_click_segmenter(self.requested, self.device)
                log.info("click segmenter: %s", self._segmenter.name)
            return self._segmenter

    def describe(self) -> dict:
        segmenter = self.segmenter
        return {"segmenter": segmenter.name, "fallback": bool(segmenter.fallback)}

    def embedding(self, image_id: int, path: str) -> Future:
        """The image's embedding (a Future), computed at most once while kept."""
        with self._kept_lock:
            future = self._kept.get(image_id)
            if future is None or (future.done() and future.exception() is not None):
                future = self._embedder.submit(self._embed, path)
                self._kept[image_id] = future
            self._kept.move_to_end(image_id)
            while len(self._kept) > KEPT_EMBEDDINGS:
                self._kept.popitem(last=False)
            return future

    def prefetch(self, user: str, image_id: int, path: str) -> None:
        """Compute an item's image embedding ahead when it is handed to a user who has
        clicked to segment before (others may never click: no work spent on them)."""
        if user not in self._segmenting:
            return
        try:
            self.embedding(image_id, path)
        except RuntimeError:  # shutting down
            pass

    def _embed(self, path: str) -> Embedding:
        started = time.perf_counter()
        with open(path, "rb") as handle:
            image = read_image(handle.read(), name="item image")
        embedding = self.segmenter.embed(image)
        embedding.ms = (time.perf_counter() - started) * 1000
        return embedding

    def segment(self, image_id: int, path: str, points, box=None, user: str = "") -> dict:
        with self._running_lock:
            if self._running.get(user, 0) >= PER_USER:
                raise SegmentingBusy(f"you have {PER_USER} segment calls running; wait for them")
            self._running[user] = self._running.get(user, 0) + 1
            self._segmenting.add(user)
        try:
            return self._segment(image_id, path, points, box)
        finally:
            with self._running_lock:
                self._running[user] -= 1
                if not self._running[user]:
                    del self._running[user]

    def _segment(self, image_id: int, path: str, points, box) -> dict:
        future = self.embedding(image_id, path)
        embedding = future.result()
        checked_points, checked_box = checked_prompts(points, box, embedding.width, embedding.height)
        started = time.perf_counter()
        mask, score = self.segmenter.predict(embedding, checked_points, checked_box)
        ms = (time.perf_counter() - started) * 1000
        mask = np.asarray(mask, dtype=bool)
        box_out = [round(v, 2) for v in mask_to_box(mask)] if mask.any() else None
        return {"box": box_out, "mask": mask_to_rle(mask), "score": score, "segmenter": self.segmenter.name,
                "fallback": bool(self.segmenter.fallback), "ms": round(ms, 2),
                "embedding_ms": round(embedding.ms, 2)}

    def close(self) -> None:
        self._embedder.shutdown(wait=False, cancel_futures=True)


def checked_prompts(points, box, width: int, height: int) -> tuple[list[tuple[float, float, int]], tuple | None]:
    """Points [[x, y, 1|0], ...] and box [x0, y0, x1, y1] inside a width x height image, or Invalid."""
    points = list(points or [])
    if not points and box is None:
        raise Invalid("give at least one point [x, y, 1|0] or a box [x0, y0, x1, y1]")
    if len(points) > MAX_POINTS:
        raise Invalid(f"at most {MAX_POINTS} points in one prompt")
    checked = []
    for point in points:
        if len(point) != 3 or type(point[2]) is not int or point[2] not in (0, 1) or not all(np.isfinite(point[:2])):
            raise Invalid("a point is [x, y, 1] (positive) or [x, y, 0] (negative)")
        x, y = float(point[0]), float(point[1])
        if not (0 <= x < width and 0 <= y < height):
            raise Invalid(f"point ({x:g}, {y:g}) is outside the {width} x {height} image")
        checked.append((x, y, int(point[2])))
    if box is not None:
        x0, y0, x1, y1 = (float(v) for v in box)
        if not all(np.isfinite((x0, y0, x1, y1))) or not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
            raise Invalid(f"box must satisfy 0 <= x0 < x1 <= {width} and 0 <= y0 < y1 <= {height}")
        box = (x0, y0, x1, y1)
    return checked, box
