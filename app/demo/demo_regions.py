"""The fixed regions of a demo scene (docs/formats.md §9): every shape's box
plus background distractors, and each region's label against a caption
("mentioned", "unmentioned", or none where a polluted caption makes it unclear)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capscope.demo.demo_captions import Caption
from capscope.demo.scenes import IMAGE_SIDE, Scene

MAX_SCENE_REGIONS = 20


@dataclass(frozen=True)
class DemoRegion:
    box: tuple[int, int, int, int]
    shape: int | None   # index into scene.shapes, None for a background distractor


def scene_regions(scene: Scene, rng: np.random.Generator) -> list[DemoRegion]:
    """Every shape plus background distractors (at most MAX_SCENE_REGIONS), in a
    shuffled order so that position says nothing about the labels."""
    regions = [DemoRegion(s.box, i) for i, s in enumerate(scene.shapes)]
    n_distractors = min(int(rng.integers(2, 7)), MAX_SCENE_REGIONS - len(regions))
    for _ in range(n_distractors):
        box = distractor_box(rng, scene)
        if box is not None:
            regions.append(DemoRegion(box, None))
    order = rng.permutation(len(regions))
    return [regions[i] for i in order]


def distractor_box(rng, scene: Scene, attempts: int = 60):
    """A box of mostly background: it covers at most a tenth of any shape's box."""
    for _ in range(attempts):
        w, h = (int(v) for v in rng.integers(20, 101, size=2))
        x0 = int(rng.integers(0, IMAGE_SIDE - w + 1))
        y0 = int(rng.integers(0, IMAGE_SIDE - h + 1))
        box = (x0, y0, x0 + w, y0 + h)
        if all(_overlap(box, s.box) <= 0.1 * _area(s.box) for s in scene.shapes):
            return box
    return None


def _area(box) -> int:
    return (box[2] - box[0]) * (box[3] - box[1])


def _overlap(a, b) -> int:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(w, 0) * max(h, 0)


def region_label(region: DemoRegion, caption: Caption, scene: Scene) -> str | None:
    """"mentioned" / "unmentioned", or None where a polluted caption makes it
    unclear: the shape the wrong phrase was written about, and any shape the
    wrong phrase might now be read as naming."""
    if region.shape is None:
        return "unmentioned"
    if caption.wrong_word is not None:
        wrong_phrase_index = caption.words[caption.wrong_word].phrase
        if caption.referents[wrong_phrase_index] == region.shape:
            return None
        word = caption.words[caption.wrong_word]
        shape = scene.shapes[region.shape]
        if region.shape not in caption.referents and getattr(shape, word.role) == word.text:
            return None
    return "mentioned" if region.shape in caption.referents else "unmentioned"
