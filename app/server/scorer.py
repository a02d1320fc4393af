"""The scorer of a `capscope serve` process, shared by the REST API and the web
UI: built on first use with every metric that can be had here, under the one
token rule the server was started with, one call at a time (a Scorer's caches
are not thread-safe).

Metrics whose weights are missing are left out with the reason, so that the
page can say why PAC-S or HICE-S is not offered and the API can answer 503."""
from __future__ import annotations

import functools
import inspect
import logging
import threading
from typing import Callable, Sequence

from capscope.metrics.constants import DEFAULT_TOKEN_RULE, TOKEN_RULES, check_precision
from capscope.metrics.errors import ModelUnavailable
from capscope.metrics.registry import metric_names
from capscope.metrics.threads import few_threads

log = logging.getLogger(__name__)

TOKEN_RULE_NOTES = {
    "paper": "a word is wrong when its share of the caption's attention is at most β = 0.1 (InfoMetIC sec. 3.3)",
    "relative": "a word is wrong when its share of the caption's attention is under β scaled to the caption's "
                "length (β·5/n for n content words, at most β = 0.1)",
}


def default_factory(metrics: list[str], token_rule: str = DEFAULT_TOKEN_RULE, precision: str = "fp32",
                    infometic_checkpoint: str | None = None):
    """capscope's Scorer with the metrics whose models load (the others in its
    `unavailable`); InfoMetIC from `infometic_checkpoint` when given (a model version)."""
    from capscope.metrics.scorer import Scorer

    return Scorer(metrics, device="auto", token_rule=token_rule, precision=precision, skip_unavailable=True,
                  infometic_checkpoint=infometic_checkpoint)


def takes_checkpoint(factory: Callable) -> bool:
    """Whether `factory(metrics, infometic_checkpoint=...)` is allowed."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "infometic_checkpoint" or p.kind is p.VAR_KEYWORD for p in parameters)


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


class Models:
    """The server's one scorer, shared by the REST API and the web UI, so both
    give the same verdicts under one token rule and CLIP is loaded once.
    Built on first use with the metrics that load (default: every registered
    one); `score` is thread-safe.

    `factory(metrics)` builds a scorer with `.metrics`, `.unavailable`
    (name -> why, optional) and `.score(image, caption, references=,
    regions=, tokens=, only=)`; the default builds capscope's Scorer under
    `token_rule` at `precision`."""

    def __init__(self, factory: Callable[[list[str]], object] | None = None,
                 metrics: Sequence[str] | None = None, token_rule: str = DEFAULT_TOKEN_RULE, precision: str = "fp32"):
        if token_rule not in TOKEN_RULES:
            raise ValueError(f"unknown token rule {token_rule!r}; choose from {', '.join(TOKEN_RULES)}")
        check_precision(precision)
        self.token_rule = token_rule
        self.factory = factory or functools.partial(default_factory, token_rule=token_rule, precision=precision)
        self._wanted = list(metrics) if metrics is not None else None
        self.unavailable: dict[str, str] = {}
        self.checkpoint: str | None = None  # the active model version's InfoMetIC file (None: the default model)
        self.version: str | None = None  # its tag, as its predictions name it
        self._scorer = None
        self._build_lock = threading.Lock()
        self._score_lock = threading.Lock()

    @property
    def wanted(self) -> list[str]:
        """The metrics this server tries to load: those it was given, else every registered one."""
        return list(self._wanted) if self._wanted is not None else list(metric_names())

    @property
    def scorer(self):
        with self._build_lock:
            if self._scorer is None:
                self._scorer = self._build()
            return self._scorer

    def _build(self):
        try:
            scorer, self.unavailable = self.build_for(self.checkpoint)
        except ModelUnavailable as err:
            self.unavailable = dict(getattr(err, "unavailable", None) or {})
            raise
        return scorer

    def build_for(self, checkpoint: str | None) -> tuple[object, dict[str, str]]:
        """A new scorer (and its unavailable metrics) with InfoMetIC from
        `checkpoint` (None: the default model); touches nothing of this object."""
        wanted = self.wanted
        try:
            if checkpoint is None:
                scorer = self.factory(wanted)
            elif takes_checkpoint(self.factory):
                scorer = self.factory(wanted, infometic_checkpoint=checkpoint)
            else:
                raise ModelUnavailable("this server's scorer cannot load another InfoMetIC checkpoint")
        except Exception as err:  # nothing could be built: a missing module, a bad file, no model
            failed = ModelUnavailable(f"no metric can be loaded: {first_line(err)}")
            failed.unavailable = {name: first_line(err) for name in wanted}
            raise failed from err
        unavailable = dict(getattr(scorer, "unavailable", None) or {})
        for name, reason in unavailable.items():
            log.warning("metric %s unavailable: %s", name, reason)
        if not scorer.metrics:
            failed = ModelUnavailable("no metric can be loaded: " +
                                      "; ".join(f"{k}: {v}" for k, v in unavailable.items()))
            failed.unavailable = unavailable
            raise failed
        if checkpoint is not None and "infometic" in wanted and "infometic" not in scorer.metrics:
            raise ModelUnavailable(f"InfoMetIC could not be loaded from the version's checkpoint: "
                                   f"{unavailable.get('infometic', 'not loaded')}")
        return scorer, unavailable

    def swap(self, scorer, unavailable: dict[str, str], checkpoint: str | None, version: str | None) -> None:
        """Make `scorer` (built by `build_for(checkpoint)`) the one every later
        call uses. Calls that already took the old scorer finish on it."""
        with self._build_lock:
            self._scorer, self.unavailable = scorer, dict(unavailable)
            self.checkpoint, self.version = checkpoint, version

    def current(self) -> tuple[object, str | None]:
        """(the scorer, its version tag) as one consistent pair."""
        with self._build_lock:
            if self._scorer is None:
                self._scorer = self._build()
            return self._scorer, self.version

    @property
    def available(self) -> list[str]:
        return list(self.scorer.metrics)

    @property
    def demo(self) -> bool:
        return bool(getattr(self.scorer, "demo", False))

    def _loaded(self, metrics: list[str] | None) -> list[str] | None:
        """`metrics` checked against what loaded (None: all of them)."""
        if metrics is None:
            return None
        loaded = self.available
        for name in metrics:
            if name in self.unavailable:
                raise ModelUnavailable(f"{name} is not available on this server: {self.unavailable[name]}")
            if name not in loaded:
                raise ModelUnavailable(f"{name} is not loaded on this server (loaded: {', '.join(loaded)})")
        return list(metrics)

    def score(self, image, caption: str, references=None, regions=None, tokens=None,
              metrics: list[str] | None = None) -> dict:
        """One pair scored by every loaded metric, or by `metrics` only."""
        scorer = self.scorer
        only = self._loaded(metrics)
        return self.score_on(scorer, image, caption, references, regions, tokens, only)

    def score_on(self, scorer, image, caption: str, references=None, regions=None, tokens=None,
                 only: list[str] | None = None) -> dict:
        """One pair scored by this very `scorer` (one taken before a swap), one call at a time."""
        with self._score_lock, few_threads():
            return scorer.score(image, caption, references=references or None, regions=regions, tokens=tokens,
                                only=only)

    def score_rows_on(self, scorer, rows: list[dict], only: list[str] | None = None) -> list[dict]:
        """Input rows scored as one batch by this very `scorer`: one output row
        each, in order, a row that cannot be scored with its error (re-scoring
        after an activation; the lock is held for the batch, so keep it small)."""
        with self._score_lock, few_threads(len(rows)):
            return scorer.score_batch(rows, only=only)

    def region_matches(self, image, row: dict, region: int, metric: str) -> list[tuple[str, float]]:
        """Caption words and phrases ranked by CLIP cosine with one region's
        crop (the evidence InfoCLIP uses), best first."""
        import torch

        from capscope.metrics.regions import given_regions

        scorer = self.scorer
        backbone = scorer.metrics[metric].backbone
        regions = given_regions(row["regions"], *image.size)
        candidates = [t["text"] for t in row["tokens"] if t["semantic"]]
        candidates += [p["text"] for p in row["metrics"].get("hice", {}).get("phrases", []) or []]
        candidates = list(dict.fromkeys(candidates))
        if not candidates or not 0 <= region < len(regions):
            return []
        with self._score_lock, few_threads():
            feats = backbone.image_features([image], [regions])[0].region_feats[region]
            texts = backbone.encode_texts(candidates)
        cos = torch.nn.functional.cosine_similarity(texts, feats[None, :], dim=-1).tolist()
        return sorted(zip(candidates, cos), key=lambda pair: -pair[1])
