"""The pairs `capscope bench` times: scenes of the demo world (demo.scenes:
1-4 coloured shapes on a light noisy background, 224 px), each with a true
caption of the demo world's; the shapes' boxes are the given regions."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from capscope.demo.demo_captions import Caption, make_caption, pollute
from capscope.demo.scenes import IMAGE_SIDE, Scene, make_scene

OPENINGS = ("", "there is ", "this shows ", "an image of ", "next to it, ")
# where a long caption's sentence puts its shape: with the openings, no sentence of 200 words comes twice
# (a detailed captioner does not repeat itself, and a repeated sentence would be a text already encoded)
PLACES = ("near the top", "near the bottom", "on the left", "on the right", "in the middle", "by the edge",
          "in a corner", "below the others", "above the others", "beside the rest")


def scene(rng: np.random.Generator, side: int = IMAGE_SIDE) -> tuple[Image.Image, list[list[int]], str]:
    """A demo-world scene drawn at `side` px: (image, its shapes' boxes, a true caption)."""
    drawn, caption = _drawn(rng)
    return _at_side(drawn.image(), side), _boxes(drawn, side), caption.text


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
    variants with one word made wrong (the demo world's pollution)."""
    rng = np.random.default_rng(seed)
    pairs = []
    while len(pairs) < n:
        drawn, caption = _drawn(rng)
        image, regions = drawn.image(), [{"box": b} for b in _boxes(drawn, IMAGE_SIDE)]
        for k in range(captions_per_image):
            text = caption.text if k == 0 else pollute(caption, drawn, rng).text
            pairs.append({"id": str(len(pairs)), "image": image, "regions": regions, "caption": text})
    return pairs[:n]


def make_long_pairs(n: int, words: int, seed: int = 3) -> list[dict]:
    """Pairs whose captions run to about `words` words: sentences about the
    scene's shapes, each opened differently, as a detailed captioner writes."""
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        drawn, caption = _drawn(rng)
        pairs.append({"id": str(i), "image": drawn.image(), "caption": long_caption(phrases(caption), words),
                      "regions": [{"box": b} for b in _boxes(drawn, IMAGE_SIDE)]})
    return pairs


def phrases(caption: Caption) -> list[str]:
    """What the caption says of each shape, with its article: "a large red circle"."""
    return [" ".join(w.text for w in caption.words if w.phrase == p) for p in range(len(caption.phrases))]


def long_caption(phrases: list[str], words: int) -> str:
    """Sentences of about `words` words in all, each an opening, a shape's phrase and
    a place: distinct up to len(OPENINGS) * len(PLACES) sentences."""
    sentences, count, k = [], 0, 0
    while count < words:
        place = PLACES[(k // len(OPENINGS)) % len(PLACES)]
        sentence = OPENINGS[k % len(OPENINGS)] + phrases[k % len(phrases)] + " " + place + "."
        sentences.append(sentence)
        count += len(sentence.split())
        k += 1
    return " ".join(sentences)


def write_pairs_file(pairs: list[dict], path: Path) -> None:
    """`capscope score` input: each distinct image saved once as PNG beside the file."""
    names: dict[int, str] = {}
    with path.open("w", encoding="utf-8") as out:
        for pair in pairs:
            image = pair["image"]
            if id(image) not in names:
                names[id(image)] = f"image{len(names)}.png"
                image.save(path.parent / names[id(image)])
            out.write(json.dumps({**pair, "image": names[id(image)]}) + "\n")


def _drawn(rng: np.random.Generator) -> tuple[Scene, Caption]:
    drawn = make_scene(rng)
    return drawn, make_caption(drawn, rng)


def _at_side(image: Image.Image, side: int) -> Image.Image:
    # nearest neighbour keeps the shapes' edges as sharp as the demo world draws them
    return image if side == image.width else image.resize((side, side), Image.NEAREST)


def _boxes(drawn: Scene, side: int) -> list[list[int]]:
    scale = side / IMAGE_SIDE
    return [[round(v * scale) for v in shape.box] for shape in drawn.shapes]
