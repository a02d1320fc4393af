"""What every click segmenter offers: `embed` once per image, then `candidates`
and `predict` for each click; a click is a `Point`, `(x, y, 1)` positive or
`(x, y, 0)` negative, in image pixels."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np
from PIL import Image

Point = tuple[float, float, int]


@dataclass
class Embedding:
    """What a segmenter keeps of one image between its clicks."""
    width: int
    height: int
    state: object
    ms: float = 0.0  # how long `embed` took
    previous: dict = field(default_factory=dict)  # prompts -> low-res logits, for the next click's mask input


class ClickSegmenter(Protocol):
    name: str
    fallback: bool

    def embed(self, image: Image.Image) -> Embedding: ...

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float | None]: ...

    def candidates(self, embedding: Embedding, points: Sequence[Point], box=None) -> list[tuple[np.ndarray, float | None]]:
        ...


MAX_CANDIDATES = 3  # masks one click can answer with (SAM's multimask output)
