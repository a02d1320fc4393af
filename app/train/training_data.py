"""Reading training files (docs/training-data.md): one image and caption per
line, optional grounding boxes, hard negatives and a region set."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capscope.common.errors import CapscopeError
from capscope.common.jsonl import json_lines


class TrainingDataError(CapscopeError, ValueError):
    """A line of a training file that breaks the format; names file and line."""


@dataclass(frozen=True)
class Grounding:
    box: tuple[float, float, float, float]
    start: int
    end: int


@dataclass(frozen=True)
class Negative:
    caption: str
    wrong: tuple[tuple[int, int], ...]   # character spans of the wrong words


@dataclass(frozen=True)
class TrainingPair:
    id: str
    image: Path
    caption: str
    boxes: tuple[Grounding, ...] = ()
    negatives: tuple[Negative, ...] = ()
    regions: tuple[tuple[float, float, float, float], ...] | None = None


def read_training_file(path) -> list[TrainingPair]:
    path = Path(path)
    pairs = []
    for number, row, why in json_lines(path):
        try:
            if why:
                raise ValueError(why)
            pairs.append(parse_row(row, path.parent, f"line{number}"))
        except (ValueError, KeyError, TypeError) as err:
            raise TrainingDataError(f"{path}:{number}: {err}") from None
    return pairs


def parse_row(row: dict, folder: Path, default_id: str) -> TrainingPair:
    caption = row["caption"]
    if not isinstance(caption, str) or not caption.strip():
        raise ValueError("empty caption")
    boxes = tuple(_grounding(b, caption) for b in row.get("boxes") or ())
    negatives = tuple(_negative(n) for n in row.get("negatives") or ())
    regions = row.get("regions")
    return TrainingPair(
        id=str(row.get("id", default_id)),
        image=folder / row["image"],
        caption=caption,
        boxes=boxes,
        negatives=negatives,
        regions=None if regions is None else tuple(_box(r["box"]) for r in regions),
    )


def _box(values) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = (float(v) for v in values)
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"empty box {list(values)}")
    return (x0, y0, x1, y1)


def _span(text: str, start: int, end: int, expected: str | None, what: str) -> tuple[int, int]:
    if not 0 <= start < end <= len(text):
        raise ValueError(f"{what} span [{start}, {end}) is outside the caption")
    if expected is not None and text[start:end] != expected:
        raise ValueError(f"{what} span [{start}, {end}) is {text[start:end]!r}, not {expected!r}")
    return (start, end)


def _grounding(entry: dict, caption: str) -> Grounding:
    start, end = _span(caption, int(entry["start"]), int(entry["end"]), entry.get("phrase"), "phrase")
    return Grounding(_box(entry["box"]), start, end)


def _negative(entry: dict) -> Negative:
    caption = entry["caption"]
    wrong = tuple(_span(caption, int(w["start"]), int(w["end"]), w.get("text"), "wrong word")
                  for w in entry.get("wrong") or ())
    return Negative(caption, wrong)
