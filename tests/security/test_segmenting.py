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
        from capscope.metrics.click_segmenters import Embedding
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
    while sum(service._running.values()) < PER_USER:
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
