"""What the Benchmark tab's two bulk runs (Agreement with people, a release's
leaderboard) share: the server's one scorer as `capscope.bench` calls it
(`SharedScorer`), the check of the chosen metrics and bootstrap draws, and the
folders the tab may read (the server's data roots and the demo world's folder)."""
from __future__ import annotations

from pathlib import Path

from capscope.common.errors import CapscopeError
from capscope.db import data_dir
from capscope.server.data_roots import DataRoots
from capscope.server.scoring import Models

DEFAULT_DRAWS = 1000
ROWS_PER_PROGRESS_STEP = 8      # the scorer takes one row at a time; the bar moves every few rows


class SharedScorer:
    """The server's scorer as `bench.correlate` calls it: `score_batch` row by
    row through `Models.score` (its lock: API and Inspect calls get in between
    two rows), limited to the chosen metrics; a row that cannot be scored gets
    its error, as the Scorer's own rows do. An image named by path must lie
    inside the data roots (else the row's error says so)."""

    def __init__(self, models: Models, metrics: list[str], roots: DataRoots | None = None):
        self.models, self.chosen = models, list(metrics)
        self.roots = roots or DataRoots()

    @property
    def demo(self) -> bool:
        return self.models.demo

    @property
    def nlp(self):
        return self.models.scorer.nlp

    def word_threshold_scale(self, metric: str) -> float:
        return self.models.scorer.word_threshold_scale(metric)

    def score_batch(self, rows: list[dict], base_dir: Path | None = None) -> list[dict]:
        return [self._one(row, base_dir) for row in rows]

    def _one(self, row: dict, base_dir: Path | None) -> dict:
        image = row["image"]
        try:
            if isinstance(image, (str, Path)):
                if base_dir is not None and not Path(image).is_absolute():
                    image = Path(base_dir) / image
                image = self.roots.check(image, "image")
            return self.models.score(image, row["caption"], row.get("references"), regions=row.get("regions"),
                                     tokens=row.get("tokens"), metrics=self.chosen)
        except CapscopeError as err:
            return {"id": row.get("id"), "metrics": {}, "tokens": [], "error": str(err)}


def check_metrics_and_draws(models: Models, metrics: list[str] | None, draws) -> int:
    """The number of bootstrap draws; ValueError with one line for no metric, one not loaded, or bad draws."""
    if not metrics:
        raise ValueError("pick at least one metric")
    missing = [m for m in metrics if m not in models.available]
    if missing:
        raise ValueError(f"not loaded on this server: {', '.join(missing)} (loaded: {', '.join(models.available)})")
    try:
        draws = int(draws)
    except (TypeError, ValueError):
        raise ValueError(f"bootstrap draws must be a whole number, not {draws!r}") from None
    if draws < 0:
        raise ValueError("bootstrap draws must be 0 or more")
    return draws


def demo_folder() -> Path:
    """Where the server writes the demo world's files (capscope.ui.page seeds it too)."""
    return data_dir() / "demo-data"


def tab_roots(data_roots: DataRoots | None) -> DataRoots:
    """The folders the tab reads: the server's data roots and the demo world's
    folder, which holds only files the server wrote itself (so that "Use the
    demo world's judgements" works whatever --data-root says)."""
    return (data_roots or DataRoots()).extended([demo_folder()])
