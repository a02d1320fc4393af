"""One place where pretrained components are found and loaded.

Every loader either returns a working model or raises `ModelUnavailable` with
one line naming the component, what it looked for and the flag or environment
variable that points to a local copy. Nothing here touches the network unless
the user asked for a download (an open_clip pretrained tag that is not cached).
"""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch

from capscope.common.errors import ModelUnavailable, with_type

log = logging.getLogger(__name__)


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
    obj = read_checkpoint(path, component, flag)
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


TRUST_VARIABLE = "CAPSCOPE_TRUST_CHECKPOINTS"


def read_checkpoint(path: str | Path, component: str, flag: str | None = None, *, weights_only: bool | None = None):
    """What a torch checkpoint file holds, loaded on the CPU once its recorded
    sha256 (if any) is checked. ModelUnavailable, naming the component (and the
    flag that points elsewhere), when the file is missing, changed or unreadable.

    Only tensors, numbers, strings and plain containers are read (torch's
    `weights_only`): a full pickle runs whatever code the file names, so a
    checkpoint from elsewhere must not get one. `weights_only=False` is for a
    file this process itself wrote; CAPSCOPE_TRUST_CHECKPOINTS=1 allows it for
    every file (docs/scoring.md)."""
    path = Path(path)
    if not path.is_file():
        raise ModelUnavailable(f"{component}: checkpoint file {path} not found" + (f" (set {flag})" if flag else ""))
    verify_checkpoint(path, component)
    if weights_only is None:
        weights_only = not trust_checkpoints()
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as err:  # a truncated or foreign file, or one holding Python objects
        if weights_only and _needs_full_pickle(err):
            raise ModelUnavailable(
                f"{component}: {path} holds Python objects beyond tensors, which capscope does not unpickle from a "
                f"file it did not write; if you trust the file, set {TRUST_VARIABLE}=1") from None
        raise ModelUnavailable(f"{component}: cannot read {path} as a torch checkpoint ({_why(err)})") from None


def trust_checkpoints() -> bool:
    """CAPSCOPE_TRUST_CHECKPOINTS=1: the user vouches for every checkpoint file (full pickle)."""
    return os.environ.get(TRUST_VARIABLE, "") == "1"


def _why(err: Exception) -> str:
    """The first line of torch's reason (its weights-only message would advise a full pickle: left out)."""
    text = str(err)
    if "weights only load failed" in text.lower():
        return f"{type(err).__name__}: not a pickle of tensors"
    return with_type(err)


def _needs_full_pickle(err: Exception) -> bool:
    """Whether torch refused the file only because weights_only forbids what it holds."""
    import pickle

    text = str(err).lower()
    # torch's weights-only unpickler says "unsupported operand" for bytes that are no pickle at all (junk)
    return isinstance(err, pickle.UnpicklingError) and "weights only load failed" in text \
        and "unsupported operand" not in text


def verify_checkpoint(path: str | Path, component: str) -> None:
    """A downloaded file against the sha256 recorded at its download (docs: `capscope models download`)."""
    from capscope.common import checksums

    try:
        checksums.verify(path)
    except checksums.ChecksumMismatch as err:
        raise ModelUnavailable(f"{component}: {err}") from None


# the CLIPs the CLIP4DM paper used (any open_clip model works; these reproduce its tables)
CLIP4DM_BACKBONES = (("ViT-B-32", "openai"), ("ViT-L-14", "openai"), ("ViT-H-14", "laion2b_s32b_b79k"))


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
        model = empty_open_clip(model_name)
        load_clip_state(model, state, pretrained)
    else:
        model = _from_tag(open_clip, model_name, pretrained, component)
    return model.to(device).eval()


def empty_open_clip(model_name: str):
    """An open_clip architecture to load weights into (without open_clip's
    "initialized randomly" warning, which would be false a moment later)."""
    import open_clip

    with _quiet("root"):
        return open_clip.create_model(model_name, pretrained=None, device="cpu")


def _from_tag(open_clip, model_name: str, tag: str | None, component: str):
    if not tag:
        return open_clip.create_model(model_name, pretrained=None, device="cpu")
    if tag not in open_clip.list_pretrained_tags_by_model(model_name):
        raise ModelUnavailable(f"{component}: {model_name} has no pretrained tag {tag!r} and no file of that name exists")
    if not clip_tag_cached(model_name, tag) and not hub_reachable():
        raise ModelUnavailable(
            f"{component}: {model_name}/{tag} is not in the Hugging Face cache and the hub cannot be reached; "
            f"run `capscope models download {_download_name(component)}` where there is a network, or pass a local "
            "checkpoint with --clip-pretrained FILE"
        )
    try:
        with _quiet("root", "huggingface_hub"):
            return open_clip.create_model(model_name, pretrained=tag, device="cpu", require_pretrained=True)
    except Exception as err:
        raise ModelUnavailable(
            f"{component}: cannot load {model_name}/{tag} ({type(err).__name__}); "
            f"run `capscope models download {_download_name(component)}`, or pass a local checkpoint with "
            "--clip-pretrained FILE"
        ) from None


def _download_name(component: str) -> str:
    """The `capscope models download` name that fetches a component's CLIP."""
    return "clip4dm" if component == "CLIP4DM" else "clip"


def hub_reachable(timeout: float = 2.0) -> bool:
    """False at once when offline (HF_HUB_OFFLINE) or when the hub does not answer,
    so that a missing download fails in seconds rather than after minutes of retries."""
    import socket

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _quiet(*names: str):
    loggers = [logging.getLogger(n if n != "root" else None) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


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


# ---------------------------------------------------------------- inventory

def clip_tag_cached(model_name: str, tag: str) -> bool:
    """Whether open_clip would find `model_name/tag` without the network."""
    import open_clip

    try:
        cfg = open_clip.get_pretrained_cfg(model_name, tag)
    except Exception:
        return False
    hub = cfg.get("hf_hub", "").rstrip("/")
    if not hub:
        return False
    try:
        from huggingface_hub import try_to_load_from_cache

        for filename in ("open_clip_model.safetensors", "open_clip_pytorch_model.bin"):
            if isinstance(try_to_load_from_cache(hub, filename), str):
                return True
    except Exception:
        return False
    return False


def spacy_pipeline_present(name: str = "en_core_web_sm") -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def demo_model_path() -> Path:
    """The bundled demo model (capscope's own tiny CLIP + InfoMetIC head);
    CAPSCOPE_DEMO_MODEL points elsewhere."""
    value = os.environ.get("CAPSCOPE_DEMO_MODEL")
    return Path(value) if value else Path(__file__).parent / "demo_model" / "demo_infometic.pt"
