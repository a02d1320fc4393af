"""A pass's spare rows take the images scored next (look-ahead) instead of
copies: which images fit, that they are cached for their turn, that the
look-ahead is read only while rows are spare, and that the pipeline hands each
batch the next one. The numbers staying the same is test_batch_invariance's."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from capscope.batch.pipeline import local_results
from capscope.common.lru import LRUCache
from capscope.metrics.image_cache import ImageHash, encode_cached, image_key, spare_fill
from capscope.metrics.input_rows import Upcoming
from capscope.metrics.regions import Region


def image(shade: int) -> Image.Image:
    return Image.fromarray(np.full((8, 8, 3), shade, dtype=np.uint8))


def regions(n: int) -> list[Region]:
    return [Region(box=(0, 0, 4 + k, 4)) for k in range(n)]


def upcoming(shade: int, n: int) -> tuple[list[Region], ImageHash]:
    """A look-ahead entry: an image's `n` regions and its hash."""
    return regions(n), ImageHash(image(shade))


SHADES = {image_key(image(shade)): shade for shade in range(10)}


def key_of(image_hash: str, rs: list[Region]) -> str:
    """A pair's cache key: its image's shade (for reading) and its region count."""
    return f"{SHADES[image_hash]}:{len(rs)}"


class Passes:
    """A stand-in encoder: one 'feature' per image (its cache key), and the rows it was asked for."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, images, rs):
        self.calls.append([key_of(image_key(im), r) for im, r in zip(images, rs)])
        return self.calls[-1]


def test_fill_takes_in_order_what_fits_and_skips_cached_and_taken():
    cache = LRUCache(8)
    cache["4:0"] = "cached"
    ahead = [upcoming(1, 3), upcoming(2, 1), upcoming(3, 0), upcoming(4, 0), upcoming(5, 0)]
    # 5 rows used of an 8-row pass: 3 spare. Image 1 needs 4 (skipped), 2 needs 2, 3 needs 1; then none spare
    chosen = spare_fill(5, 8, ahead, key_of, cache, taken={"9:0"})
    assert [key for key, _, _ in chosen] == ["2:1", "3:0"]
    # image 3 is in this batch already (taken), image 4 cached: image 5 takes the row
    chosen = spare_fill(7, 8, ahead[2:], key_of, cache, taken={"3:0"})
    assert [key for key, _, _ in chosen] == ["5:0"]


def test_fill_reads_no_look_ahead_when_no_row_is_spare():
    def never():
        raise AssertionError("the look-ahead was read")
        yield

    assert spare_fill(16, 8, never(), key_of, LRUCache(4), set()) == []
    assert spare_fill(0, 8, never(), key_of, LRUCache(4), set()) == []


def test_look_ahead_images_are_encoded_in_spare_rows_and_cached_for_their_turn():
    cache, encode = LRUCache(16), Passes()
    now = [(image(1), regions(2)), (image(2), [])]  # 3 + 1 rows of a 8-row pass: 4 spare
    later = [upcoming(3, 1), upcoming(4, 4), upcoming(5, 0)]
    out = encode_cached(cache, key_of, encode, [im for im, _ in now], [rs for _, rs in now], iter(later), 8)
    assert out == ["1:2", "2:0"]  # the caller gets its own images only
    assert encode.calls == [["1:2", "2:0", "3:1", "5:0"]]  # image 4 (5 rows) does not fit
    assert "3:1" in cache and "5:0" in cache and "4:4" not in cache
    # their turn: only image 4 is encoded
    out = encode_cached(cache, key_of, encode, [h.image for _, h in later], [rs for rs, _ in later], (), 8)
    assert out == ["3:1", "4:4", "5:0"] and encode.calls[-1] == ["4:4"]


def test_upcoming_reads_each_row_once_and_skips_rows_it_cannot_read():
    reads = []

    def read(row):
        reads.append(row)
        return None if row == "bad" else (row, [])

    upcoming = Upcoming(["a", "bad", "b"], read)
    assert next(iter(upcoming)) == ("a", [])
    assert reads == ["a"]  # read only as far as asked
    assert list(upcoming) == [("a", []), ("b", [])] and list(upcoming) == [("a", []), ("b", [])]
    assert reads == ["a", "bad", "b"]


@pytest.mark.parametrize("n, size", [(7, 3), (6, 3), (2, 5), (0, 3)])
def test_the_pipeline_hands_each_batch_the_next_as_its_look_ahead(n, size):
    seen = []

    def work(batch, ahead):
        seen.append((list(batch), list(ahead)))
        return batch

    assert list(local_results(work, iter(range(n)), size)) == list(range(n))
    batches = [list(range(i, min(i + size, n))) for i in range(0, n, size)]
    assert seen == [(b, batches[k + 1] if k + 1 < len(batches) else []) for k, b in enumerate(batches)]
