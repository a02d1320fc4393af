"""Click to segment and added regions, sent what an attacker would send: prompts that are
not numbers, masks of another size or that decode to nothing, a flood of calls, an item
of someone else's; and the per-user cap that keeps one annotator from holding the segmenter."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from capscope.metrics.regions import compressed_counts
from capscope.server.segmenting import PER_USER, ClickService, SegmentingBusy
from security_support import ANN, BOB, basic


@pytest.fixture
def ann_item(http):
    item = http.get("/api/items/next", headers=basic(ANN)).json()
    return item["item_id"], item["width"], item["height"]


@pytest.mark.parametrize("body", [
    b'{"points": [[NaN, 5, 1]]}', b'{"points": [[Infinity, 5, 1]]}', b'{"points": [[1e999, 5, 1]]}',
    b'{"points": [[5, 5, true]]}', b'{"points": [[5, 5]]}', b'{"points": "5,5,1"}', b'{"box": [0, 0, NaN, 4]}',
    b'{"box": [0, 0, 1e308, 1e308]}', b'{"points": [[5, 5, 1, 9]]}',
])
def test_prompts_that_are_not_points_are_422(http, ann_item, body):
    item_id, _, _ = ann_item
    answer = http.post(f"/api/items/{item_id}/segment", content=body,
                       headers={**basic(ANN), "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text


def test_masks_that_do_not_fit_the_image_are_422(http, ann_item):
    item_id, width, height = ann_item
    for mask in ({"size": [10**9, 10**9], "counts": "0"}, {"size": [height, width], "counts": [height * width + 1]},
                 {"size": [height, width], "counts": [height * width]}, {"size": [height, width], "counts": ""},
                 {"size": [height, width]}, {"size": "x", "counts": "y"}):
        answer = http.post(f"/api/items/{item_id}/regions", json={"mask": mask}, headers=basic(ANN))
        assert answer.status_code == 422, (mask, answer.text)


def test_someone_elses_item_is_refused(http, ann_item):
    item_id, _, _ = ann_item
    bobs = http.get("/api/items/next", headers=basic(BOB)).json()["item_id"]
    if bobs == item_id:  # both were given the same item: find one given to neither
        bobs = item_id + 1
    for path, body in (("segment", {"points": [[1, 1, 1]]}), ("regions", {"box": [0, 0, 4, 4]})):
        answer = http.post(f"/api/items/{bobs}/{path}", json=body, headers=basic(ANN))
        assert answer.status_code in (403, 404), answer.text


class HeldSegmenter:
    """A segmenter whose clicks wait until released: holds calls in flight to test the cap."""
    name, fallback = "held", True

    def __init__(self):
        self.release = threading.Event()

    def embed(self, image):
        from capscope.metrics.click_protocol import Embedding
        return Embedding(image.width, image.height, None)

    def predict(self, embedding, points, box=None):
        import numpy as np
        self.release.wait(10)
        return np.ones((embedding.height, embedding.width), dtype=bool), None


def test_one_user_cannot_hold_the_segmenter(tmp_path):
    from PIL import Image

    path = tmp_path / "a.png"
    Image.new("RGB", (8, 8)).save(path)
    segmenter = HeldSegmenter()
    service = ClickService(segmenter=segmenter)
    threads = [threading.Thread(target=service.segment, args=(1, str(path), [(1, 1, 1)]), kwargs={"user": "ann"})
               for _ in range(PER_USER)]
    for thread in threads:
        thread.start()
    while service.in_flight.count("ann") < PER_USER:
        threading.Event().wait(0.01)
    with pytest.raises(SegmentingBusy):
        service.segment(1, str(path), [(1, 1, 1)], user="ann")
    segmenter.release.set()  # another user is not refused, and ann is served again once hers finish
    assert service.segment(1, str(path), [(1, 1, 1)], user="bob")["mask"]["size"] == [8, 8]
    for thread in threads:
        thread.join()
    assert service.segment(1, str(path), [(1, 1, 1)], user="ann")["fallback"] is True
    service.close()


def test_a_compressed_mask_that_does_not_cover_the_image_is_422(http, ann_item):
    """On a15ad8a a COCO RLE string whose runs ended early was stored, and
    pycocotools filled the rest of the mask from memory it had not written."""
    from pycocotools import mask as coco_mask

    item_id, width, height = ann_item
    small = np.zeros((8, 8), dtype=np.uint8, order="F")
    small[2:6, 2:6] = 1
    short = coco_mask.encode(small)["counts"].decode()  # runs of 64 pixels, not width x height
    for counts in (short, short + "1", "0" * 3 + "j", "\x7f", "ab\u00e9"):
        answer = http.post(f"/api/items/{item_id}/regions", json={"mask": {"size": [height, width], "counts": counts}},
                           headers=basic(ANN))
        assert answer.status_code == 422, (counts, answer.text)


def test_compressed_counts_read_as_pycocotools_writes_them():
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(0)
    for height, width in ((1, 1), (5, 7), (40, 30), (97, 131)):
        for share in (0.0, 0.01, 0.5, 1.0):
            mask = np.asfortranarray((rng.random((height, width)) < share).astype(np.uint8))
            counts = compressed_counts(coco_mask.encode(mask)["counts"].decode())
            flat = mask.T.reshape(-1)
            changes = np.flatnonzero(np.diff(np.concatenate([[0], flat, [2]])) != 0)
            assert counts == [int(changes[0]), *np.diff(changes).astype(int).tolist()]
    assert compressed_counts("") == []
    with pytest.raises(ValueError):
        compressed_counts("R")  # a count whose next group never comes (0x20 set)


class CountingSegmenter(HeldSegmenter):
    def __init__(self):
        super().__init__()
        self.release.set()
        self.embedded: list[tuple[int, int]] = []

    def embed(self, image):
        self.embedded.append(image.size)
        return super().embed(image)


def images(tmp_path, n: int) -> list[str]:
    from PIL import Image

    paths = []
    for i in range(n):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", (8 + i, 8)).save(path)
        paths.append(str(path))
    return paths


def test_a_bad_prompt_is_refused_before_any_embedding(tmp_path):
    """On a15ad8a a point outside the image got its 422 only after the image's embedding was made."""
    from capscope.annotation.refusals import Invalid

    segmenter = CountingSegmenter()
    service = ClickService(segmenter=segmenter)
    (path,) = images(tmp_path, 1)
    for points in ([(50, 1, 1)], [(float("nan"), 1, 1)], [(1, 1, 2)], []):
        with pytest.raises(Invalid):
            service.segment(1, path, points, user="ann", size=(8, 8))
    assert segmenter.embedded == []
    assert service.segment(1, path, [(1, 1, 1)], user="ann", size=(8, 8))["mask"]["size"] == [8, 8]
    service.close()


def test_look_aheads_wait_behind_clicks_and_evict_no_one_else(tmp_path):
    """On a15ad8a one user's look-aheads queued without end and pushed others' embeddings out."""
    from capscope.server import segmenting

    segmenter = HeldSegmenter()  # embeddings are made at once; clicks wait for `release`
    service = ClickService(segmenter=segmenter)
    paths = images(tmp_path, 40)
    segmenter.release.set()
    service.segment(0, paths[0], [(1, 1, 1)], user="bob")  # bob's image is kept
    service.segment(1, paths[1], [(1, 1, 1)], user="ann")  # ann has clicked: she gets look-aheads
    for i in range(2, 40):
        service.prefetch("ann", i, paths[i])
    waiting = [f for _p, _o, f, _path in service._embedder._queue if not f.cancelled()]
    assert len(waiting) <= 1  # her newest look-ahead only
    assert 0 in service._kept  # bob's embedding was not evicted by ann's
    assert len(service._kept) <= segmenting.KEPT_EMBEDDINGS
    service.close()


def test_the_server_computes_at_most_at_once_segment_calls(tmp_path, monkeypatch):
    from capscope.server import segmenting

    monkeypatch.setattr(segmenting, "WAIT_S", 0.2)
    segmenter = HeldSegmenter()
    service = ClickService(segmenter=segmenter)
    (path,) = images(tmp_path, 1)
    users = [f"user{i}" for i in range(segmenting.AT_ONCE)]
    threads = [threading.Thread(target=service.segment, args=(1, path, [(1, 1, 1)]), kwargs={"user": u})
               for u in users]
    for thread in threads:
        thread.start()
    while service._turns._value:
        threading.Event().wait(0.01)
    with pytest.raises(SegmentingBusy):
        service.segment(1, path, [(1, 1, 1)], user="someone else")
    segmenter.release.set()
    for thread in threads:
        thread.join()
    service.close()


@pytest.mark.slow
def test_the_fallback_costs_a_large_photo_what_a_small_one_costs():
    """On a15ad8a a click of the fallback on a 36-megapixel image took 1.5-2.4 s and 416 MB here."""
    import time
    import tracemalloc

    from PIL import Image, ImageDraw

    from capscope.metrics.click_segmenters import ClassicClickSegmenter

    image = Image.new("RGB", (7200, 5000), (200, 200, 200))
    ImageDraw.Draw(image).ellipse((2000, 1500, 4000, 3500), fill=(200, 30, 30))
    segmenter = ClassicClickSegmenter()
    embedding = segmenter.embed(image)
    tracemalloc.start()
    started = time.perf_counter()
    mask, _ = segmenter.predict(embedding, [(3000, 2500, 1)])
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    circle = np.pi * 1000**2
    assert abs(mask.sum() - circle) < 0.05 * circle  # the walk runs 144 px a side: its edge is coarse
    assert peak < 100, f"{peak:.0f} MB"  # the image-sized mask (36 MB) and PIL's copy of it
    print(f"one click on 36 MP: {seconds:.2f} s, {peak:.0f} MB traced")


def test_a_regions_prompts_are_checked_with_it(http, ann_item):
    item_id, width, height = ann_item
    box = [1, 1, min(9, width - 1), min(9, height - 1)]
    for prompts in ({"points": [[width + 5, 1, 1]]}, {"box": [0, 0, width * 2, 4]}):
        answer = http.post(f"/api/items/{item_id}/regions", json={"box": box, "prompts": prompts}, headers=basic(ANN))
        assert answer.status_code == 422, (prompts, answer.text)
    answer = http.post(f"/api/items/{item_id}/regions", content=b'{"box": [1, 1, 9, 9], "prompts": {"points": '
                       b'[[NaN, 1, 1]]}}', headers={**basic(ANN), "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
