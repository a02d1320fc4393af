"""Appearance shifts of the demo world: the same scenes, captions and labels,
drawn in ways the bundled demo model never saw. They stand in for a team's own
domain when measuring how well fine-tuning on their labels works
(`capscope demo-data --shift NAME`, `python -m capscope.studies.label_efficiency`).

Each shift redraws a rendered scene from its shape masks, so regions, boxes and
gold labels are those of the unshifted scene; only pixels change.
- `dark`: a dark background (each channel 15-70) instead of a light one;
- `outline`: shapes drawn as 4-px outlines in their colour, hollow inside;
- `clutter`: grey strokes and specks over the background, and a light
  brightness gradient across the image.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

SHIFTS = ("dark", "outline", "clutter")
OUTLINE_PX = 4


def shifted_pixels(shift: str | None, scene, pixels: np.ndarray, masks: list[np.ndarray], seed: int) -> np.ndarray:
    """The scene's pixels drawn under `shift` (None: unchanged)."""
    if shift is None:
        return pixels
    if shift not in SHIFTS:
        raise ValueError(f"unknown shift {shift!r}; choose one of {', '.join(SHIFTS)}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 31, scene.noise_seed % 2**31]))
    background = _background(shift, scene, pixels, masks, rng)
    out = background.copy()
    for shape, mask in zip(scene.shapes, masks):
        out[_outline(mask) if shift == "outline" else mask] = shape.rgb
    return out


def _background(shift: str, scene, pixels: np.ndarray, masks: list[np.ndarray], rng) -> np.ndarray:
    side = pixels.shape[0]
    noise = rng.normal(0.0, 8.0, pixels.shape)
    if shift == "dark":
        base = rng.integers(15, 71, size=3).astype(np.float64)
        return np.clip(base + noise, 0, 255).astype(np.uint8)
    base = np.array(scene.background, dtype=np.float64)
    if shift == "outline":
        return np.clip(base + noise, 0, 255).astype(np.uint8)
    ramp = np.linspace(-35, 10, side)[:, None, None] if rng.random() < 0.5 else np.linspace(-35, 10, side)[None, :, None]
    canvas = Image.fromarray(np.clip(base + noise + ramp, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(6, 12))):
        grey = int(rng.integers(60, 160))
        x0, y0, x1, y1 = (int(v) for v in rng.integers(0, side, size=4))
        draw.line([(x0, y0), (x1, y1)], fill=(grey, grey, grey), width=int(rng.integers(1, 4)))
    for _ in range(int(rng.integers(20, 40))):
        grey = int(rng.integers(40, 140))
        x, y, r = int(rng.integers(0, side)), int(rng.integers(0, side)), int(rng.integers(1, 4))
        draw.ellipse([x - r, y - r, x + r, y + r], fill=(grey, grey, grey))
    return np.asarray(canvas).copy()


def _outline(mask: np.ndarray) -> np.ndarray:
    """The mask's pixels within OUTLINE_PX of its edge."""
    inner = mask.copy()
    for _ in range(OUTLINE_PX):
        inner = inner & np.roll(inner, 1, 0) & np.roll(inner, -1, 0) & np.roll(inner, 1, 1) & np.roll(inner, -1, 1)
    return mask & ~inner
