"""One place where pretrained components are found and loaded.

Every loader either returns a working model or raises `ModelUnavailable` with
one line naming the component, what it looked for and the flag or environment
variable that points to a local copy. Nothing here touches the network unless
the user asked for a download (an open_clip pretrained tag that is not cached).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

log = logging.getLogger(__name__)


class ModelUnavailable(RuntimeError):
    """A pretrained component cannot be had; the message is one actionable line."""


def cache_dir() -> Path:
    root = os.environ.get("CAPSCOPE_CACHE") or Path.home() / ".cache" / "capscope"
    return Path(root)


def resolve_device(device: str = "auto") -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelUnavailable("device: --device cuda was asked for but no CUDA GPU is visible; use --device cpu")
    return torch.device(device)


def load_state_file(path: str | Path, component: str, flag: str) -> dict:
    """A checkpoint file as a flat state dict on the CPU. Accepts a bare state
    dict or one nested under `state_dict` / `model` (PAC-S, training
    checkpoints); strips a DataParallel `module.` prefix."""
    path = Path(path)
    if not path.is_file():
        raise ModelUnavailable(f"{component}: checkpoint file {path} not found (set {flag})")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a truncated or foreign file
        raise ModelUnavailable(f"{component}: cannot read {path} as a torch checkpoint ({type(err).__name__}: {err})") from None
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    for key in ("state_dict", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not obj:
        raise ModelUnavailable(f"{component}: {path} holds no state dict")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return obj


def strip_prefix(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def create_open_clip(model_name: str, pretrained: str | None, device: torch.device, component: str = "CLIP"):
    """An open_clip model from a pretrained tag (downloaded to open_clip's cache
    when online) or a local file (open_clip, OpenAI or PAC-S layout)."""
    import open_clip

    if model_name not in open_clip.list_models():
        raise ModelUnavailable(f"{component}: unknown open_clip model {model_name!r} (see open_clip.list_models())")
    if pretrained and (os.sep in pretrained or Path(pretrained).suffix in {".pt", ".pth", ".bin", ".safetensors"}):
        state = load_state_file(pretrained, component, "--clip-pretrained")
        model = open_clip.create_model(model_name, pretrained=None, device="cpu")
        load_clip_state(model, state, pretrained)
    else:
        model = _from_tag(open_clip, model_name, pretrained, component)
    return model.to(device).eval()


def _from_tag(open_clip, model_name: str, tag: str | None, component: str):
    if not tag:
        return open_clip.create_model(model_name, pretrained=None, device="cpu")
    if tag not in open_clip.list_pretrained_tags_by_model(model_name):
        raise ModelUnavailable(f"{component}: {model_name} has no pretrained tag {tag!r} and no file of that name exists")
    try:
        return open_clip.create_model(model_name, pretrained=tag, device="cpu")
    except Exception as err:
        where = os.environ.get("HF_HOME") or "open_clip's cache"
        raise ModelUnavailable(
            f"{component}: cannot load {model_name}/{tag} (not in {where} and the download failed: "
            f"{type(err).__name__}); pass a local checkpoint with --clip-pretrained FILE"
        ) from None


def load_clip_state(model: torch.nn.Module, state: dict, source: str) -> None:
    """Load a CLIP state dict strictly (ignoring only open_clip's non-persistent
    buffers), casting fp16 tensors to the model's dtype."""
    state = {k: v for k, v in state.items() if k != "attn_mask"}
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ModelUnavailable(
            f"CLIP: {source} does not fit this architecture "
            f"({len(missing)} missing keys e.g. {missing[:2]}, {len(unexpected)} unexpected e.g. {unexpected[:2]})"
        )
    bad = [k for k in own if own[k].shape != state[k].shape]
    if bad:
        raise ModelUnavailable(f"CLIP: {source} has other shapes than this architecture, e.g. {bad[0]}")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()}, strict=True)


def load_spacy_pipeline(name: str = "en_core_web_sm"):
    from .text import load_spacy

    return load_spacy(name)


def env_or_cache(variable: str, relative: str) -> Path:
    """A component's file: the environment variable when set, else capscope's cache."""
    value = os.environ.get(variable)
    return Path(value) if value else cache_dir() / relative
