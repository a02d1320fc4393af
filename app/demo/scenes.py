"""The demo world (docs/formats.md §9): coloured shapes on a light background,
drawn with their masks, and padded crops of its boxes. Its captions (true and
polluted twins with one wrong word) live in `demo.demo_captions`, its fixed
regions per image in `demo.demo_regions`.

Everything is deterministic for a `numpy.random.Generator`; `scene_rng(seed,
index)` gives the generator of scene `index` of a data set, so scenes can be
made in any order (and training can draw fresh scenes per step reproducibly).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIDE = 224
KINDS = ("circle", "square", "triangle", "star")
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (235, 200, 20),
    "purple": (140, 50, 190),
    "orange": (245, 130, 20),
}
SIZES = {"small": (28, 44), "large": (64, 96)}
ATTRIBUTES = ("size", "colour", "kind")
VALUES = {"size": tuple(SIZES), "colour": tuple(COLOURS), "kind": KINDS}
COLOUR_JITTER = 20
NOISE_SIGMA = 8.0
SHAPE_GAP = 3          # pixels kept free between shape boxes


def scene_rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, index]))


# ---------------------------------------------------------------- scenes

@dataclass(frozen=True)
class Shape:
    kind: str
    colour: str
    size: str
    box: tuple[int, int, int, int]   # x0, y0, x1, y1; x1, y1 exclusive
    rgb: tuple[int, int, int]


@dataclass
class Scene:
    shapes: list[Shape]
    background: tuple[int, int, int]
    noise_seed: int
    _render: tuple | None = field(default=None, repr=False)

    def render(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """(H x W x 3 uint8 image, one H x W bool mask per shape), cached."""
        if self._render is None:
            self._render = _render(self)
        return self._render

    def forget_render(self) -> None:
        """Drop the cached pixels (they are drawn again when asked for)."""
        self._render = None

    def image(self) -> Image.Image:
        return Image.fromarray(self.render()[0])


def make_scene(rng: np.random.Generator) -> Scene:
    n_shapes = int(rng.integers(1, 5))
    while True:
        shapes = _try_layout(rng, n_shapes)
        if shapes is not None:
            break
    background = tuple(int(v) for v in rng.integers(200, 256, size=3))
    return Scene(shapes, background, int(rng.integers(2**31)))


def _try_layout(rng: np.random.Generator, n_shapes: int) -> list[Shape] | None:
    shapes: list[Shape] = []
    used: set[tuple[str, str]] = set()
    for _ in range(n_shapes):
        kind, colour = _unused_pair(rng, used)
        size = str(rng.choice(tuple(SIZES)))
        lo, hi = SIZES[size]
        side = int(rng.integers(lo, hi + 1))
        box = _free_box(rng, side, [s.box for s in shapes])
        if box is None:
            return None
        used.add((kind, colour))
        shapes.append(Shape(kind, colour, size, box, _jittered(rng, COLOURS[colour])))
    return shapes


def _unused_pair(rng, used) -> tuple[str, str]:
    # (colour, kind) pairs are unique in a scene, so every shape has a name
    while True:
        pair = (str(rng.choice(KINDS)), str(rng.choice(tuple(COLOURS))))
        if pair not in used:
            return pair


def _jittered(rng, rgb) -> tuple[int, int, int]:
    noise = rng.integers(-COLOUR_JITTER, COLOUR_JITTER + 1, size=3)
    return tuple(int(v) for v in np.clip(np.array(rgb) + noise, 0, 255))


def _free_box(rng, side: int, taken: list, attempts: int = 100):
    margin = 2
    for _ in range(attempts):
        x0 = int(rng.integers(margin, IMAGE_SIDE - margin - side + 1))
        y0 = int(rng.integers(margin, IMAGE_SIDE - margin - side + 1))
        box = (x0, y0, x0 + side, y0 + side)
        if all(not _boxes_touch(box, other, SHAPE_GAP) for other in taken):
            return box
    return None


def _boxes_touch(a, b, gap: int = 0) -> bool:
    return not (a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1])


def _render(scene: Scene) -> tuple[np.ndarray, list[np.ndarray]]:
    noise = np.random.default_rng(scene.noise_seed).normal(0.0, NOISE_SIGMA, (IMAGE_SIDE, IMAGE_SIDE, 3))
    image = np.clip(np.array(scene.background, dtype=np.float64) + noise, 0, 255).astype(np.uint8)
    masks = []
    for shape in scene.shapes:
        mask = shape_mask(shape.kind, shape.box)
        image[mask] = shape.rgb
        masks.append(mask)
    return image, masks


def shape_mask(kind: str, box, side: int = IMAGE_SIDE) -> np.ndarray:
    canvas = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(canvas)
    x0, y0, x1, y1 = box
    inner = [x0, y0, x1 - 1, y1 - 1]  # PIL boxes are inclusive
    if kind == "square":
        draw.rectangle(inner, fill=255)
    elif kind == "circle":
        draw.ellipse(inner, fill=255)
    elif kind == "triangle":
        draw.polygon([(x0, y1 - 1), (x1 - 1, y1 - 1), ((x0 + x1 - 1) / 2, y0)], fill=255)
    elif kind == "star":
        draw.polygon(_star_points(inner), fill=255)
    else:
        raise ValueError(f"unknown shape {kind!r}")
    return np.asarray(canvas) > 0


def _star_points(inner) -> list[tuple[float, float]]:
    """Five-pointed star, one point up, stretched to fill the box exactly."""
    ratio = math.sin(math.radians(18)) / math.sin(math.radians(54))
    points = []
    for i in range(10):
        radius = 1.0 if i % 2 == 0 else ratio
        angle = math.radians(-90 + 36 * i)
        points.append((radius * math.cos(angle), radius * math.sin(angle)))
    xs, ys = zip(*points)
    x0, y0, x1, y1 = inner
    sx = (x1 - x0) / (max(xs) - min(xs))
    sy = (y1 - y0) / (max(ys) - min(ys))
    return [(x0 + (x - min(xs)) * sx, y0 + (y - min(ys)) * sy) for x, y in points]


# ---------------------------------------------------------------- crops

def crop_box(box, margin: float = 0.15, side: int = IMAGE_SIDE) -> tuple[int, int, int, int]:
    """The box grown by `margin` of its size on every side, clipped to the image."""
    x0, y0, x1, y1 = box
    dx, dy = margin * (x1 - x0), margin * (y1 - y0)
    return (
        max(0, int(math.floor(x0 - dx))), max(0, int(math.floor(y0 - dy))),
        min(side, int(math.ceil(x1 + dx))), min(side, int(math.ceil(y1 + dy))),
    )


def padded_crop(image: Image.Image, box, canvas: int = 128, margin: float = 0.15, fill=None) -> Image.Image:
    """The crop pasted at true scale in the middle of a `canvas`-sided square,
    so that the size of what it shows stays visible after resizing. The fill
    defaults to the median colour of the crop's border (the background)."""
    crop = image.crop(crop_box(box, margin, image.width))
    if crop.width > canvas or crop.height > canvas:
        crop.thumbnail((canvas, canvas))
    if fill is None:
        fill = _border_colour(np.asarray(crop))
    out = Image.new("RGB", (canvas, canvas), fill)
    out.paste(crop, ((canvas - crop.width) // 2, (canvas - crop.height) // 2))
    return out


def _border_colour(pixels: np.ndarray) -> tuple[int, int, int]:
    border = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
    return tuple(int(v) for v in np.median(border, axis=0))
