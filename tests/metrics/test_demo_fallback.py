"""Without pretrained weights the scorer falls back to the demo model, and says so."""
import pytest
import torch
from PIL import Image

from capscope.metrics.infometic import HeadConfig, InfoMetIC, capscope_checkpoint
from capscope.metrics.loading import ModelUnavailable
from capscope.metrics.model_sources import create_clip_from_config
from capscope.metrics.scorer import Scorer

TINY_CLIP = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 1},
}


@pytest.fixture()
def demo_file(tmp_path, monkeypatch):
    torch.manual_seed(0)
    clip = create_clip_from_config("tiny-test-clip", TINY_CLIP)
    model = InfoMetIC(clip, HeadConfig(width=64, heads=2, intra_layers=1, inter_layers=1, text_positions=True))
    path = tmp_path / "demo.pt"
    checkpoint = capscope_checkpoint(model, "tiny-test-clip", TINY_CLIP, crop={"margin": 0.15, "canvas": 32})
    checkpoint["state_dict"] = {k: v.half() for k, v in checkpoint["state_dict"].items()}  # shipped in fp16
    torch.save(checkpoint, path)
    monkeypatch.setenv("CAPSCOPE_DEMO_MODEL", str(path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path / "cache"))
    return path


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_falls_back_to_demo_and_labels_rows(demo_file, caplog):
    scorer = Scorer(["infometic", "clip-s", "infoclip"], device="cpu")
    assert scorer.demo and "FALLBACK" in caplog.text
    backbone = scorer.metrics["infometic"].backbone
    assert scorer.metrics["clip-s"].backbone is backbone
    assert backbone.crop.margin == 0.15 and backbone.crop.canvas == 32
    row = scorer.score(Image.new("RGB", (64, 48), (220, 220, 220)), "a red circle", regions=[{"box": [4, 4, 20, 20]}])
    assert row["model"]["demo"] is True and "demo" in row["model"]["clip"]
    assert len(row["metrics"]["infometic"]["region_scores"]) == 1


def test_explicit_model_never_falls_back(demo_file):
    with pytest.raises(ModelUnavailable, match="ViT-B-32/openai"):
        Scorer(["clip-s"], device="cpu", clip_pretrained="openai")


def test_no_demo_when_disabled(demo_file, monkeypatch):
    monkeypatch.setenv("CAPSCOPE_NO_DEMO", "1")
    with pytest.raises(ModelUnavailable, match="--infometic-checkpoint"):
        Scorer(["infometic"], device="cpu")
