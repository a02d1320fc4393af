"""Captions longer than a metric's model can read, read in windows.

InfoMetIC sees 30 BPE pieces of a caption, CLIP's text tower 77 tokens; the
captions of today's vision-language models run to hundreds of words. A metric
that says how much text it can take (`fits(text)`) gets a long caption as
windows, every window scored against the whole image and its regions, and the
verdicts merged back onto the caption's tokens:

- **Where windows break.** A caption that fits is one window: the pair itself,
  so its numbers are the ones a metric gave before windows existed. Otherwise
  each sentence is a window (sentences end after ".", "!", "?" and at line
  breaks); a sentence still too long is cut into clauses (after ",", ";", ":"),
  consecutive clauses packed greedily into windows as long as fit; a clause
  still too long into overlapping runs of words, each as long as fits, each
  starting half way through the one before. One sentence a window, rather than
  as many sentences as fit: on long demo captions it judged words better
  (InfoMetIC's wrong-word F1 0.89 and 0.85 inside and past the old window,
  against 0.89 and 0.82 packed: docs/records/long-captions.md), and a
  sentence is the unit the metrics' models were trained on.
- **A word seen by two windows** (overlapping runs only) takes its verdict from
  the window in which it sits furthest from an edge: the one that read the most
  context on both sides of it.
- **Global scores** are the windows' scores averaged, each window weighted by
  how many of the caption's words it judged (a metric may merge its own way:
  `merge_scores`). A region's score is its best over the windows, and it is
  mentioned when any window mentions it.

`windows` and `truncated` (docs/formats.md §2.2) say what each metric read.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .pairs import PreparedPair
from .result import MetricResult
from .text import Token

SENTENCE_ENDS = {".", "!", "?", "..."}
CLAUSE_ENDS = {",", ";", ":"}

Fits = Callable[[str], bool]


@dataclass(frozen=True)
class Window:
    """A part of a caption a metric reads: `first` .. `last` (inclusive) index
    the caption's tokens; `start`, `end` are character offsets; `fits` is False
    when the model will cut even this part (one word too long for it)."""

    first: int
    last: int
    start: int
    end: int
    fits: bool = True


def reads_windows(mode: str, global_only: bool) -> bool:
    """Whether a metric reads every window under `mode` (else it reads what fits)."""
    return mode == "all-windows" or (mode == "windows" and not global_only)


# ---------------------------------------------------------------- planning

def plan(caption: str, tokens: list[Token], fits: Fits) -> list[Window]:
    """The windows a metric reads a caption in (one when it fits)."""
    if not tokens or fits(caption):
        return [Window(0, max(len(tokens) - 1, 0), 0, len(caption))]
    out: list[Window] = []
    for first, last in _split(tokens, 0, len(tokens) - 1, SENTENCE_ENDS, caption):
        out += _pack(caption, tokens, _refine(caption, tokens, first, last, fits), fits)
    return out


def cut(caption: str, tokens: list[Token], fits: Fits) -> Window:
    """The longest run of words from the start that fits: what a model that cuts reads."""
    if not tokens or fits(caption):
        return Window(0, max(len(tokens) - 1, 0), 0, len(caption))
    low, high = 0, len(tokens) - 1  # the answer's last token lies in [low - 1, high - 1]
    while low < high:
        mid = (low + high + 1) // 2
        if fits(caption[: tokens[mid - 1].end]):
            low = mid
        else:
            high = mid - 1
    if low == 0:
        return Window(0, 0, 0, tokens[0].end, fits=False)
    return Window(0, low - 1, 0, tokens[low - 1].end)


def _split(tokens: list[Token], first: int, last: int, ends: set[str], caption: str) -> list[tuple[int, int]]:
    """Runs of tokens ending after each token in `ends` (and before a line break)."""
    runs, start = [], first
    for i in range(first, last + 1):
        line_break = i < last and "\n" in caption[tokens[i].end : tokens[i + 1].start]
        if tokens[i].text in ends or line_break or i == last:
            runs.append((start, i))
            start = i + 1
    return runs


def _text(caption: str, tokens: list[Token], first: int, last: int) -> str:
    return caption[tokens[first].start : tokens[last].end]


def _refine(caption, tokens, first, last, fits) -> list[tuple[int, int, bool]]:
    """A sentence as packable units: itself, its clauses, or overlapping runs of words."""
    if fits(_text(caption, tokens, first, last)):
        return [(first, last, True)]
    clauses = _split(tokens, first, last, CLAUSE_ENDS, caption)
    if len(clauses) > 1:
        return [unit for a, b in clauses for unit in _refine(caption, tokens, a, b, fits)]
    return [(a, b, False) for a, b in _overlapping_runs(caption, tokens, first, last, fits)]


def _overlapping_runs(caption, tokens, first, last, fits) -> list[tuple[int, int]]:
    runs, start = [], first
    while True:
        end = start
        while end < last and fits(_text(caption, tokens, start, end + 1)):
            end += 1
        runs.append((start, end))
        if end == last:
            return runs
        start = max(start + 1, start + (end - start + 1) // 2)


def _pack(caption, tokens, units, fits) -> list[Window]:
    windows: list[Window] = []
    i = 0
    while i < len(units):
        first, last, packable = units[i]
        i += 1
        while packable and i < len(units) and units[i][2] and fits(_text(caption, tokens, first, units[i][1])):
            last = units[i][1]
            i += 1
        text_fits = fits(_text(caption, tokens, first, last))
        windows.append(Window(first, last, tokens[first].start, tokens[last].end, text_fits))
    return windows


def owners(windows: list[Window], n_tokens: int) -> list[int]:
    """Per token, the window its verdict comes from: of the windows holding it,
    the one it sits furthest from an edge of (the first on a tie)."""
    out = [0] * n_tokens
    for t in range(n_tokens):
        best = -1
        for w, window in enumerate(windows):
            if window.first <= t <= window.last:
                margin = min(t - window.first, window.last - t)
                if margin > best:
                    out[t], best = w, margin
    return out


def window_pair(pair: PreparedPair, window: Window) -> PreparedPair:
    """The part of the pair a window holds, its tokens' offsets into the part."""
    tokens = [replace(t, start=t.start - window.start, end=t.end - window.start)
              for t in pair.tokens[window.first : window.last + 1]]
    return PreparedPair(pair.caption[window.start : window.end], tokens, pair.references, dict(pair.extra), window=True)


# ---------------------------------------------------------------- scoring

def compute(metric, pairs: list[PreparedPair], images: list, mode: str, global_only: bool) -> list[MetricResult]:
    """`metric.compute` on the pairs, long captions read as `mode` says; each
    result says which parts it read (`windows`, `truncated`). A metric that
    cannot say what fits it (`fits`) is computed as it is."""
    fits = getattr(metric, "fits", None)
    if fits is None:
        return metric.compute(pairs, images)
    if not reads_windows(mode, global_only):
        return _compute_cut(metric, pairs, images, fits)
    flat_pairs, flat_images, plans = [], [], []
    for pair, image in zip(pairs, images):
        windows = plan(pair.caption, pair.tokens, fits)
        flat_pairs += [pair] if _whole(pair, windows) else [window_pair(pair, w) for w in windows]
        flat_images += [image] * len(windows)
        plans.append(windows)
    results = metric.compute(flat_pairs, flat_images)
    out, start = [], 0
    for pair, windows in zip(pairs, plans):
        parts = results[start : start + len(windows)]
        start += len(windows)
        out.append(merge(metric, pair, windows, parts))
    return out


def _whole(pair: PreparedPair, windows: list[Window]) -> bool:
    """One window holding the whole caption: the metric reads the pair itself."""
    return len(windows) == 1 and (windows[0].start, windows[0].end) == (0, len(pair.caption))


def _compute_cut(metric, pairs, images, fits) -> list[MetricResult]:
    results = metric.compute(pairs, images)
    for pair, result in zip(pairs, results):
        window = cut(pair.caption, pair.tokens, fits)
        result.windows = [[window.start, window.end]]
        result.truncated = any(t.semantic and t.start >= window.end for t in pair.tokens) or not window.fits
    return results


def merge(metric, pair: PreparedPair, windows: list[Window], parts: list[MetricResult]) -> MetricResult:
    """One result for the whole caption from its windows' results."""
    if _whole(pair, windows):
        result = parts[0]
        result.windows, result.truncated = [[0, len(pair.caption)]], not windows[0].fits
        return result
    n = len(pair.tokens)
    owner = owners(windows, n)
    weights = [sum(1 for t in range(n) if owner[t] == w) for w in range(len(windows))]
    merge_scores = getattr(metric, "merge_scores", weighted_mean)
    token_scores: list = [None] * n
    token_correct: list = [None] * n
    for t in range(n):
        w = owner[t]
        local = t - windows[w].first
        token_scores[t] = parts[w].token_scores[local]
        token_correct[t] = parts[w].token_correct[local]
    return MetricResult(
        scores=merge_scores([p.scores for p in parts], weights),
        token_scores=token_scores,
        token_correct=token_correct,
        region_scores=_best(p.region_scores for p in parts),
        region_mentioned=_any(p.region_mentioned for p in parts),
        null_score=_mean_or_none([p.null_score for p in parts], weights),
        pieces=_joined_pieces(windows, parts, owner),
        phrases=_joined_phrases(windows, parts, owner),
        features=parts[0].features,
        words=_joined_words(windows, parts, pair.tokens, owner),
        windows=[[w.start, w.end] for w in windows],
        truncated=any(not w.fits for w in windows),
    )


def weighted_mean(scores: list[dict[str, float]], weights: list[int]) -> dict[str, float]:
    """Each score averaged over the windows, weighted by the words each judged;
    a key some window lacks is left out."""
    if not sum(weights):
        weights = [1] * len(weights)
    total = sum(weights)
    keys = [k for k in scores[0] if all(k in s for s in scores)]
    return {k: sum(s[k] * w for s, w in zip(scores, weights)) / total for k in keys}


def _best(lists) -> list[float]:
    lists = [list(x) for x in lists]
    return [max(values) for values in zip(*lists)] if lists and lists[0] else []


def _any(lists) -> list[bool]:
    lists = [list(x) for x in lists]
    return [any(values) for values in zip(*lists)] if lists and lists[0] else []


def _mean_or_none(values: list[float | None], weights: list[int]) -> float | None:
    if any(v is None for v in values):
        return None
    return weighted_mean([{"v": v} for v in values], weights)["v"]


def _joined_pieces(windows, parts, owner):
    if parts[0].pieces is None:
        return None
    out = []
    for w, (window, part) in enumerate(zip(windows, parts)):
        for piece in part.pieces:
            token = None if piece.token is None else piece.token + window.first
            if token is None or owner[token] == w:
                out.append(replace(piece, token=token))
    return out


def _joined_phrases(windows, parts, owner):
    if parts[0].phrases is None:
        return None
    out = []
    for w, (window, part) in enumerate(zip(windows, parts)):
        for phrase in part.phrases:
            tokens = [t + window.first for t in phrase.tokens]
            if tokens and owner[tokens[0]] == w:
                out.append(replace(phrase, tokens=tokens))
    return out


def _joined_words(windows, parts, tokens: list[Token], owner):
    if parts[0].words is None:
        return None
    out = []
    for w, (window, part) in enumerate(zip(windows, parts)):
        owned = [t for t in range(len(tokens)) if owner[t] == w]
        if not owned:
            continue
        low, high = tokens[owned[0]].start, tokens[owned[-1]].end
        for word in part.words:
            start, end = word.start + window.start, word.end + window.start
            if low <= start < high:
                out.append(replace(word, start=start, end=end))
    return out
