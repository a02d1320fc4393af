"""The pictures the scored-row fixtures were made from, frozen with them.

`capscope bench` drew these scenes itself until it took the demo world's
(`capscope.demo.scenes`); tests/fixtures/fp32_demo_rows.json and
short_caption_rows.json hold the rows scored on these exact pixels, so the
tests that compare against them draw them here, unchanged: 1-4 circles,
squares or triangles of 28-96 px in six exact colours on a light noisy
background, captioned "a {size} {colour} {shape}" joined by "and"."""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 70, 220),
           "yellow": (235, 200, 20), "purple": (140, 50, 190), "orange": (245, 130, 20)}
SHAPES = ("circle", "square", "triangle")


def scene(rng: np.random.Generator, side: int = 224) -> tuple[Image.Image, list[list[float]], str]:
    """A light noisy background with 1-4 non-overlapping shapes; their boxes and a caption."""
    base = rng.integers(200, 256, size=3)
    pixels = np.clip(base + rng.normal(0, 8, size=(side, side, 3)), 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    draw = ImageDraw.Draw(image)
    boxes, words = [], []
    for _ in range(int(rng.integers(1, 5))):
        box = _free_box(rng, side, boxes)
        if box is None:
            break
        colour, shape = str(rng.choice(list(COLOURS))), str(rng.choice(SHAPES))
        _draw(draw, shape, box, COLOURS[colour])
        boxes.append(box)
        size = "large" if box[2] - box[0] > 56 else "small"
        words.append(f"a {size} {colour} {shape}")
    return image, boxes, " and ".join(words) + "."


def _free_box(rng, side: int, taken: list, attempts: int = 50):
    for _ in range(attempts):
        size = int(rng.integers(28, 97))
        x0, y0 = int(rng.integers(0, side - size)), int(rng.integers(0, side - size))
        box = [x0, y0, x0 + size, y0 + size]
        if all(box[2] <= t[0] or t[2] <= box[0] or box[3] <= t[1] or t[3] <= box[1] for t in taken):
            return box
    return None


def _draw(draw, shape: str, box, colour) -> None:
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        x0, y0, x1, y1 = box
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=colour)


def make_pairs(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        image, boxes, caption = scene(rng)
        pairs.append({"id": str(i), "image": image, "caption": caption, "regions": [{"box": b} for b in boxes]})
    return pairs


def make_shared_pairs(n: int, captions_per_image: int = 5, seed: int = 1) -> list[dict]:
    """Pairs in which each image carries several captions (as in COCO-style
    files or when several captioners are compared): the scene's caption and
    variants with one colour changed."""
    rng = np.random.default_rng(seed)
    pairs = []
    while len(pairs) < n:
        image, boxes, caption = scene(rng)
        for k in range(captions_per_image):
            pairs.append({"id": str(len(pairs)), "image": image, "regions": [{"box": b} for b in boxes],
                          "caption": caption if k == 0 else recolour(caption, rng)})
    return pairs[:n]


def recolour(caption: str, rng: np.random.Generator) -> str:
    words = caption.split()
    spots = [i for i, w in enumerate(words) if w in COLOURS]
    i = int(rng.choice(spots))
    words[i] = str(rng.choice([c for c in COLOURS if c != words[i]]))
    return " ".join(words)
