"""Inter-annotator agreement and adjudication to gold.

Units are tokens (semantic ones by default: the ones text accuracy counts) and
regions; each submitted judgement rates every unit of its item, binary
(incorrect / correct, mentioned / unmentioned). Units with fewer than two
ratings carry no agreement information and are left out.

- Fleiss' kappa, generalised to a varying number of raters per unit (each
  unit's agreement over its own rater pairs; equals Fleiss' kappa when every
  unit has the same number of raters).
- Krippendorff's alpha, nominal, from the coincidence matrix (missing ratings allowed).
- Cohen's kappa for every pair of annotators over the units both rated.
- Per annotator: judgements, positive rate, agreement with the majority of the
  other raters (ties left out), mean pairwise Cohen's kappa.

All figures are accumulated item by item, never from the whole table at once.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from itertools import combinations

from sqlalchemy import select

from capscope.annotation import audit, consensus
from capscope.annotation.refusals import Invalid, NotFound
from capscope.annotation.controls import annotator_quality, control_ids
from capscope.annotation.gold import write_gold
from capscope.annotation.model_versions import active_version, version_tag
from capscope.annotation.uncertainty import verdict_probabilities
from capscope.annotation.importer import REGION_LABELS, TOKEN_LABELS
from capscope.annotation.users import UserInfo
from capscope.annotation.votes import ItemData, iter_items, majority
from capscope.db import Caption, Dataset, GoldLabel, Prediction, Region, Store, Token


# ---------------------------------------------------------------- statistics

def fleiss_kappa(unit_counts: dict[tuple[int, int], int]) -> float | None:
    """Fleiss' kappa from {(n_negative, n_positive): number of units}."""
    units = ratings = 0
    observed = 0.0
    category_totals = [0, 0]
    for (n0, n1), count in unit_counts.items():
        m = n0 + n1
        if m < 2:
            continue
        units += count
        ratings += m * count
        observed += count * (n0 * (n0 - 1) + n1 * (n1 - 1)) / (m * (m - 1))
        category_totals[0] += n0 * count
        category_totals[1] += n1 * count
    if units == 0:
        return None
    expected = sum((total / ratings) ** 2 for total in category_totals)
    if expected >= 1.0:
        return None  # a single category was used: agreement is undefined
    return (observed / units - expected) / (1 - expected)


def krippendorff_alpha(unit_counts: dict[tuple[int, int], int]) -> float | None:
    """Krippendorff's alpha (nominal, two categories) from unit counts."""
    disagreeing = 0.0  # o_01 + o_10 of the coincidence matrix
    n_by_value = [0.0, 0.0]
    for (n0, n1), count in unit_counts.items():
        m = n0 + n1
        if m < 2:
            continue
        disagreeing += count * 2 * n0 * n1 / (m - 1)
        n_by_value[0] += count * n0
        n_by_value[1] += count * n1
    n = sum(n_by_value)
    expected = 2 * n_by_value[0] * n_by_value[1] / (n - 1) if n > 1 else 0.0
    if expected == 0:
        return None
    return 1.0 - disagreeing / expected


def cohen_kappa(confusion: list[list[int]]) -> float | None:
    """Cohen's kappa from a 2 x 2 confusion matrix [rater a][rater b]."""
    n = sum(map(sum, confusion))
    if n == 0:
        return None
    observed = (confusion[0][0] + confusion[1][1]) / n
    rows = [sum(confusion[0]), sum(confusion[1])]
    cols = [confusion[0][0] + confusion[1][0], confusion[0][1] + confusion[1][1]]
    expected = (rows[0] * cols[0] + rows[1] * cols[1]) / n**2
    if expected >= 1.0:
        return None
    return (observed - expected) / (1 - expected)


# ---------------------------------------------------------------- accumulation

@dataclass
class _Annotator:
    name: str
    judgements: int = 0
    units: int = 0
    positives: int = 0
    agree_with_others: int = 0
    compared_with_others: int = 0
    time_spent_ms: int = 0


@dataclass
class _Figures:
    """Running totals for one kind of unit (tokens or regions)."""
    unit_counts: Counter = field(default_factory=Counter)
    pairs: dict = field(default_factory=lambda: defaultdict(lambda: [[0, 0], [0, 0]]))
    annotators: dict = field(default_factory=dict)
    units_rated: int = 0

    def add_unit(self, ratings: dict[int, bool], names: dict[int, str]) -> None:
        positives = sum(ratings.values())
        self.unit_counts[(len(ratings) - positives, positives)] += 1
        self.units_rated += 1
        for user_id, value in ratings.items():
            figures = self.annotators.setdefault(user_id, _Annotator(names[user_id]))
            figures.units += 1
            figures.positives += value
            others = majority(positives - value, len(ratings) - 1)
            if others is not None:
                figures.compared_with_others += 1
                figures.agree_with_others += others == value
        for a, b in combinations(sorted(ratings), 2):
            self.pairs[(a, b)][ratings[a]][ratings[b]] += 1

    def report(self) -> dict:
        multi = {k: v for k, v in self.unit_counts.items() if sum(k) >= 2}
        ratings = sum(sum(k) * v for k, v in multi.items())
        positives = sum(k[1] * v for k, v in multi.items())
        agreeing = sum(v for k, v in multi.items() if 0 in k)
        return {
            "units": sum(multi.values()),
            "ratings": ratings,
            "fleiss_kappa": fleiss_kappa(multi),
            "krippendorff_alpha": krippendorff_alpha(multi),
            "percent_agreement": agreeing / sum(multi.values()) if multi else None,
            "positive_rate": positives / ratings if ratings else None,
        }


def _kappas_by_annotator(pairs: dict) -> dict[int, list[float]]:
    result = defaultdict(list)
    for (a, b), confusion in pairs.items():
        kappa = cohen_kappa(confusion)
        if kappa is not None:
            result[a].append(kappa)
            result[b].append(kappa)
    return result


def agreement_report(store: Store, dataset: str | None = None, *, semantic_only: bool = True) -> dict:
    """Agreement over submitted judgements: overall figures for tokens and
    regions, every annotator pair, and each annotator."""
    tokens, regions = _Figures(), _Figures()
    names: dict[int, str] = {}
    judgements: Counter = Counter()
    spent: Counter = Counter()
    items = 0
    for item in iter_items(store, dataset):
        if not item.judgements:
            continue
        items += 1
        for j in item.judgements:
            names[j.user_id] = j.user
            judgements[j.user_id] += 1
            spent[j.user_id] += j.time_spent_ms
        _add_item(item, tokens, regions, names, semantic_only)
    return {
        "dataset": dataset,
        # per annotator: control accuracy with its interval, the consensus model's estimate, ... (controls.py)
        "quality": annotator_quality(store, dataset) if dataset is not None else None,
        "items_with_judgements": items,
        "tokens": tokens.report(),
        "regions": regions.report(),
        "pairs": _pair_report(tokens, regions, names),
        "annotators": _annotator_report(tokens, regions, names, judgements, spent),
    }


def _add_item(item: ItemData, tokens: _Figures, regions: _Figures, names: dict, semantic_only: bool) -> None:
    raters = item.judgements  # a lone rater adds to their own rates, not to agreement
    for i, token in enumerate(item.tokens):
        if semantic_only and not token["semantic"]:
            continue
        tokens.add_unit({j.user_id: i in j.incorrect_tokens for j in raters}, names)
    for i in range(len(item.regions)):
        regions.add_unit({j.user_id: i in j.mentioned_regions for j in item.region_seers(i)}, names)


def _pair_report(tokens: _Figures, regions: _Figures, names: dict) -> list[dict]:
    pairs = []
    for key in sorted(set(tokens.pairs) | set(regions.pairs)):
        a, b = key
        token_confusion = tokens.pairs.get(key)
        region_confusion = regions.pairs.get(key)
        pairs.append({
            "a": names[a], "b": names[b],
            "token_units": sum(map(sum, token_confusion)) if token_confusion else 0,
            "token_cohen_kappa": cohen_kappa(token_confusion) if token_confusion else None,
            "region_units": sum(map(sum, region_confusion)) if region_confusion else 0,
            "region_cohen_kappa": cohen_kappa(region_confusion) if region_confusion else None,
        })
    return pairs


def _annotator_report(tokens: _Figures, regions: _Figures, names, judgements, spent) -> list[dict]:
    token_kappas, region_kappas = _kappas_by_annotator(tokens.pairs), _kappas_by_annotator(regions.pairs)
    mean = lambda values: sum(values) / len(values) if values else None  # noqa: E731
    report = []
    for user_id in sorted(names, key=names.get):
        t = tokens.annotators.get(user_id) or _Annotator(names[user_id])
        r = regions.annotators.get(user_id) or _Annotator(names[user_id])
        report.append({
            "annotator": names[user_id],
            "judgements": judgements[user_id],
            "mean_time_s": spent[user_id] / judgements[user_id] / 1000 if judgements[user_id] else None,
            "incorrect_token_rate": t.positives / t.units if t.units else None,
            "mentioned_region_rate": r.positives / r.units if r.units else None,
            "token_agreement_with_others": t.agree_with_others / t.compared_with_others
            if t.compared_with_others else None,
            "region_agreement_with_others": r.agree_with_others / r.compared_with_others
            if r.compared_with_others else None,
            "mean_token_cohen_kappa": mean(token_kappas.get(user_id, [])),
            "mean_region_cohen_kappa": mean(region_kappas.get(user_id, [])),
        })
    return report


# ---------------------------------------------------------------- gold

def majority_labels(item: ItemData) -> tuple[list[str | None], list[str | None]]:
    """Majority labels from the store's judgements alone (ties and unjudged: None).
    A region counts the votes of those who saw it; one that most of them call junk has none, nor
    one that fewer than two saw on an item more judged (it was added late: `too_few_seers`)."""
    def label(votes: list[bool], yes: str, no: str) -> str | None:
        verdict = majority(sum(votes), len(votes))
        return None if verdict is None else (yes if verdict else no)

    def region_label(i: int) -> str | None:
        seers = item.region_seers(i)
        if 2 * sum(i in j.junk_regions for j in seers) > len(seers) or item.too_few_seers(i):
            return None
        return label([i in j.mentioned_regions for j in seers], "mentioned", "unmentioned")

    tokens = [label([i in j.incorrect_tokens for j in item.judgements], "incorrect", "correct")
              for i in range(len(item.tokens))]
    return tokens, [region_label(i) for i in range(len(item.regions))]


def gold_from_majority(store: Store, dataset: str | None = None, *, min_judgements: int = 2,
                       replace_adjudicated: bool = False) -> int:
    """`gold_by_consensus` with the majority (no model, so no rule). Returns the number of
    items whose gold was written."""
    return _consensus_gold(store, dataset, "majority", None, min_judgements, replace_adjudicated)["written"]


def gold_by_consensus(store: Store, dataset: str | None = None, method: str = "majority", *, token_rule: str,
                      min_judgements: int = 2, replace_adjudicated: bool = False) -> dict:
    """Set gold by `method` (annotation/consensus.py) on every item with at least
    `min_judgements` submitted judgements, each label with its confidence; the
    gold history's source is the method. Controls keep their gold; adjudicated or
    imported gold is kept unless `replace_adjudicated`. The model (model-aware) is
    the active version's predictions, else each item's newest InfoMetIC-family ones,
    decided by `token_rule` (only model-aware reads it). Returns {"written", "method"}."""
    aware = check_method(method) == "model-aware"
    model = partial(model_probabilities, store, token_rule=token_rule) if aware else None
    return _consensus_gold(store, dataset, method, model, min_judgements, replace_adjudicated)


def _consensus_gold(store: Store, dataset: str | None, method: str, model_of, min_judgements: int,
                    replace_adjudicated: bool) -> dict:
    """`gold_by_consensus`, the model's probabilities read by `model_of(items)` (None: no model)."""
    if dataset is not None:
        _check_dataset(store, dataset)
    items = list(iter_items(store, dataset))
    model = model_of(items) if model_of is not None else None
    labels = consensus.consensus_labels([item for item in items if item.judgements], method, model)
    controls = control_ids(store, dataset)
    chosen = [item.caption_id for item in items
              if len(item.judgements) >= min_judgements and item.caption_id not in controls
              and (item.gold is None or item.gold.source not in ("adjudicated", "import") or replace_adjudicated)]
    written = 0
    for start in range(0, len(chosen), 200):
        batch = chosen[start:start + 200]
        written += store.run_write(lambda session, batch=batch: _write_consensus(session, batch, labels, method))
    audit.record(store, "gold written", target=dataset, details={"method": method, "items": written,
                                                                 "min_judgements": min_judgements})
    return {"written": written, "method": method}


def check_method(method) -> str:
    if method not in consensus.METHODS:
        raise Invalid(f"gold method must be one of {', '.join(consensus.METHODS)}, got {method!r}")
    return method


def _check_dataset(store: Store, dataset: str) -> None:
    with store.read() as session:
        if session.scalar(select(Dataset.id).where(Dataset.name == dataset)) is None:
            raise NotFound(f"no dataset {dataset!r}")


def _write_consensus(session, batch: list[int], labels: dict[int, dict], method: str) -> int:
    for caption_id in batch:
        found = labels[caption_id]
        write_gold(session, caption_id, found["token_labels"], found["region_labels"], method,
                   token_confidence=found["token_confidence"], region_confidence=found["region_confidence"])
    return len(batch)


def model_probabilities(store: Store, items: list[ItemData], token_rule: str) -> dict[int, tuple[list, list]]:
    """caption id -> the model's (P(incorrect) per word, P(mentioned) per region):
    from the active version's stored predictions where it has them, else the
    newest prediction of a metric that follows the token rule (InfoMetIC first)."""
    active = active_version(store)
    preferred_tag = version_tag(active) if active is not None else None
    semantic = {item.caption_id: [t["semantic"] for t in item.tokens] for item in items}
    best: dict[int, tuple] = {}
    with store.read() as session:
        rows = session.execute(select(Prediction.caption_id, Prediction.metric, Prediction.model_version,
                                      Prediction.token_scores, Prediction.region_scores, Prediction.word_scale,
                                      Prediction.created_at, Prediction.id)
                               .where(Prediction.caption_id.in_(list(semantic)))
                               .execution_options(yield_per=1000))
        for caption_id, metric, version, tokens, regions, scale, created, prediction_id in rows:
            found = verdict_probabilities(metric, tokens, regions, semantic[caption_id], token_rule, scale or 1.0)
            if found is None:
                continue
            key = (version == preferred_tag, metric == "infometic", created, prediction_id)
            if caption_id not in best or key > best[caption_id][0]:
                best[caption_id] = (key, found)
    return {caption_id: found for caption_id, (_, found) in best.items()}


def adjudicate(store: Store, admin: UserInfo, item_id: int, token_labels: list, region_labels: list) -> dict:
    """Set an item's gold labels by hand: one entry per token ("correct",
    "incorrect" or None) and per region ("mentioned", "unmentioned" or None).
    The labels replaced stay in the item's gold history."""
    if not admin.is_admin:
        raise Invalid("only an admin adjudicates")

    def work(session):
        caption = session.get(Caption, item_id)
        if caption is None:
            raise NotFound(f"no item {item_id}")
        n_tokens = session.query(Token).filter(Token.caption_id == item_id).count()
        n_regions = session.query(Region).filter(Region.image_id == caption.image_id).count()
        _check_gold(token_labels, n_tokens, TOKEN_LABELS, "token")
        _check_gold(region_labels, n_regions, REGION_LABELS, "region")
        gold = write_gold(session, item_id, token_labels, region_labels, "adjudicated", admin.id)
        audit.record_in(session, "adjudication", actor=admin.name, target=f"item {item_id}",
                        details={"method": "adjudicated"})
        return {"item_id": item_id, "token_labels": gold.token_labels, "region_labels": gold.region_labels,
                "source": gold.source, "adjudicator": admin.name}

    return store.run_write(work)


def _check_gold(labels, size: int, allowed: tuple[str, ...], what: str) -> None:
    if not isinstance(labels, list) or len(labels) != size:
        raise Invalid(f"give exactly one {what} label per {what} ({size})")
    bad = [label for label in labels if label is not None and label not in allowed]
    if bad:
        raise Invalid(f"{what} labels must be {', '.join(allowed)} or null, got {bad[0]!r}")


def gold_view(store: Store, item_id: int) -> dict | None:
    with store.read() as session:
        gold = session.scalar(select(GoldLabel).where(GoldLabel.caption_id == item_id))
        if gold is None:
            return None
        return {"item_id": item_id, "token_labels": gold.token_labels, "region_labels": gold.region_labels,
                "source": gold.source, "updated_at": gold.updated_at.isoformat() + "Z"}
