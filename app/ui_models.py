"""The scorer of a `capscope serve` process, shared by the REST API and the web
UI: built on first use with every metric that can be had here, under the one
token rule the server was started with, one call at a time (a Scorer's caches
are not thread-safe).

Metrics whose weights are missing are left out with the reason, so that the
page can say why PAC-S or HICE-S is not offered and the API can answer 503."""
from __future__ import annotations

import functools
import logging
import threading
from typing import Callable, Sequence

from capscope.metrics.errors import ModelUnavailable
from capscope.metrics.constants import TOKEN_RULES, check_precision
from capscope.metrics.registry import metric_names
from capscope.metrics.threads import few_threads

log = logging.getLogger(__name__)

# The page marks words with the length-aware rule by default: with more than ten
# semantic words even a uniform attention share is under the paper's β = 0.1, and
# every word of a long caption would be listed as wrong (`capscope score` keeps the
# paper's rule).
DEFAULT_TOKEN_RULE = "relative"
TOKEN_RULE_NOTES = {
    "paper": "a word is wrong when its share of the caption's attention is at most β = 0.1 (InfoMetIC sec. 3.3)",
    "relative": "a word is wrong when its share of the caption's attention is under β scaled to the caption's "
                "length (β·5/n for n content words, at most β = 0.1)",
}


def default_factory(metrics: list[str], token_rule: str = DEFAULT_TOKEN_RULE, precision: str = "fp32"):
    """capscope's Scorer with the metrics whose models load (the others in its `unavailable`)."""
    from capscope.metrics.scorer import Scorer

    return Scorer(metrics, device="auto", token_rule=token_rule, precision=precision, skip_unavailable=True)


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
        wanted = self.wanted
        try:
            scorer = self.factory(wanted)
        except Exception as err:  # nothing could be built: a missing module, a bad file, no model
            self.unavailable = {name: first_line(err) for name in wanted}
            raise ModelUnavailable(f"no metric can be loaded: {first_line(err)}") from err
        self.unavailable = dict(getattr(scorer, "unavailable", None) or {})
        for name, reason in self.unavailable.items():
            log.warning("metric %s unavailable: %s", name, reason)
        if not scorer.metrics:
            raise ModelUnavailable("no metric can be loaded: " +
                               "; ".join(f"{k}: {v}" for k, v in self.unavailable.items()))
        return scorer

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
        with self._score_lock, few_threads():
            return scorer.score(image, caption, references=references or None, regions=regions, tokens=tokens,
                                only=only)

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
