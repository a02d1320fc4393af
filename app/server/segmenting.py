"""Click to segment on the server: one segmenter, image embeddings kept per image.

An item's image embedding is computed once (on the first click, or ahead when
the item is handed out) and kept for its clicks in a small cache. Embeddings
are computed one at a time in one background thread. What one user can make
the server do is bounded:
- prompts are checked against the image's stored size before any embedding;
- an item's embedding is made ahead (a look-ahead) when the item is handed to
  anyone who has clicked to segment, or to any user of a dataset in which
  someone has; each user has at most one look-ahead waiting (a newer one
  replaces it), the clicks of anyone go before every look-ahead, and
  look-aheads take at most LOOK_AHEAD_SHARE of the embedding thread's time
  (after one that took t seconds the next waits t * (1 / share - 1)), so that
  scoring and saves keep the cores most of the time;
- the cache evicts from whoever holds the most of it, so one user's
  look-aheads cannot push out another's embeddings;
- at most `PER_USER` segment calls of a user and `AT_ONCE` of all users run
  at once; a call that waits `WAIT_S` for its turn is refused (429).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import os
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future

import numpy as np
from PIL import Image

from capscope.common.in_flight import Busy, InFlight
from capscope.annotation.added_regions import MAX_POINTS, checked_prompts  # noqa: F401  (MAX_POINTS: the API's)
from capscope.metrics.click_protocol import MAX_CANDIDATES, ClickSegmenter, Embedding
from capscope.metrics.click_segmenters import make_click_segmenter
from capscope.metrics.images import read_image
from capscope.metrics.regions import mask_to_box, mask_to_rle

log = logging.getLogger(__name__)

KEPT_EMBEDDINGS = 8
PER_USER = 2  # a user's segment calls running at once; more are refused (429)
AT_ONCE = 2   # segment calls of all users computing at once (the CPU's cores)
WAIT_S = 30.0  # the longest a segment call waits for its turn
CLICK, LOOK_AHEAD = 0, 1  # embedding priorities: clicks first
LOOK_AHEAD_SHARE = 0.5  # the most of the embedding thread's time look-aheads take
KNOWN_IMAGES = 100_000  # image -> dataset entries remembered from hand-outs (oldest forgotten)


WARM_UP_USER = "\0warm-up"  # no user's name: its look-ahead replaces nobody's
WARM_UP_WAIT_S = 300.0


def warm_up_picture() -> Image.Image:
    """A small picture with one object (a square on a plain background) for the warm-up's run."""
    picture = Image.new("RGB", (64, 64), (225, 225, 225))
    picture.paste((200, 40, 40), (20, 20, 44, 44))
    return picture


def mask_answer(mask, score) -> dict:
    """A mask as the segment answer gives it: its box (null when empty), COCO RLE and score."""
    mask = np.asarray(mask, dtype=bool)
    box = [round(v, 2) for v in mask_to_box(mask)] if mask.any() else None
    return {"box": box, "mask": mask_to_rle(mask), "score": None if score is None else float(score)}


class SegmentingBusy(Busy):
    """This user already has PER_USER segment calls running, or the segmenter stayed busy (REST: 429)."""


class ClickService:
    """`segment(image_id, path, points, box)` -> the answer of POST /api/items/{id}/segment:
    the best mask's `box`, `mask` (COCO RLE) and `score`, and `candidates`, every mask the
    segmenter offers for these prompts (the best first, at most 3, each with the same
    `box`, `mask` and `score`) for the annotator to cycle through."""

    def __init__(self, name: str = "auto", device: str = "cpu", segmenter: ClickSegmenter | None = None):
        self.requested, self.device = name, device
        self._segmenter = segmenter
        self._load_lock = threading.Lock()
        self._kept: OrderedDict[int, tuple[Future, str]] = OrderedDict()  # image id -> (embedding, whose)
        self._kept_lock = threading.Lock()
        self._embedder = _Embedder(self._embed)
        self.in_flight = InFlight(PER_USER, "segment calls running", SegmentingBusy)
        self._segmenting: set[str] = set()  # users who have clicked to segment
        self._segmenting_datasets: set[str] = set()  # datasets in which someone has
        self._image_datasets: OrderedDict[int, str] = OrderedDict()  # image id -> dataset, from hand-outs
        self._seen_lock = threading.Lock()
        self._turns = threading.BoundedSemaphore(AT_ONCE)
        self.warmed = threading.Event()  # set once `warm_up` has run (loaded and tried, or failed)
        self.warm_up_ms: float | None = None

    @property
    def segmenter(self) -> ClickSegmenter:
        with self._load_lock:
            if self._segmenter is None:
                self._segmenter = make_click_segmenter(self.requested, self.device)
                log.info("click segmenter: %s (asked for: %s)", self._segmenter.name, self.requested)
            return self._segmenter

    def warm_up(self) -> threading.Thread:
        """Load the segmenter and run it once on a small picture, in a background
        thread, so that the first click after a start costs what any click does:
        the load (imports, weights) and a first run's one-off costs (a model's first
        pass, lazy imports) are paid here. Start-up and requests do not wait for it;
        a click that comes first waits only for the load it would have done itself.
        The picture's embedding goes through the embedding thread like any other,
        after the clicks waiting, and is not kept. A failure is one warning (the
        first click then tries again and says why)."""

        def run():
            started = time.perf_counter()
            try:
                segmenter = self.segmenter
                with tempfile.TemporaryDirectory(prefix="capscope-warm-up-") as folder:
                    path = os.path.join(folder, "warm-up.png")
                    warm_up_picture().save(path)
                    embedding = self._embedder.submit(path, WARM_UP_USER, LOOK_AHEAD).result(timeout=WARM_UP_WAIT_S)
                if self._turns.acquire(timeout=WAIT_S):  # a turn like a click's: never two beyond AT_ONCE
                    try:
                        segmenter.predict(embedding, [[embedding.width // 2, embedding.height // 2, 1]], None)
                    finally:
                        self._turns.release()
                self.warm_up_ms = (time.perf_counter() - started) * 1000
                log.info("click segmenter %s warmed up in %.0f ms", segmenter.name, self.warm_up_ms)
            except Exception as err:  # noqa: BLE001 - a warm-up never takes the server down
                log.warning("click segmenter warm-up failed (the first click will try again): %s",
                            str(err).splitlines()[0] if str(err) else type(err).__name__)
            finally:
                self.warmed.set()

        thread = threading.Thread(target=run, name="capscope-segmenter-warm-up", daemon=True)
        thread.start()
        return thread

    @property
    def name(self) -> str:
        """The segmenter's name once loaded, else the one asked for: naming it loads nothing."""
        return self._segmenter.name if self._segmenter is not None else self.requested

    def describe(self) -> dict:
        segmenter = self.segmenter
        return {"segmenter": segmenter.name, "fallback": bool(segmenter.fallback), "requested": self.requested}

    def embedding(self, image_id: int, path: str, user: str = "", priority: int = CLICK) -> Future:
        """The image's embedding (a Future), computed at most once while kept."""
        with self._kept_lock:
            kept = self._kept.get(image_id)
            future = kept[0] if kept else None
            if future is None or future.cancelled() or (future.done() and future.exception() is not None):
                future = self._embedder.submit(path, user, priority)
            elif priority == CLICK:
                self._embedder.hurry(future)
            self._kept[image_id] = (future, user if kept is None else kept[1])
            self._kept.move_to_end(image_id)
            self._evict()
            return future

    def _evict(self) -> None:
        """Down to KEPT_EMBEDDINGS: the least recently used of whoever holds the most."""
        while len(self._kept) > KEPT_EMBEDDINGS:
            held: dict[str, int] = {}
            for _future, whose in self._kept.values():
                held[whose] = held.get(whose, 0) + 1
            most = max(held.values())
            image_id = next(i for i, (_f, whose) in self._kept.items() if held[whose] == most)
            self._kept.pop(image_id)  # a click waiting on it still gets it

    def prefetch(self, user: str, image_id: int, path: str, dataset: str | None = None) -> None:
        """Compute an item's image embedding ahead when it is handed to a user who has
        clicked to segment before, or to anyone in a `dataset` where someone has (a
        dataset nobody segments costs no work)."""
        with self._seen_lock:
            if dataset is not None:
                self._image_datasets[image_id] = dataset
                self._image_datasets.move_to_end(image_id)
                while len(self._image_datasets) > KNOWN_IMAGES:
                    self._image_datasets.popitem(last=False)
            wanted = user in self._segmenting or (dataset is not None and dataset in self._segmenting_datasets)
        if not wanted:
            return
        try:
            self.embedding(image_id, path, user, LOOK_AHEAD)
        except RuntimeError:  # shutting down
            pass

    def segmenting(self, user: str, image_id: int | None = None) -> None:
        """Note that `user` clicks to segment (on `image_id`, whose dataset, if handed out here, then segments)."""
        with self._seen_lock:
            self._segmenting.add(user)
            dataset = self._image_datasets.get(image_id) if image_id is not None else None
            if dataset is not None:
                self._segmenting_datasets.add(dataset)

    def _embed(self, path: str) -> Embedding:
        started = time.perf_counter()
        with open(path, "rb") as handle:
            image = read_image(handle.read(), name="item image")
        embedding = self.segmenter.embed(image)
        embedding.ms = (time.perf_counter() - started) * 1000
        return embedding

    def segment(self, image_id: int, path: str, points, box=None, user: str = "",
                size: tuple[int, int] | None = None) -> dict:
        """`size`: the image's (width, height) as stored, to check the prompts against before any work."""
        if size is not None:
            checked_prompts(points, box, *size)
        with self.in_flight.held(user):
            self.segmenting(user, image_id)
            if not self._turns.acquire(timeout=WAIT_S):
                raise SegmentingBusy(f"the segmenter stayed busy for {WAIT_S:g} s; try again")
            try:
                return self._segment(image_id, path, points, box, user)
            finally:
                self._turns.release()

    def _segment(self, image_id: int, path: str, points, box, user: str) -> dict:
        future = self.embedding(image_id, path, user)
        embedding = future.result()
        checked_points, checked_box = checked_prompts(points, box, embedding.width, embedding.height)
        started = time.perf_counter()
        several = getattr(self.segmenter, "candidates", None)  # a segmenter with `predict` only gives one mask
        found = several(embedding, checked_points, checked_box) if several is not None \
            else [self.segmenter.predict(embedding, checked_points, checked_box)]
        ms = (time.perf_counter() - started) * 1000
        candidates = [mask_answer(mask, score) for mask, score in found[:MAX_CANDIDATES]]
        return {**candidates[0], "segmenter": self.segmenter.name, "fallback": bool(self.segmenter.fallback),
                "ms": round(ms, 2), "embedding_ms": round(embedding.ms, 2), "candidates": candidates}

    def close(self) -> None:
        self._embedder.close()


class _Embedder:
    """One background thread that computes embeddings, clicks before look-aheads,
    each user's newest look-ahead only (an older one waiting is dropped)."""

    def __init__(self, embed, share: float | None = None):
        self.embed = embed
        self.share = LOOK_AHEAD_SHARE if share is None else share
        self._rest_until = 0.0  # no look-ahead starts before this (time.monotonic)
        self._queue: list[tuple[int, int, Future, str]] = []  # (priority, order, future, path)
        self._order = itertools.count()
        self._look_ahead: dict[str, Future] = {}
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="capscope-embed", daemon=True)
        self._thread.start()

    def submit(self, path: str, user: str, priority: int) -> Future:
        future: Future = Future()
        with self._wake:
            if self._closed:
                raise RuntimeError("the segmenter is shut down")
            if priority == LOOK_AHEAD:
                older = self._look_ahead.get(user)
                if older is not None:
                    older.cancel()
                self._look_ahead[user] = future
            heapq.heappush(self._queue, (priority, next(self._order), future, path))
            self._wake.notify()
        return future

    def hurry(self, future: Future) -> None:
        """A look-ahead someone now clicks on goes before the other look-aheads."""
        with self._wake:
            for i, (priority, order, queued, path) in enumerate(self._queue):
                if queued is future and priority != CLICK:
                    self._queue[i] = (CLICK, order, queued, path)
                    heapq.heapify(self._queue)
                    self._wake.notify()  # a resting thread takes it now
                    break

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._closed:
                    if self._queue and (self._queue[0][0] == CLICK or time.monotonic() >= self._rest_until):
                        break
                    # nothing, or only look-aheads while resting: a click's embedding wakes us
                    self._wake.wait(None if not self._queue else max(0.0, self._rest_until - time.monotonic()))
                if self._closed:
                    return
                priority, _order, future, path = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            started = time.monotonic()
            try:
                future.set_result(self.embed(path))
            except BaseException as err:  # the click that waits on it gets the error
                future.set_exception(err)
            if priority == LOOK_AHEAD and self.share < 1:
                took = time.monotonic() - started
                with self._wake:
                    self._rest_until = time.monotonic() + took * (1 / max(self.share, 1e-3) - 1)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            for _priority, _order, future, _path in self._queue:
                future.cancel()
            self._queue.clear()
            self._wake.notify_all()
