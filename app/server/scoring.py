"""The scorer of a `capscope serve` process, shared by the REST API and the web
UI: built on first use with every metric that can be had here, under the one
token rule the server was started with, one call at a time (a Scorer's caches
are not thread-safe), taken in turns user by user (`ScoreGate`), so that one
user's flood of requests neither starves the others nor grows without bound.

Metrics whose weights are missing are left out with the reason, so that the
page can say why PAC-S or HICE-S is not offered and the API can answer 503."""
from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol, Sequence

from capscope.common.heap import freeze_long_lived
from capscope.common.in_flight import Busy, InFlight
from capscope.metrics.config import ScorerConfig
from capscope.metrics.constants import BETA
from capscope.common.errors import CapscopeError, ModelUnavailable, first_line
from capscope.metrics.registry import metric_names
from capscope.common.threads import few_threads

log = logging.getLogger(__name__)

TOKEN_RULE_NOTES = {
    "paper": f"a word is wrong when its share of the caption's attention is at most β = {BETA} (InfoMetIC sec. 3.3)",
    "relative": "a word is wrong when its share of the caption's attention is under β scaled to the caption's "
                f"length (β·5/n for n content words, at most β = {BETA})",
}


# every metric whose weights load, on a GPU where there is one; on a CPU in fp32 the text towers run on ONNX
# Runtime, as for `capscope score`: a keystroke's re-score (one intra-op thread) took 96 ms eager for CLIP-S and
# 20 on ONNX Runtime, and tests/security/test_fair_scoring.py's floods keep within their bounds on either
SERVER_CONFIG = ScorerConfig(skip_unavailable=True, runtime="auto")


class ServedScorer(Protocol):
    """What the server and the web UI ask of a scorer: capscope's `Scorer` has all of it, and so
    must what a `scorer_factory` builds (tests build small ones)."""
    metrics: dict[str, Any]        # each loaded metric by name
    unavailable: dict[str, str]    # each metric that could not be loaded, with why
    demo: bool                     # the bundled demo model stands in for pretrained weights
    beta: float                    # the token rule's β the scorer decides words with
    nlp: Any                       # the spaCy pipeline that splits captions into words

    def score(self, image, caption: str, references=None, **options) -> dict: ...

    def score_batch(self, rows, **options) -> list[dict]: ...

    def word_threshold_scale(self, metric: str) -> float: ...


def default_factory(metrics: list[str], config: ScorerConfig = SERVER_CONFIG, infometic_checkpoint: str | None = None):
    """capscope's Scorer with the metrics whose models load (the others in its
    `unavailable`); InfoMetIC from `infometic_checkpoint` when given (a model version)."""
    from capscope.metrics.scorer import Scorer

    if infometic_checkpoint is not None:
        config = config.replace(infometic_checkpoint=infometic_checkpoint)
    return Scorer(metrics, config=config.replace(skip_unavailable=True))


def warm_text_towers(scorer: ServedScorer) -> None:
    """One short text through each text tower on one thread, as a re-score runs
    it: ONNX Runtime exports its graph at the first pass (10-15 s, once per
    machine) and builds a session per thread count (about 1 s), paid here while
    the scorer loads rather than by the first keystroke."""
    from capscope.metrics.encoder import text_backbone  # here: importing the server does not load torch

    with few_threads():
        for metric in scorer.metrics.values():
            backbone = text_backbone(metric)
            if getattr(backbone, "runtime", None) == "onnx":
                backbone.encode_texts(["a warm-up."])


def takes_checkpoint(factory: Callable) -> bool:
    """Whether `factory(metrics, infometic_checkpoint=...)` is allowed."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "infometic_checkpoint" or p.kind is p.VAR_KEYWORD for p in parameters)


class ScoringBusy(Busy):
    """Refused at once: this user already has `per_user` scorings waiting or
    running, or the server has `max_waiting` waiting (REST: 429)."""


class ScoringTimeout(CapscopeError):
    """Waited `wait_s` for the scorer without getting it (REST: 503)."""


class ScoreGate:
    """The scorer, one call at a time, handed out in turns by user: when the
    scorer frees, the waiting user served least recently goes next (each
    user's own calls in their order). A user may have `per_user` calls waiting
    or running, the server `max_waiting` waiting in all; a call waits at most
    `wait_s`. So a user who floods the server gets refusals, and another user's
    call waits for at most the call running now."""

    def __init__(self, per_user: int = 8, max_waiting: int = 32, wait_s: float = 60.0):
        if per_user < 1 or max_waiting < 1 or wait_s <= 0:
            raise ValueError("per_user and max_waiting must be at least 1, wait_s positive")
        self.per_user, self.max_waiting, self.wait_s = per_user, max_waiting, wait_s
        self._cond = threading.Condition()
        self._busy = False
        self._queues: OrderedDict[str, deque] = OrderedDict()  # user -> their waiting tickets, next user first
        self._pending = InFlight(per_user, "scorings waiting or running", ScoringBusy)

    def waiting(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._queues.values())

    def admissible(self, user: str) -> None:
        """Raise ScoringBusy now if `user` would be refused (before costly work such as decoding an image)."""
        with self._cond:
            self._check_admission(user)

    def _check_admission(self, user: str) -> None:
        self._pending.check(user)
        if sum(len(q) for q in self._queues.values()) >= self.max_waiting:
            raise ScoringBusy(f"the server has {self.max_waiting} scorings waiting; try again shortly")

    @contextmanager
    def turn(self, user: str | None) -> Iterator[None]:
        """Hold the scorer for the block, once it is `user`'s turn."""
        user = user or ""
        ticket = object()
        with self._cond:
            self._check_admission(user)
            self._queues.setdefault(user, deque()).append(ticket)
            self._pending.enter(user)
            try:
                self._wait_for(ticket, user)
            except BaseException:
                self._leave(user, ticket)
                raise
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._pending.leave(user)
                self._cond.notify_all()

    def _wait_for(self, ticket, user: str) -> None:
        deadline = time.monotonic() + self.wait_s
        while self._busy or self._next() is not ticket:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ScoringTimeout(f"the scorer stayed busy for {self.wait_s:.0f} s; try again later")
            self._cond.wait(remaining)
        self._busy = True
        queue = self._queues.pop(user)
        queue.popleft()
        if queue:
            self._queues[user] = queue  # to the back: the other users' calls go first

    def _next(self):
        """The ticket whose turn is next: the first of the user served least recently."""
        return next((queue[0] for queue in self._queues.values()), None)

    def _leave(self, user: str, ticket) -> None:
        queue = self._queues.get(user)
        if queue is not None and ticket in queue:
            queue.remove(ticket)
            if not queue:
                del self._queues[user]
        self._pending.leave(user)
        self._cond.notify_all()


class Models:
    """The server's one scorer, shared by the REST API and the web UI, so both
    give the same verdicts under one token rule and CLIP is loaded once.
    Built on first use with the metrics that load (default: every registered
    one); `score` is thread-safe.

    `factory(metrics)` builds a scorer with `.metrics`, `.unavailable`
    (name -> why, optional) and `.score(image, caption, references=,
    regions=, tokens=, only=)`; the default builds capscope's Scorer from
    `config` (`SERVER_CONFIG`), with any `options` (ScorerConfig fields:
    `token_rule`, `precision`, ...) replacing its own. Calls take the scorer in
    turns by user (`gate`, a ScoreGate: pass `user=` the caller's name)."""

    def __init__(self, factory: Callable[[list[str]], object] | None = None,
                 metrics: Sequence[str] | None = None, config: ScorerConfig = SERVER_CONFIG,
                 gate: ScoreGate | None = None, **options):
        self.config = config.replace(**options)  # an unknown option or a bad choice raises here
        self.factory = factory or functools.partial(default_factory, config=self.config)
        self._wanted = list(metrics) if metrics is not None else None
        self.unavailable: dict[str, str] = {}
        self.checkpoint: str | None = None  # the active model version's InfoMetIC file (None: the default model)
        self.version: str | None = None  # its tag, as its predictions name it
        self._scorer = None
        self._build_lock = threading.Lock()
        self.gate = gate or ScoreGate()

    @property
    def token_rule(self) -> str:
        """The rule every verdict of this server follows (the page and the API say it)."""
        return self.config.token_rule

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
        unavailable = dict(scorer.unavailable)
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
        warm_text_towers(scorer)
        freeze_long_lived()  # the model's objects live as long as the server
        return scorer, unavailable

    def swap(self, scorer: ServedScorer, unavailable: dict[str, str], checkpoint: str | None, version: str | None) -> None:
        """Make `scorer` (built by `build_for(checkpoint)`) the one every later
        call uses. Calls that already took the old scorer finish on it."""
        with self._build_lock:
            self._scorer, self.unavailable = scorer, dict(unavailable)
            self.checkpoint, self.version = checkpoint, version

    def current(self) -> tuple[ServedScorer, str | None]:
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
        return bool(self.scorer.demo)

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
              metrics: list[str] | None = None, user: str | None = None) -> dict:
        """One pair scored by every loaded metric, or by `metrics` only, in `user`'s turn."""
        scorer = self.scorer
        only = self._loaded(metrics)
        return self.score_on(scorer, image, caption, references, regions, tokens, only, user=user)

    def score_on(self, scorer, image, caption: str, references=None, regions=None, tokens=None,
                 only: list[str] | None = None, user: str | None = None) -> dict:
        """One pair scored by this very `scorer` (one taken before a swap), in `user`'s turn."""
        with self.gate.turn(user), few_threads():
            return scorer.score(image, caption, references=references or None, regions=regions, tokens=tokens,
                                only=only)

    def score_rows_on(self, scorer, rows: list[dict], only: list[str] | None = None,
                      user: str | None = "re-scoring") -> list[dict]:
        """Input rows scored as one batch by this very `scorer`: one output row
        each, in order, a row that cannot be scored with its error (re-scoring
        after an activation; the scorer is held for the batch, so keep it small)."""
        with self.gate.turn(user), few_threads(len(rows)):
            return scorer.score_batch(rows, only=only)

    def region_matches(self, image, row: dict, region: int, metric: str,
                       user: str | None = None) -> list[tuple[str, float]]:
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
        with self.gate.turn(user), few_threads():
            feats = backbone.image_features([image], [regions])[0].region_feats[region]
            texts = backbone.encode_texts(candidates)
        cos = torch.nn.functional.cosine_similarity(texts, feats[None, :], dim=-1).tolist()
        return sorted(zip(candidates, cos), key=lambda pair: -pair[1])
