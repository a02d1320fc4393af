"""The demo world's shapes as click targets, and the NoC protocol's clicks: the first click at a
shape's innermost pixel, each next one at the innermost pixel of the larger error (positive where
the shape was missed, negative where the mask spilled over). The click study
(app/studies/click_noc.py) and `capscope bench`'s prompt figures both click by it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy import ndimage

from capscope.demo.dataset import demo_scene, gold_item


def write_scenes(out: Path, n: int, seed: int) -> tuple[Path, dict]:
    """A CapTokenEval file of `n` clean demo captions whose named shapes have no
    region, and {item id: [(shape mask, noun token index), ...]}."""
    from PIL import Image

    (out / "images").mkdir(parents=True, exist_ok=True)
    targets = {}
    path = out / "left_out.jsonl"
    with open(path, "w") as handle:
        for index in range(n):
            scene, clean, _, regions = demo_scene(seed, index)
            pixels, masks = scene.render()
            image = f"images/scene{index:05d}.png"
            Image.fromarray(pixels).save(out / image)
            named = set(clean.referents)
            kept = [r for r in regions if r.shape not in named]
            item = gold_item(f"scene{index:05d}", image, scene, clean, kept, masks)
            handle.write(json.dumps(item) + "\n")
            targets[item["id"]] = [(masks[s], noun_token(item["tokens"], clean, p)) for p, s in
                                   enumerate(clean.referents)]
    return path, targets


def noun_token(tokens: list[dict], caption, phrase: int) -> int:
    """The index of the last word of phrase `phrase` (its shape noun) among the item's tokens."""
    words = [i for i, w in enumerate(caption.words) if w.phrase == phrase]
    start, end = caption.spans()[words[-1]]
    return next(i for i, t in enumerate(tokens) if t["start"] == start and t["end"] == end)


def innermost(mask: np.ndarray) -> tuple[int, int]:
    distance = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
    y, x = np.unravel_index(int(np.argmax(distance)), mask.shape)
    return int(x), int(y), float(distance[y, x])


def next_click(target: np.ndarray, predicted: np.ndarray) -> tuple[float, float, int]:
    """The NoC protocol's next click: the innermost pixel of the larger error."""
    missed_x, missed_y, missed_depth = innermost(target & ~predicted)
    spilled_x, spilled_y, spilled_depth = innermost(predicted & ~target)
    if missed_depth >= spilled_depth:
        return missed_x + 0.5, missed_y + 0.5, 1
    return spilled_x + 0.5, spilled_y + 0.5, 0
