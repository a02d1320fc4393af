"""The leaderboard of a benchmark release (`capscope evaluate --benchmark DIR`,
docs/formats.md "Leaderboard"): per metric, word-level and region-level AUROC,
AP and F1 against the release's gold, each with a 95% percentile bootstrap
interval over images; the word figures by word type; paired differences
between every two metrics from the same resamples.

Units and orientation are `capscope evaluate`'s (bench/gold_figures.py): the
words are the semantic words with a gold label, positive = incorrect, ranked by
the negated word score (higher = more likely wrong); the regions are those with
a gold label, positive = mentioned, ranked by the region score. AUROC and AP
use the units that got a score; F1 is of the metric's own verdicts (decided
again under the token rule, as `capscope evaluate` does), an undecided unit
counting as correct / unmentioned.

The bootstrap resamples images (every item of an image, every unit of an item,
together) with replacement, the same draws for every metric, level and word
type, so a difference between two metrics is a paired one. A draw is a vector
of how often each image was picked; every figure is then a sum over images
(precomputed per image and per distinct score), so all draws are a few matrix
products, not a loop. A draw where a figure is undefined (one class missing) is
left out of that figure's interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Callable

import numpy as np

from capscope.bench.gold_figures import collect_regions, collect_tokens

DRAWS = 1000
SEED = 0
LEVELS = ("words", "regions")
STATS = ("auroc", "ap", "f1")
KINDS = ("object", "attribute", "count", "action", "relation", "other")   # diagnose.error_types.TYPES
MAX_CELLS = 4_000_000      # draws x distinct scores held at once (memory: about 32 MB a matrix)


@dataclass
class WordTyping:
    """How the words get their type (object, attribute, ...): `of(caption, tokens)` gives one
    type per token (None for a word that is not semantic), `source` says what decided.
    The callers pass diagnose.error_types' (bench does not import diagnose)."""
    of: Callable[[str, list[dict]], list[str | None]]
    source: str
    kinds: tuple[str, ...] = KINDS


@dataclass
class Units:
    """The labelled units of one metric at one level, in item order."""
    gold: np.ndarray        # bool: incorrect word / mentioned region
    scores: np.ndarray      # float, NaN where the metric gave none; oriented: higher = more likely positive
    decided: np.ndarray     # bool: the metric's verdict is the positive class
    image: np.ndarray       # int: the unit's image (index into the images)
    kind: np.ndarray | None = None   # words: the word type of each unit
    judges: bool = True     # whether the metric gives verdicts at this level at all (CLIP4DM: no regions)

    def subset(self, keep: np.ndarray) -> Units:
        return Units(self.gold[keep], self.scores[keep], self.decided[keep], self.image[keep],
                     None if self.kind is None else self.kind[keep], self.judges)


def units_of(items: list[dict], predictions: list[dict], image_index: list[int], level: str,
             types: list[list[str | None]] | None = None) -> Units:
    """The units of `level` ("words" or "regions"), through gold_figures' own collectors."""
    gold, scores, decided, image, kind = [], [], [], [], []
    collect = collect_tokens if level == "words" else collect_regions
    for k, (item, prediction) in enumerate(zip(items, predictions, strict=True)):
        judged = collect([item], [prediction])
        gold += judged.gold
        decided += judged.decided
        scores += [math.nan if s is None else s for s in judged.scores]
        image += [image_index[k]] * len(judged.gold)
        if level == "words" and types is not None:
            kind += [t for token, t in zip(item["tokens"], types[k])
                     if token.get("semantic") and token.get("label") is not None]
    verdicts = "token_correct" if level == "words" else "region_mentioned"
    judges = any(v is not None for p in predictions for v in (p.get(verdicts) or []))
    return Units(np.array(gold, dtype=bool), np.array(scores, dtype=float), np.array(decided, dtype=bool),
                 np.array(image, dtype=int), np.array(kind, dtype=object) if level == "words" and types else None,
                 judges)


# ---------------------------------------------------------------- the bootstrap

def image_draws(n_images: int, draws: int = DRAWS, seed: int = SEED) -> np.ndarray:
    """(draws, n_images): how often each image is picked in each resample of
    n_images images with replacement."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_images, size=(draws, n_images))
    offsets = picks + np.arange(draws)[:, None] * n_images
    return np.bincount(offsets.ravel(), minlength=draws * n_images).reshape(draws, n_images).astype(np.float64)


def _per_image(units: Units, n_images: int, values: np.ndarray, rows: np.ndarray):
    """Sparse (n_images, n_values) counts of the units at `rows` by image and value index."""
    from scipy.sparse import coo_matrix

    return coo_matrix((np.ones(len(rows)), (units.image[rows], values[rows])),
                      shape=(n_images, int(values.max(initial=-1)) + 1)).tocsr()


def ranking_draws(units: Units, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AUROC and AP of the scored units under each row of `weights` (draws, n_images):
    a unit counts as often as its image was drawn. AUROC is the Mann-Whitney
    form (ties count half), AP scikit-learn's (precision at each distinct score,
    weighted by the positives there); both equal the figure on the resampled
    units themselves. NaN where the draw lacks a class (AP: lacks positives)."""
    n_draws, n_images = weights.shape
    scored = ~np.isnan(units.scores)
    if not scored.any():
        return np.full(n_draws, np.nan), np.full(n_draws, np.nan)
    _, value = np.unique(units.scores[scored], return_inverse=True)
    values = np.full(len(units.gold), -1)
    values[scored] = value
    positives = _per_image(units, n_images, values, np.flatnonzero(scored & units.gold))
    negatives = _per_image(units, n_images, values, np.flatnonzero(scored & ~units.gold))
    width = int(value.max()) + 1
    auroc, ap = np.empty(n_draws), np.empty(n_draws)
    block = max(1, MAX_CELLS // width)
    for start in range(0, n_draws, block):
        w = weights[start:start + block]
        pos = np.asarray((positives.T @ w.T).T)          # (block, width): positives at each distinct score
        neg = np.asarray((negatives.T @ w.T).T)
        n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
        below = np.cumsum(neg, axis=1) - neg               # negatives scored lower
        with np.errstate(divide="ignore", invalid="ignore"):
            auroc[start:start + block] = np.where(n_pos * n_neg > 0,
                                                  (pos * (below + 0.5 * neg)).sum(axis=1) / (n_pos * n_neg), np.nan)
            tp = np.cumsum(pos[:, ::-1], axis=1)           # from the highest score down
            fp = np.cumsum(neg[:, ::-1], axis=1)
            precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1e-300), 0.0)
            ap[start:start + block] = np.where(n_pos > 0, (pos[:, ::-1] * precision).sum(axis=1) / n_pos, np.nan)
    return auroc, ap


def f1_draws(units: Units, weights: np.ndarray) -> np.ndarray:
    """F1 of the positive class of the verdicts under each row of `weights`
    (0 without a true positive, as gold_figures.f1; NaN for a draw without units)."""
    n_images = weights.shape[1]
    counts = np.zeros((n_images, 4))
    for column, hit in enumerate((units.gold & units.decided, ~units.gold & units.decided,
                                  units.gold & ~units.decided, np.ones(len(units.gold), dtype=bool))):
        np.add.at(counts[:, column], units.image[hit], 1.0)
    tp, fp, fn, n = (weights @ counts).T
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n == 0, np.nan, np.where(tp > 0, 2 * tp / (2 * tp + fp + fn), 0.0))


def interval(values: np.ndarray, n_images: int) -> list[float] | None:
    """The 2.5th and 97.5th percentiles of the defined draws; None with fewer
    than two images or no defined draw."""
    if n_images < 2 or len(values) == 0 or np.isnan(values).all():
        return None
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return [_round(lo), _round(hi)]


def _round(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 6)


# ---------------------------------------------------------------- point figures

def point_figures(units: Units) -> dict:
    """AUROC and AP with scikit-learn over the scored units, F1 of the verdicts."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    scored = ~np.isnan(units.scores)
    gold, scores = units.gold[scored], units.scores[scored]
    both = len(set(gold.tolist())) == 2
    auroc = float(roc_auc_score(gold, scores)) if both else None
    ap = float(average_precision_score(gold, scores)) if gold.any() else None
    tp = int((units.gold & units.decided).sum())
    fp, fn = int((~units.gold & units.decided).sum()), int((units.gold & ~units.decided).sum())
    f1 = None if not len(units.gold) or not units.judges else (0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return {"auroc": auroc, "ap": ap, "f1": f1}


def figures(units: Units, weights: np.ndarray, n_images: int) -> tuple[dict, dict]:
    """(the level's figures with intervals, the draws of each statistic)."""
    points = point_figures(units)
    auroc, ap = ranking_draws(units, weights)
    drawn = {"auroc": auroc, "ap": ap, "f1": f1_draws(units, weights)}
    out = {"n": int(len(units.gold)), "n_positive": int(units.gold.sum()),
           "n_scored": int((~np.isnan(units.scores)).sum())}
    for stat in STATS:
        value = points[stat]
        out[stat] = {"value": _round(value), "ci95": interval(drawn[stat], n_images) if value is not None else None}
    return out, drawn


# ---------------------------------------------------------------- the leaderboard

def leaderboard(items: list[dict], predictions: dict[str, list[dict]], *, types: list[list[str | None]],
                draws: int = DRAWS, seed: int = SEED, kinds: tuple[str, ...] = KINDS) -> dict:
    """The figures of every metric in `predictions` (per metric, one prediction per
    item, verdicts already decided) on `items`, with `types` the word type of each
    item's tokens. See the module's docstring and docs/formats.md."""
    images = list(dict.fromkeys(str(item["image"]) for item in items))
    where = {image: k for k, image in enumerate(images)}
    image_index = [where[str(item["image"])] for item in items]
    weights = image_draws(len(images), draws, seed)
    metrics, drawn = {}, {}
    for metric, rows in predictions.items():
        entry, drawn[metric] = {}, {}
        for level in LEVELS:
            units = units_of(items, rows, image_index, level, types if level == "words" else None)
            entry[level], drawn[metric][level] = figures(units, weights, len(images))
            if level == "words":
                entry["word_types"] = {kind: figures(units.subset(units.kind == kind), weights, len(images))[0]
                                       for kind in kinds}
        metrics[metric] = entry
    return {"n_items": len(items), "n_images": len(images), "draws": draws, "seed": seed,
            "interval": "95% percentile bootstrap over images",
            "metrics": metrics, "differences": differences(metrics, drawn, len(images))}


def differences(metrics: dict, drawn: dict, n_images: int) -> list[dict]:
    """Every two metrics (in the order given), at each level: a minus b of each
    statistic, with the interval of the paired per-draw differences."""
    out = []
    for a, b in combinations(list(metrics), 2):
        for level in LEVELS:
            row = {"a": a, "b": b, "level": level}
            for stat in STATS:
                va, vb = metrics[a][level][stat]["value"], metrics[b][level][stat]["value"]
                value = None if va is None or vb is None else va - vb
                row[stat] = {"value": _round(value),
                             "ci95": None if value is None else
                             interval(drawn[a][level][stat] - drawn[b][level][stat], n_images)}
            out.append(row)
    return out


def evaluate_release(release, scorer, metrics: list[str], typing: WordTyping, *, token_rule: str, beta: float,
                     draws: int = DRAWS, seed: int = SEED, controls: bool = True, batch_size: int = 32,
                     progress: bool = False) -> dict:
    """Score a checked release (bench/release_check.py) with `scorer` for `metrics`
    in one pass and give its leaderboard, with what it was measured on."""
    from capscope.bench.evaluate import RULES, predict_many, redecided, word_scale_of
    from capscope.metrics.verdict import Verdict
    from capscope.bench.release_check import metadata_summary

    items = release.items if controls else [item for item in release.items if not item.get("control")]
    if not items:
        from capscope.bench.release_check import ReleaseError

        raise ReleaseError(f"{release.folder}: every item is a control; nothing is left without them")
    found = predict_many(scorer, metrics, items, release.folder, batch_size, progress)
    predictions = {}
    for metric in metrics:
        rows = found[metric][0]
        if token_rule in RULES:
            rows = redecided(items, rows, Verdict(token_rule, beta, word_scale_of(scorer, metric)), metric)
        predictions[metric] = rows
    types = [typing.of(item["caption"], item["tokens"]) for item in items]
    board = leaderboard(items, predictions, types=types, draws=draws, seed=seed, kinds=typing.kinds)
    for metric in metrics:
        errors = found[metric][1]
        board["metrics"][metric] = {"n_errors": len(errors), **({"first_error": errors[0]} if errors else {}),
                                    "word_threshold_scale": word_scale_of(scorer, metric),
                                    **board["metrics"][metric]}
    return {"benchmark": metadata_summary(release), **board,
            "controls": "included" if controls else "left out",
            "n_controls": sum(bool(item.get("control")) for item in items),
            "token_rule": token_rule, "beta": beta, "type_source": typing.source}


# ---------------------------------------------------------------- as text

LEVEL_TITLES = {"words": "wrong words", "regions": "mentioned regions"}


def cell(stat: dict | None) -> str:
    if not stat or stat["value"] is None:
        return "n/a"
    ci = stat.get("ci95")
    return f"{stat['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def signed(stat: dict) -> str:
    if stat["value"] is None:
        return "n/a"
    ci = stat.get("ci95")
    return f"{stat['value']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")


def table(board: dict) -> tuple[list[str], list[list[str]]]:
    """The leaderboard as one table: a row per metric, AUROC, AP and F1 per level."""
    header = ["metric"] + [f"{level} {stat.upper()}" for level in LEVELS for stat in STATS]
    rows = [[metric] + [cell(entry[level][stat]) for level in LEVELS for stat in STATS]
            for metric, entry in board["metrics"].items()]
    return header, rows


def type_table(board: dict) -> tuple[list[str], list[list[str]]]:
    """Word AUROC by word type: a row per metric, a column per type that has labelled words."""
    kinds = [k for k in next(iter(board["metrics"].values()), {}).get("word_types", {}) if any(e["word_types"][k]["n"] for e in board["metrics"].values())]
    header = ["metric"] + [kind for kind in kinds]
    rows = [[metric] + [cell(entry["word_types"][k]["auroc"]) for k in kinds]
            for metric, entry in board["metrics"].items()]
    return header, rows


def difference_table(board: dict) -> tuple[list[str], list[list[str]]]:
    header = ["a - b", "level", "AUROC", "AP", "F1"]
    rows = [[f"{d['a']} - {d['b']}", d["level"], *(signed(d[stat]) for stat in STATS)] for d in board["differences"]
            if any(d[stat]["value"] is not None for stat in STATS)]     # a level one of the two does not judge
    return header, rows


def aligned(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [indent + "  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def format_leaderboard(board: dict) -> str:
    b = board.get("benchmark") or {}
    first = next(iter(board["metrics"].values()), None)
    lines = [f"{b.get('name')} {b.get('version')}: {board['n_items']} items on {board['n_images']} images "
             f"({b.get('controls', 0)} controls in the release, {board.get('controls', 'included')}); gold by "
             f"{b.get('method')}; {board['interval']}, {board['draws']} draws (seed {board['seed']})"]
    if first:
        lines.append(f"  words: {first['words']['n']} labelled semantic words ({first['words']['n_positive']} wrong); "
                     f"regions: {first['regions']['n']} labelled ({first['regions']['n_positive']} mentioned); "
                     f"token rule {board.get('token_rule')}, beta {board.get('beta')}")
    lines += ["", *aligned(*table(board))]
    header, rows = type_table(board)
    if len(header) > 1:
        counts = ", ".join(f"{k} {first['word_types'][k]['n']} ({first['word_types'][k]['n_positive']} wrong)"
                           for k in header[1:])
        lines += ["", f"Word AUROC by word type ({board.get('type_source')}): {counts}", *aligned(header, rows)]
    if board["differences"]:
        lines += ["", "Paired differences (same resamples; an interval without 0 tells the two apart)",
                  *aligned(*difference_table(board))]
    for metric, entry in board["metrics"].items():
        if entry.get("n_errors"):
            lines.append(f"  {metric}: {entry['n_errors']} items failed, e.g. {entry['first_error']}")
    return "\n".join(lines)
