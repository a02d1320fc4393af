"""`capscope train infometic`: every loss falls on a fixed batch, checkpoints
load through the public Scorer, and resume continues where it stopped."""
import numpy as np
import pytest
import torch

from capscope.train.infometic_losses import LOSS_NAMES, step_losses, total_loss
from capscope.train.infometic_setup import InfoTrainConfig, state_path
from capscope.train.infometic_trainer import open_session, pick_images, train_infometic


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """An untrained demo CLIP saved as `capscope train clip` saves one."""
    from capscope.demo.clip_model import new_demo_clip, save_demo_clip

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("clip") / "demo_clip.pt"
    save_demo_clip(new_demo_clip(), path)
    return path


def tiny_config(tmp_path, clip, **kw):
    values = dict(out=tmp_path / "head.pt", clip=clip, demo_scenes=24, batch_size=8, minutes=None, steps=2,
                  threads=1, progress=False, intra_layers=1, inter_layers=1)
    values.update(kw)
    return InfoTrainConfig(**values)


def fixed_batch(session, seed=3):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        images = pick_images(session.bank.buckets(), rng, session.config.batch_size)
        draws = [session.source.draw(i, rng) for i in images]
        if len(images) >= 4 and any(d.htn for d in draws):
            return images, draws
    raise AssertionError("no batch with a hard textual negative")


@pytest.mark.slow
def test_a_few_steps_lower_every_loss(tmp_path, tiny_clip):
    session = open_session(tiny_config(tmp_path, tiny_clip, lr=2e-3))
    images, draws = fixed_batch(session)
    losses = lambda: step_losses(session.model, session.bank, session.texts, session.source, draws, images,
                                 session.config, session.device)
    before = {k: float(v) for k, v in losses().items()}
    optimizer = torch.optim.Adam(session.model.head_parameters(), lr=2e-3)
    for _ in range(25):
        loss = total_loss(losses(), session.config)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = {k: float(v) for k, v in losses().items()}
    assert set(before) == set(LOSS_NAMES)
    for name in LOSS_NAMES:
        assert after[name] < before[name], (name, before[name], after[name])


def test_checkpoint_scores_through_the_scorer(tmp_path, tiny_clip):
    from capscope.demo.dataset import demo_scene
    from capscope.metrics.scorer import Scorer

    config = tiny_config(tmp_path, tiny_clip, half=True)
    train_infometic(config)
    raw = torch.load(config.out, map_location="cpu", weights_only=False)
    assert raw["format"] == "capscope-infometic/1"
    assert raw["crop"] == {"margin": 0.15, "canvas": 128}
    assert raw["head_config"]["verify"] and raw["head_config"]["text_positions"]
    assert all(v.dtype != torch.float32 for v in raw["state_dict"].values() if v.is_floating_point())

    scene, clean, _, regions = demo_scene(9, 0)
    scorer = Scorer(["infometic"], device="cpu", regions="given", infometic_checkpoint=str(config.out))
    row = scorer.score(scene.image(), clean.text, regions=[{"box": r.box} for r in regions])
    out = row["metrics"]["infometic"]
    assert len(out["region_scores"]) == len(regions)
    assert sum(out["region_scores"]) + out["null_score"] == pytest.approx(1.0, abs=1e-4)
    assert scorer.metrics["infometic"].backbone.crop.canvas == 128


def test_resume_continues(tmp_path, tiny_clip):
    config = tiny_config(tmp_path, tiny_clip, steps=2)
    train_infometic(config)
    assert state_path(config.out).is_file()
    state = train_infometic(tiny_config(tmp_path, tiny_clip, steps=3, resume=True))
    assert state.step == 3
    assert len(state.loss_history) == 2


def test_trains_from_a_training_file(tmp_path, tiny_clip):
    from capscope.cli import main

    assert main(["demo-data", "--out", str(tmp_path / "data"), "--n", "6", "--seed", "5"]) == 0
    code = main(["train", "infometic", "--clip", str(tiny_clip), "--data", str(tmp_path / "data" / "train.jsonl"),
                 "--out", str(tmp_path / "file.pt"), "--steps", "2", "--minutes", "0", "--batch-size", "4",
                 "--threads", "1", "--intra-layers", "1", "--inter-layers", "1"])
    assert code == 0
    raw = torch.load(tmp_path / "file.pt", map_location="cpu", weights_only=False)
    assert raw["training"]["steps"] == 2
