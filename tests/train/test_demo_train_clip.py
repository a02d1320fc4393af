"""Demo CLIP: loads through open_clip, its truth matrix is right, steps learn."""
import numpy as np
import pytest
import torch

from capscope.demo.clip_model import load_demo_clip, new_demo_clip, save_demo_clip
from capscope.demo.demo_captions import Phrase
from capscope.demo.scenes import Shape
from capscope.train.clip import (
    ClipTrainConfig, Encoder, Text, View, batch_loss, make_batch,
    make_optimizer, match_matrix, train_clip,
)


def shape(kind, colour, size="small"):
    return Shape(kind, colour, size, (0, 0, 30, 30), (0, 0, 0))


def test_match_matrix_uses_the_true_objects():
    red_circle, blue_square = shape("circle", "red"), shape("square", "blue", "large")
    views = [View(None, (red_circle, blue_square), True), View(None, (red_circle,), False)]
    texts = [
        Text("red", (Phrase(None, "red"),)),
        Text("large square", (Phrase("square", size="large"),)),
        Text("blue circle", (Phrase("circle", "blue"),)),
        Text("two shapes: a red circle and a blue square.",
             (Phrase("circle", "red"), Phrase("square", "blue")), count=2),
        Text("small circle", (Phrase("circle", size="small"),)),
    ]
    targets, weights = match_matrix(views, texts)
    assert targets.tolist() == [[1, 1, 0, 1, 1], [1, 0, 0, 0, 0]]
    # a resized crop cannot show size: size texts are left out of the loss there
    assert weights.tolist() == [[1, 1, 1, 1, 1], [1, 0, 1, 1, 0]]


def test_short_text_encoding_equals_full_context():
    torch.manual_seed(0)
    model = new_demo_clip().eval()
    encoder = Encoder(model, "cpu")
    strings = ["red circle", "a small red circle and a large blue square."]
    with torch.no_grad():
        full = model.encode_text(encoder.tokenizer(strings), normalize=True)
        short = encoder.texts(strings)
    assert torch.allclose(full, short, atol=1e-5)


def test_checkpoint_loads_through_open_clip(tmp_path):
    import open_clip

    torch.manual_seed(0)
    model = new_demo_clip().eval()
    path = tmp_path / "clip.pt"
    save_demo_clip(model, path, half=True)
    assert (tmp_path / "capscope-demo-clip.json").is_file()
    loaded = load_demo_clip(path)
    open_clip.add_model_config(tmp_path / "capscope-demo-clip.json")
    plain = open_clip.create_model("capscope-demo-clip", pretrained=str(path)).eval()
    image = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        a, b, c = (m.encode_image(image) for m in (model, loaded, plain))
    assert torch.allclose(a, b, atol=2e-2) and torch.equal(b, c)


def test_packaged_config_matches_code():
    import json

    from capscope.demo.clip_model import DEMO_CLIP_CONFIG, PACKAGED_CONFIG

    assert json.loads(PACKAGED_CONFIG.read_text()) == DEMO_CLIP_CONFIG


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_a_few_steps_lower_the_loss():
    torch.manual_seed(0)
    model = new_demo_clip().train()
    encoder = Encoder(model, "cpu")
    config = ClipTrainConfig(out=None, lr=2e-3)
    optimizer = make_optimizer(model, config)
    views, texts = make_batch(np.random.default_rng(0), 6)
    losses = []
    for _ in range(6):
        loss = batch_loss(encoder, views, texts)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.slow
def test_train_saves_and_resumes(tmp_path):
    out = tmp_path / "clip.pt"
    config = ClipTrainConfig(out=out, minutes=None, steps=2, batch_scenes=2, probe_scenes=4, progress=False)
    first = train_clip(config)
    assert first.step == 2 and out.is_file() and first.probes
    config.steps, config.resume = 3, True
    resumed = train_clip(config)
    assert resumed.step == 3 and resumed.elapsed > first.elapsed
    load_demo_clip(out)
