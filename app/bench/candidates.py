"""The candidates of a human-judgement benchmark scored through the public
`Scorer.score_batch`: one row per candidate caption, images opened once,
failures kept per candidate (for `capscope correlate`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

from tqdm import tqdm

from capscope.metrics.images import ImageError, read_image


@dataclass(frozen=True)
class Candidate:
    """One caption to score: benchmarks repeat these (three experts rate one
    caption; PASCAL-50S scores each caption once per reference draw)."""
    image: Path
    caption: str
    references: tuple[str, ...] = ()


@dataclass
class Scored:
    scores: dict[str, float]                                  # "<metric>.<key>" -> value
    tokens: list[dict] = field(default_factory=list)          # the scorer's tokens of the caption
    token_scores: dict[str, list] = field(default_factory=dict)   # metric -> one score (or None) per token
    words: dict[str, list] = field(default_factory=dict)      # metric -> its `words` (clip4dm)


class ModelNoting:
    """The scorer, noting the `model` block of the rows it returns: the dense
    readings need the epsilon the rows were scored with, and the published
    values the CLIP they were scored with. Everything else is the scorer's."""

    def __init__(self, scorer):
        self.scorer, self.model = scorer, {}

    def score_batch(self, rows, *args, **kwargs):
        out = self.scorer.score_batch(rows, *args, **kwargs)
        self.model = next((row["model"] for row in out if row.get("model")), self.model)
        return out

    def __getattr__(self, name):
        return getattr(self.scorer, name)


def score_candidates(scorer, candidates, *, batch_size: int = 32, progress: bool = True,
                     desc: str = "correlate") -> tuple[dict[Candidate, Scored], dict[Candidate, str]]:
    """Each distinct candidate scored once, image by image (each image is read
    once and its features computed once: the scorer caches them per image).
    Returns the scored candidates and, for those that failed, why."""
    unique = sorted(set(candidates), key=lambda c: (str(c.image), c.caption, c.references))
    scored: dict[Candidate, Scored] = {}
    failed: dict[Candidate, str] = {}
    batch: list[tuple[Candidate, dict]] = []
    with tqdm(total=len(unique), desc=desc, unit="caption", disable=not progress, mininterval=2.0) as bar:
        for image_path, group in groupby(unique, key=lambda c: c.image):
            picture, problem = open_image(image_path)
            for candidate in group:
                if problem:
                    failed[candidate] = problem
                    bar.update(1)
                    continue
                batch.append((candidate, scoring_row(len(batch), picture, candidate)))
                if len(batch) >= batch_size:
                    _score_batch(scorer, batch, scored, failed)
                    bar.update(len(batch))
                    batch = []
        if batch:
            _score_batch(scorer, batch, scored, failed)
            bar.update(len(batch))
    return scored, failed


def scoring_row(index: int, picture, candidate: Candidate) -> dict:
    return {"id": str(index), "image": picture, "caption": candidate.caption,
            "references": list(candidate.references) or None}


def open_image(path: Path):
    """(RGB image, None) or (None, why it cannot be read)."""
    try:
        return read_image(path), None
    except ImageError as err:
        return None, str(err)


def _score_batch(scorer, batch, scored: dict, failed: dict) -> None:
    rows = scorer.score_batch([row for _, row in batch])
    for (candidate, _), row in zip(batch, rows, strict=True):
        if not row["metrics"]:
            failed[candidate] = row.get("error") or "not scored"
            continue
        scored[candidate] = Scored(
            scores={f"{name}.{key}": float(value) for name, out in row["metrics"].items()
                    for key, value in out.get("scores", {}).items()},
            tokens=row.get("tokens") or [],
            token_scores={name: out.get("token_scores") for name, out in row["metrics"].items()},
            words={name: out["words"] for name, out in row["metrics"].items() if out.get("words") is not None},
        )
