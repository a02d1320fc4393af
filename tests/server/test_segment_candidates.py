"""Every mask a segmenter offers for one click comes back (`candidates`, best first, at most 3)
beside the best one's fields, through ClickService and POST /api/items/{id}/segment alike."""
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from annotation_support import sqlite_url
from capscope.annotation.importer import ImportOptions, import_captokeneval
from capscope.annotation.users import add_user
from capscope.metrics.click_segmenters import ClassicClickSegmenter
from capscope.metrics.regions import rle_to_mask
from capscope.server.segmenting import ClickService
from capscope.demo import click_targets

ANN = ("ann", "ann-password-1")
MASK_FIELDS = {"box", "mask", "score"}


def square_picture(path):
    picture = Image.new("RGB", (64, 48), (225, 225, 225))
    picture.paste((200, 40, 40), (20, 10, 44, 34))
    picture.save(path)
    return str(path)


def test_the_fallback_answers_one_candidate_that_is_the_answer(tmp_path):
    service = ClickService(segmenter=ClassicClickSegmenter())
    answer = service.segment(1, square_picture(tmp_path / "a.png"), [(30, 20, 1)], user="ann", size=(64, 48))
    service.close()
    assert len(answer["candidates"]) == 1 and set(answer["candidates"][0]) == MASK_FIELDS
    assert answer["candidates"][0] == {key: answer[key] for key in MASK_FIELDS}
    assert answer["box"] == [20, 10, 44, 34] and answer["score"] is None


class ThreeMasks(ClassicClickSegmenter):
    """The fallback's mask, its box and the whole image, scored out of order: the service keeps the order given."""

    def candidates(self, embedding, points, box=None):
        mask, _ = self.predict(embedding, points, box)
        whole = np.ones_like(mask)
        boxed = np.zeros_like(mask)
        ys, xs = np.nonzero(mask)
        boxed[ys.min():ys.max() + 1, xs.min():xs.max() + 1] = True
        return [(mask, 0.9), (boxed, 0.5), (whole, 0.25)]


def test_several_candidates_each_decode_at_the_image_size(tmp_path):
    service = ClickService(segmenter=ThreeMasks())
    answer = service.segment(1, square_picture(tmp_path / "a.png"), [(30, 20, 1)], user="ann", size=(64, 48))
    service.close()
    scores = [c["score"] for c in answer["candidates"]]
    assert scores == [0.9, 0.5, 0.25] and answer["score"] == 0.9
    masks = [rle_to_mask(c["mask"]) for c in answer["candidates"]]
    assert all(m.shape == (48, 64) for m in masks) and masks[2].all() and answer["candidates"][2]["box"] == [0, 0, 64, 48]


def test_the_rest_answer_carries_the_candidates(tmp_path):
    path, _targets = click_targets.write_scenes(tmp_path, n=2, seed=3)
    from capscope.db import Store
    from capscope.server.api import create_app

    store = Store(sqlite_url(tmp_path))
    import_captokeneval(store, path, ImportOptions(dataset="d", annotators_per_item=1, progress=False))
    add_user(store, *ANN)
    client = TestClient(create_app(store=store, segmenter="classic"), raise_server_exceptions=False)
    item = client.get("/api/items/next", auth=ANN).json()
    answer = client.post(f"/api/items/{item['item_id']}/segment", auth=ANN, json={"points": [[20, 20, 1]]}).json()
    assert {"box", "mask", "score", "segmenter", "fallback", "ms", "candidates"} <= set(answer)
    assert answer["candidates"][0] == {key: answer[key] for key in MASK_FIELDS}


@pytest.mark.slow
def test_sam_and_sam2_give_three_masks_for_a_first_click_best_first_then_one():
    """The real predictors (random weights): a lone first click is ambiguous (three masks,
    sorted by predicted IoU); a second click refines the best (one mask)."""
    from capscope.metrics.click_segmenters import Sam2ClickSegmenter, SamClickSegmenter

    picture = Image.new("RGB", (96, 80), (225, 225, 225))
    for segmenter in (SamClickSegmenter.with_random_weights(), Sam2ClickSegmenter(random_weights=True)):
        embedding = segmenter.embed(picture)
        first = segmenter.candidates(embedding, [(40, 40, 1)])
        scores = [score for _, score in first]
        assert len(first) == 3 and scores == sorted(scores, reverse=True)
        assert all(mask.shape == (80, 96) and mask.dtype == bool for mask, _ in first)
        assert segmenter.predict(embedding, [(40, 40, 1)])[1] == scores[0]
        assert len(segmenter.candidates(embedding, [(40, 40, 1), (5, 5, 0)])) == 1
