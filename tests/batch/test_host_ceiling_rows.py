"""Issue 59's host-side work changes no number: rows built without asdict and
the encoder's preprocessing (metrics.preprocess) give the rows that the plain
path (asdict, open_clip's transform image by image) gives, errors included."""
from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
import torch
from PIL import Image

from capscope.metrics import encoder
from capscope.metrics.result import PhraseScore, PieceScore, WordScore, plain
from capscope.metrics.text import Token

CAPTION = "a small red circle and a large blue square."


def picture(seed: int, size=(96, 80), mode="RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    return image if mode == "RGB" else image.convert(mode)


# ---------------------------------------------------------------- no model

def test_plain_is_asdict():
    items = [Token("dog", 2, 5, True), PieceScore("dog", 1, 0.25), PieceScore("</w>", None, -1.5),
             PhraseScore("a dog", [0, 1], 0.5, False), WordScore("dog", 2, 5, 0.125)]
    for item in items:
        assert plain(item) == asdict(item) == (item.to_dict() if hasattr(item, "to_dict") else asdict(item))
    phrase = items[3]
    assert plain(phrase)["tokens"] is not phrase.tokens  # a copy, as asdict's


def test_plain_falls_back_to_asdict_for_nested_values():
    odd = PieceScore("x", 0, np.float32(0.5))  # not a plain float: asdict's own answer
    assert plain(odd) == asdict(odd)
    nested = PhraseScore("x", [[0]], 0.5, True)
    out = plain(nested)
    assert out == asdict(nested) and out["tokens"][0] is not nested.tokens[0]


# ---------------------------------------------------------------- the demo model

@pytest.fixture(scope="module")
def demo_scorer():
    """The bundled demo CLIP (64 px: every image is resized, every region crop
    pasted on its canvas) behind clip-s, infometic and hice."""
    from capscope.metrics.scorer import Scorer

    return Scorer(["clip-s", "infometic", "hice"], device="cpu", regions="given")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    sizes = [(96, 80), (224, 224), (300, 200), (64, 64), (51, 130)]
    for k, size in enumerate(sizes):
        picture(k, size, "L" if k == 3 else "RGB").save(folder / f"p{k}.png")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return folder, sizes


def rows_for(folder, sizes):
    rows = [{"id": f"r{k}", "image": f"p{k}.png", "caption": CAPTION,
             "regions": [[2, 3, w // 2, h // 2], [w // 3, h // 4, w - 1, h - 2]]} for k, (w, h) in enumerate(sizes)]
    rows.insert(2, {"id": "gone", "image": "missing.png", "caption": CAPTION})
    rows.insert(4, {"id": "broken", "image": "broken.png", "caption": CAPTION})
    rows.append({"id": "empty caption and missing file", "image": "missing.png", "caption": ""})
    return rows


def transform_encode_images(self, images):
    """encode_images as it was before metrics.preprocess: open_clip's transform, image by image."""
    rows = encoder.pass_rows(encoder.IMAGE_ROWS, self.device)
    out = []
    with self.running():
        for start in range(0, len(images), rows):
            pixels = [self.preprocess(im.convert("RGB")) for im in images[start : start + rows]]
            batch = torch.stack(encoder.filled_to(pixels, rows))
            out.append(self.model.encode_image(batch.to(self.device)).float().cpu()[: len(pixels)])
    return torch.cat(out) if out else torch.zeros(0, self.dim)


@pytest.mark.slow
def test_encoder_on_metrics_preprocess_gives_the_same_rows(demo_scorer, files, monkeypatch):
    folder, sizes = files
    rows = rows_for(folder, sizes)
    rows += [{"id": f"m{k}", "image": picture(10 + k, (40 + 37 * k, 90), mode), "caption": CAPTION, "regions": [[1, 1, 30, 30]]}
             for k, mode in enumerate(["RGB", "RGBA", "P", "CMYK", "RGB", "L", "RGB", "RGB", "RGB", "RGB"])]
    backbones = {m.backbone for m in demo_scorer.metrics.values()}
    for backbone in backbones:
        backbone.clear_caches()
    today = demo_scorer.score_batch(rows, base_dir=folder)
    for backbone in backbones:
        backbone.clear_caches()
    monkeypatch.setattr(encoder.ClipBackbone, "encode_images", transform_encode_images)
    assert demo_scorer.score_batch(rows, base_dir=folder) == today
