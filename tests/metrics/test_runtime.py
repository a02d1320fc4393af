"""The CLIP text tower on ONNX Runtime (metrics/runtime.py) against PyTorch eager,
on capscope's small demo architecture with random weights."""
from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from capscope.metrics import runtime as runtime_module
from capscope.metrics.encoder import ClipBackbone
from capscope.metrics.model_sources import create_clip_from_config
from capscope.metrics.runtime import resolve_runtime
from capscope.metrics.scorer import Scorer
from ui_support import DEMO_CLIP_CONFIG

pytest.importorskip("onnxruntime")

DEMO_CONFIG = json.loads(DEMO_CLIP_CONFIG.read_text(encoding="utf-8"))
TEXTS = ["a red square.", "two small blue circles next to a large green triangle on the left of the picture.",
         "dog", " ".join(["word"] * 60)]


def backbones(seed: int, tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path))
    torch.manual_seed(seed)
    model = create_clip_from_config("capscope-test-clip", DEMO_CONFIG)
    cpu = torch.device("cpu")
    eager = ClipBackbone.from_model(model, "ViT-B-32", "test", cpu)
    onnx = ClipBackbone.from_model(model, "ViT-B-32", "test", cpu, runtime="onnx")
    return eager, onnx


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_onnx_features_are_eagers_within_float32_and_each_model_keeps_its_own_weights(tmp_path, monkeypatch):
    eager, onnx = backbones(0, tmp_path, monkeypatch)
    assert (eager.runtime, onnx.runtime) == ("eager", "onnx")
    first = onnx.encode_texts(TEXTS)
    assert onnx.first_use_costs["export_s"] is not None  # exported at its first pass
    assert torch.allclose(first, eager.encode_texts(TEXTS), atol=1e-5)
    assert torch.allclose(onnx.encode_pieces([320, 1929, 49407]), eager.encode_pieces([320, 1929, 49407]), atol=1e-5)
    # a second model of the same architecture: the graph comes from the cache, the weights are its own
    other_eager, other_onnx = backbones(1, tmp_path, monkeypatch)
    second = other_onnx.encode_texts(TEXTS)
    assert other_onnx.first_use_costs["export_s"] is None
    assert torch.allclose(second, other_eager.encode_texts(TEXTS), atol=1e-5)
    assert not torch.allclose(second, first, atol=1e-2)


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_onnx_features_depend_neither_on_the_batch_nor_on_the_thread_count(tmp_path, monkeypatch):
    _, onnx = backbones(0, tmp_path, monkeypatch)
    together = onnx.encode_texts(TEXTS)
    onnx.forget_texts()
    alone = torch.cat([onnx.encode_texts([text]) for text in TEXTS])
    assert torch.equal(together, alone)
    threads = torch.get_num_threads()
    onnx.forget_texts()
    apart = []
    encode_apart = onnx._encode_apart
    monkeypatch.setattr(onnx, "_encode_apart", lambda ids: apart.append(ids.shape) or encode_apart(ids))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    torch.set_num_threads(1)
    try:  # one intra-op thread, as a lone re-score holds: once its session is built, a few passes run two at a time
        onnx.encode_texts(["a first pass builds the one-thread session"])
        assert apart == []
        onnx.forget_texts()
        one_thread = onnx.encode_texts(TEXTS)
    finally:
        torch.set_num_threads(threads)
    assert len(apart) > 1
    assert torch.equal(one_thread, together)


def test_auto_means_onnx_on_the_cpu_in_fp32_and_eager_elsewhere(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert resolve_runtime("auto", cpu, "fp32") == "onnx"
    assert resolve_runtime("auto", cpu, "bf16") == "eager"
    assert resolve_runtime("auto", gpu, "fp32") == "eager"
    assert resolve_runtime("eager", cpu, "fp32") == "eager"
    with pytest.raises(ValueError, match="CPU in fp32 only"):
        resolve_runtime("onnx", cpu, "bf16")
    with pytest.raises(ValueError, match="unknown runtime"):
        resolve_runtime("tensorrt", cpu, "fp32")
    monkeypatch.setattr(runtime_module, "onnxruntime_version", lambda: None)
    assert resolve_runtime("auto", cpu, "fp32") == "eager"  # not installed: eager, and rows say so
    with pytest.raises(runtime_module.ModelUnavailable, match="pip install onnxruntime"):
        resolve_runtime("onnx", cpu, "fp32")


def test_rows_say_which_runtime_ran_and_both_give_the_same_verdicts():
    image = Image.new("RGB", (64, 64), (200, 30, 30))
    rows = {}
    for runtime in ("eager", "onnx"):
        scorer = Scorer(["clip-s", "infometic", "hice"], device="cpu", demo=True, runtime=runtime)
        rows[runtime] = scorer.score(image, "a red square on a white ground.")
    assert rows["eager"]["model"]["runtime"] == "eager"
    assert rows["onnx"]["model"]["runtime"].startswith("onnxruntime ")
    for name, eager in rows["eager"]["metrics"].items():
        onnx = rows["onnx"]["metrics"][name]
        for key, value in eager["scores"].items():
            assert onnx["scores"][key] == pytest.approx(value, abs=1e-4), (name, key)
        assert onnx.get("token_correct") == eager.get("token_correct"), name

