"""The demo world (docs/formats.md §9): coloured shapes on a light background,
captions over a tiny vocabulary, polluted twins with one wrong word, and
fixed regions per image.

Everything is deterministic for a `numpy.random.Generator`; `scene_rng(seed,
index)` gives the generator of scene `index` of a data set, so scenes can be
made in any order (and training can draw fresh scenes per step reproducibly).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import permutations

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
MAX_SCENE_REGIONS = 20
COUNT_WORDS = ("one", "two", "three", "four")


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


# ---------------------------------------------------------------- captions

@dataclass(frozen=True)
class Phrase:
    """What a caption says about one shape; None = not said."""
    kind: str | None
    colour: str | None = None
    size: str | None = None

    def matches(self, shape: Shape, size_visible: bool = True) -> bool:
        return all(
            getattr(self, attr) is None or getattr(self, attr) == getattr(shape, attr)
            for attr in ATTRIBUTES
            if size_visible or attr != "size"
        )

    def words(self) -> list[tuple[str, str]]:
        return [(getattr(self, a), a) for a in ATTRIBUTES if getattr(self, a) is not None]

    def text(self) -> str:
        return " ".join(word for word, _ in self.words())


@dataclass(frozen=True)
class Word:
    text: str
    role: str | None = None        # "size" | "colour" | "kind" | "article" | None
    phrase: int | None = None      # index into Caption.phrases


@dataclass(frozen=True)
class Caption:
    words: tuple[Word, ...]
    phrases: tuple[Phrase, ...]
    referents: tuple[int, ...]     # shape index each phrase was written about
    count: int | None = None       # "two shapes: ..." says how many shapes there are
    wrong_word: int | None = None  # index into words of the polluted word

    @property
    def text(self) -> str:
        return "".join(_joined(self.words))

    def spans(self) -> list[tuple[int, int]]:
        spans, pos = [], 0
        for piece in _joined(self.words):
            spans.append((pos + len(piece) - len(piece.lstrip(" ")), pos + len(piece)))
            pos += len(piece)
        return spans

    def wrong_span(self) -> tuple[int, int] | None:
        return None if self.wrong_word is None else self.spans()[self.wrong_word]


def _joined(words) -> list[str]:
    """Each word with the separator before it (no space before punctuation)."""
    out = []
    for i, word in enumerate(words):
        glue = "" if i == 0 or word.text in {".", ",", ":"} else " "
        out.append(glue + word.text)
    return out


TEMPLATES = (
    ("", "."),
    ("there is", "."),
    ("an image of", "."),
    ("a picture with", "."),
    ("", "on a plain background."),
    ("this shows", "."),
)


def make_caption(scene: Scene, rng: np.random.Generator) -> Caption:
    """A true caption that has at least one word which can be made wrong
    ("a triangle" cannot, when every kind of shape is in the scene)."""
    while True:
        caption = _draw_caption(scene, rng)
        if pollution_options(caption, scene)[0]:
            return caption


def _draw_caption(scene: Scene, rng: np.random.Generator) -> Caption:
    n = len(scene.shapes)
    n_mentioned = int(rng.integers(1, n + 1)) if rng.random() < 0.6 else n
    referents = tuple(int(i) for i in rng.permutation(n)[:n_mentioned])
    phrases = tuple(_describe(scene, i, rng) for i in referents)
    use_count = n_mentioned == n and rng.random() < 0.25
    prefix, suffix = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    words: list[Word] = []
    if use_count:
        words += [Word(COUNT_WORDS[n - 1]), Word("shape" if n == 1 else "shapes"), Word(":")]
    elif prefix:
        words += [Word(w) for w in prefix.split()]
    for p, phrase in enumerate(phrases):
        if p > 0:
            words.append(Word("and") if p == len(phrases) - 1 else Word(","))
        words.append(Word("a", "article", p))
        words += [Word(text, role, p) for text, role in phrase.words()]
    tail = "." if use_count else suffix
    words += [Word(w) for w in tail.rstrip(".").split()] + [Word(".")]
    return Caption(fix_articles(words), phrases, referents, n if use_count else None)


def _describe(scene: Scene, index: int, rng) -> Phrase:
    shape = scene.shapes[index]
    kind_unique = sum(s.kind == shape.kind for s in scene.shapes) == 1
    colour = None if kind_unique and rng.random() < 0.15 else shape.colour
    size = shape.size if rng.random() < 0.4 else None
    return Phrase(shape.kind, colour, size)


def fix_articles(words: list[Word]) -> tuple[Word, ...]:
    fixed = list(words)
    for i, word in enumerate(fixed):
        if word.role == "article" and i + 1 < len(fixed):
            fixed[i] = replace(word, text="an" if fixed[i + 1].text[0] in "aeiou" else "a")
    return tuple(fixed)


def caption_true(caption: Caption, shapes: list[Shape], size_visible: bool = True) -> bool:
    """Every phrase names a different shape among `shapes` (and the count, if
    given, is right): the truth behind the training match matrix."""
    if caption.count is not None and caption.count != len(shapes):
        return False
    return phrases_true(caption.phrases, shapes, size_visible)


def phrases_true(phrases, shapes: list[Shape], size_visible: bool = True) -> bool:
    if len(phrases) > len(shapes):
        return False
    for chosen in permutations(range(len(shapes)), len(phrases)):
        if all(p.matches(shapes[i], size_visible) for p, i in zip(phrases, chosen)):
            return True
    return False


def pollute(caption: Caption, scene: Scene, rng: np.random.Generator, binding_share: float = 0.5,
            roles: tuple[str, ...] = ATTRIBUTES) -> Caption:
    """The caption with exactly one size, colour or shape word swapped so that
    its phrase fits no shape in the scene. With probability `binding_share`
    the new word is taken from another shape of the scene when one fits
    (a binding error: "a blue circle" where the square is blue). `roles`: the
    kinds of word that may be swapped (ValueError when the caption has none
    that can be)."""
    options, binding = pollution_options(caption, scene, roles)
    if not options:
        raise ValueError(f"no {'/'.join(roles)} word of {caption.text!r} can be made wrong")
    pool = binding if binding and rng.random() < binding_share else options
    w, value = pool[int(rng.integers(len(pool)))]
    word = caption.words[w]
    words = list(caption.words)
    words[w] = replace(word, text=value)
    phrases = list(caption.phrases)
    phrases[word.phrase] = replace(phrases[word.phrase], **{word.role: value})
    return replace(caption, words=fix_articles(words), phrases=tuple(phrases), wrong_word=w)


def pollution_options(caption: Caption, scene: Scene, roles: tuple[str, ...] = ATTRIBUTES) -> tuple[list, list]:
    """(all (word index, new value) swaps of a word of `roles` that make the
    caption wrong, the binding ones among them: new value taken from another
    shape in the scene)."""
    options, binding = [], []
    for w, word in enumerate(caption.words):
        if word.role not in roles:
            continue
        phrase = caption.phrases[word.phrase]
        for value in VALUES[word.role]:
            wrong = replace(phrase, **{word.role: value})
            if value == word.text or any(wrong.matches(s) for s in scene.shapes):
                continue
            options.append((w, value))
            if any(getattr(s, word.role) == value for s in scene.shapes):
                binding.append((w, value))
    return options, binding


# ---------------------------------------------------------------- regions

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
