"""Captions of the demo world (docs/formats.md §9): true captions over a tiny
vocabulary, each word knowing which shape attribute it names, and polluted
twins with exactly one wrong size, colour or shape word."""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import permutations

import numpy as np

from capscope.demo.scenes import ATTRIBUTES, VALUES, Scene, Shape

COUNT_WORDS = ("one", "two", "three", "four")


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
