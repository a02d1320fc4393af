"""Click segmenters: the labelled fallback against hand-made shapes, and SAM's and
SAM 2's real predictors (random weights: their masks mean nothing, their plumbing is tested)."""
import numpy as np
import pytest
from PIL import Image

from capscope.metrics.click_segmenters import ClassicClickSegmenter, make_click_segmenter


def disc_scene(seed=0, size=200, centre=(70, 90), radius=30):
    rng = np.random.default_rng(seed)
    pixels = np.clip(rng.normal(225, 8, (size, size, 3)), 0, 255)
    yy, xx = np.mgrid[:size, :size]
    disc = (xx - centre[0]) ** 2 + (yy - centre[1]) ** 2 <= radius ** 2
    pixels[disc] = (40, 70, 220)
    square = (xx >= 130) & (xx < 170) & (yy >= 20) & (yy < 60)
    pixels[square] = (220, 30, 30)
    return Image.fromarray(pixels.astype(np.uint8)), disc, square


def iou(a, b):
    return (a & b).sum() / (a | b).sum()


def test_one_click_inside_a_shape_gives_that_shape():
    image, disc, square = disc_scene()
    segmenter = ClassicClickSegmenter()
    embedding = segmenter.embed(image)
    mask, score = segmenter.predict(embedding, [(70, 90, 1)])
    assert mask.shape == disc.shape and mask.dtype == bool and score is None
    assert iou(mask, disc) >= 0.85 and not (mask & square).any()
    assert segmenter.fallback and "fallback" in segmenter.name


def test_negative_click_and_box_prompt():
    image, disc, square = disc_scene()
    segmenter = ClassicClickSegmenter()
    embedding = segmenter.embed(image)
    # a positive click in each shape gives both; a negative click in the square takes it away again
    both, _ = segmenter.predict(embedding, [(70, 90, 1), (150, 40, 1)])
    assert iou(both, disc | square) >= 0.85
    one, _ = segmenter.predict(embedding, [(70, 90, 1), (150, 40, 1), (150, 40, 0)])
    assert not (one & square).any() and iou(one, disc) >= 0.85
    boxed, _ = segmenter.predict(embedding, [], box=(125, 15, 175, 65))
    assert iou(boxed, square) >= 0.85
    empty, _ = segmenter.predict(embedding, [(10, 10, 0)])
    assert not empty.any()  # only a negative click: nothing to segment


def test_make_click_segmenter_auto_without_weights_is_the_fallback(monkeypatch, tmp_path):
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path))
    monkeypatch.delenv("CAPSCOPE_SAM_CHECKPOINT", raising=False)
    assert make_click_segmenter("auto").fallback
    with pytest.raises(ValueError, match="unknown segmenter"):
        make_click_segmenter("grabcut")


@pytest.mark.slow
def test_sam_and_sam2_predictors_keep_one_embedding_per_image():
    """The real architectures: a click reuses the image's embedding (no new image pass)
    and feeds the previous click's logits back; masks come back at the image's size."""
    from capscope.metrics.click_segmenters import Sam2ClickSegmenter, SamClickSegmenter

    image, _, _ = disc_scene(size=96)
    for segmenter in (SamClickSegmenter.with_random_weights(), Sam2ClickSegmenter(random_weights=True)):
        embedding = segmenter.embed(image)
        calls = []
        encoder = getattr(segmenter.predictor.model, "image_encoder")
        hook = encoder.register_forward_hook(lambda *a: calls.append(1))
        first, score = segmenter.predict(embedding, [(40, 40, 1)])
        second, _ = segmenter.predict(embedding, [(40, 40, 1), (10, 10, 0)])
        hook.remove()
        assert calls == [] and first.shape == (96, 96) and second.dtype == bool and isinstance(score, float)
        assert len(embedding.previous) == 1 and not segmenter.fallback
