"""A state dict in the released InfoMetIC layout and dtypes, regenerated from a
seed (one numpy RandomState per key, so the order of keys does not matter):
430 keys, OpenAI CLIP ViT-B/32 names under `clip_backbone.`, backbone
linear/conv/attention weights in fp16, the rest fp32. Used by the reference
test and by the script that ran the official code on the same weights."""
from __future__ import annotations

import zlib

import numpy as np
import torch

WIDTH = 512
FP16_SUFFIXES = (
    "conv1.weight", "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias",
    "c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias",
)


def backbone_shapes() -> dict[str, tuple[int, ...]]:
    """OpenAI CLIP ViT-B/32 parameter shapes (open_clip's ViT-B-32-quickgelu has the same names)."""
    vision, text, embed = 768, 512, 512
    shapes = {
        "positional_embedding": (77, text), "text_projection": (text, embed), "logit_scale": (),
        "token_embedding.weight": (49408, text), "ln_final.weight": (text,), "ln_final.bias": (text,),
        "visual.class_embedding": (vision,), "visual.positional_embedding": (50, vision),
        "visual.proj": (vision, embed), "visual.conv1.weight": (vision, 3, 32, 32),
        "visual.ln_pre.weight": (vision,), "visual.ln_pre.bias": (vision,),
        "visual.ln_post.weight": (vision,), "visual.ln_post.bias": (vision,),
    }
    for prefix, width in (("transformer", text), ("visual.transformer", vision)):
        for i in range(12):
            shapes.update(_block_shapes(f"{prefix}.resblocks.{i}", width))
    return shapes


def _block_shapes(prefix: str, width: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.ln_1.weight": (width,), f"{prefix}.ln_1.bias": (width,),
        f"{prefix}.attn.in_proj_weight": (3 * width, width), f"{prefix}.attn.in_proj_bias": (3 * width,),
        f"{prefix}.attn.out_proj.weight": (width, width), f"{prefix}.attn.out_proj.bias": (width,),
        f"{prefix}.ln_2.weight": (width,), f"{prefix}.ln_2.bias": (width,),
        f"{prefix}.mlp.c_fc.weight": (4 * width, width), f"{prefix}.mlp.c_fc.bias": (4 * width,),
        f"{prefix}.mlp.c_proj.weight": (width, 4 * width), f"{prefix}.mlp.c_proj.bias": (width,),
    }


def head_shapes() -> dict[str, tuple[int, ...]]:
    shapes = {"bbox_position_embedding": (4, WIDTH), "logit_scale": (), "ln.weight": (WIDTH,), "ln.bias": (WIDTH,)}
    for name in ("img_att_query", "img_att_key", "text_att_query", "text_att_key"):
        shapes[name] = (WIDTH, WIDTH)
    for encoder, layers in (("image_encoder", 4), ("text_encoder", 4), ("fusion_encoder", 2)):
        for i in range(layers):
            shapes.update(_block_shapes(f"{encoder}.resblocks.{i}", WIDTH))
    return shapes


def _value(key: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.RandomState((seed * 1_000_003 + zlib.crc32(key.encode())) % 2**32)
    leaf = key.rsplit(".", 1)[-1]
    if key.endswith("logit_scale"):
        return np.array(np.log(100.0) if key.startswith("clip_backbone") else np.log(1 / 0.07) + 0.3 * rng.randn(), dtype=np.float32)
    if ".ln" in key or key.startswith("ln") or "ln_" in key:
        base = 1.0 if leaf == "weight" else 0.0
        return (base + 0.05 * rng.randn(*shape)).astype(np.float32)
    if leaf.endswith("bias"):
        return (0.02 * rng.randn(*shape)).astype(np.float32)
    if "embedding" in key and "bbox" not in key:
        return (0.02 * rng.randn(*shape)).astype(np.float32)
    if key == "bbox_position_embedding":
        return (0.5 * rng.randn(*shape)).astype(np.float32)
    fan_in = shape[-1] if len(shape) == 2 else int(np.prod(shape[1:])) if len(shape) > 2 else shape[0]
    return (rng.randn(*shape) / np.sqrt(fan_in)).astype(np.float32)


def released_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    state = {}
    for key, shape in backbone_shapes().items():
        full = "clip_backbone." + key
        tensor = torch.from_numpy(_value(full, shape, seed))
        if key.endswith(FP16_SUFFIXES) or key in ("text_projection", "visual.proj"):
            tensor = tensor.half()
        state[full] = tensor
    for key, shape in head_shapes().items():
        state[key] = torch.from_numpy(_value(key, shape, seed))
    return state
