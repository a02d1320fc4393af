"""capscope's tiny demo CLIP: an ordinary open_clip model with a config of
its own, saved as a plain open_clip state dict with the config JSON beside it.

Anywhere else it loads with open_clip alone:
    open_clip.add_model_config("<folder of the checkpoint>/capscope-demo-clip.json")
    open_clip.create_model("capscope-demo-clip", pretrained="<checkpoint>.pt")
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

DEMO_CLIP_MODEL = "capscope-demo-clip"
PACKAGED_CONFIG = Path(__file__).with_name(f"{DEMO_CLIP_MODEL}.json")

# ViT: 4 layers, width 128, patch 8 at 64 px; text: 3 layers, width 128 (BRIEF, "Demo world").
# Sigmoid loss, so the model carries a logit bias like open_clip's SigLIP configs.
DEMO_CLIP_CONFIG = {
    "embed_dim": 128,
    "init_logit_scale": math.log(10.0),
    "init_logit_bias": -5.0,
    "vision_cfg": {"image_size": 64, "layers": 4, "width": 128, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 128, "heads": 4, "layers": 3},
}


def config_path_beside(checkpoint: Path) -> Path:
    return Path(checkpoint).with_name(f"{DEMO_CLIP_MODEL}.json")


def register_demo_clip_config(config_file: Path | None = None) -> str:
    """Make `capscope-demo-clip` known to open_clip; returns the model name."""
    import open_clip

    config_file = Path(config_file or PACKAGED_CONFIG)
    if config_file.name != f"{DEMO_CLIP_MODEL}.json":
        raise ValueError(f"open_clip names a config after its file: expected {DEMO_CLIP_MODEL}.json, got {config_file.name}")
    open_clip.add_model_config(config_file)
    return DEMO_CLIP_MODEL


def new_demo_clip():
    import open_clip

    register_demo_clip_config()
    return open_clip.create_model(DEMO_CLIP_MODEL, pretrained=None)


def save_demo_clip(model, path: Path, half: bool = False) -> None:
    """The open_clip state dict (fp16 when `half`) and the config beside it, each written atomically."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if half and v.is_floating_point() else v).detach().cpu()
             for k, v in model.state_dict().items()}
    write_atomically(path, lambda tmp: torch.save(state, tmp))
    config = config_path_beside(path)
    write_atomically(config, lambda tmp: tmp.write_text(json.dumps(DEMO_CLIP_CONFIG, indent=2) + "\n"))


def write_atomically(path: Path, write) -> None:
    """`write(tmp)` to a file beside `path`, then moved over it: a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def load_demo_clip(path, device: str = "cpu"):
    """The trained demo CLIP in eval mode, through open_clip's own loader."""
    import open_clip

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"demo CLIP checkpoint not found: {path}")
    beside = config_path_beside(path)
    register_demo_clip_config(beside if beside.is_file() else None)
    model = open_clip.create_model(DEMO_CLIP_MODEL, pretrained=str(path), device=device)
    return model.eval()


def demo_clip_tokenizer():
    import open_clip

    register_demo_clip_config()
    return open_clip.get_tokenizer(DEMO_CLIP_MODEL)
