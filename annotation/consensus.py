"""Gold from the judgements by one of three methods (`capscope gold --method`).

Every word and every region of an item is a binary unit (a word incorrect or
not; a region mentioned or not, voted on by those who saw it). Each method
gives every unit the probability that it is positive; the gold label is the
likelier side and its confidence that probability (a tie at exactly 0.5: no label).

- `majority`: the share of votes. A region most of its seers call junk, or one
  seen by too few (`ItemData.too_few_seers`), gets no label, as before.
- `dawid-skene`: each annotator's 2 x 2 confusion matrix and the class prior,
  one model per kind of unit, fitted by EM from all their labels (Dawid and
  Skene 1979); the posterior of each unit. Written here in numpy rather than
  taken from crowd-kit: its DawidSkene (1.4.2) stops at 100 EM steps, far from
  converged on a team with a random annotator (more errors than the majority),
  and 1,000 steps take it 21 s on 9,000 labels against 0.3 s here
  (docs/label_quality.md).
- `model-aware`: CROWDLAB's weighted ensemble (Goh et al. 2022): each
  annotator's vote, as a probability of their measured agreement, and the
  model's own probability for the unit, weighted by how far each beats always
  saying the most common class; the model's weight grows with the square root
  of the mean number of votes per unit.

`annotator_accuracy` is the Dawid-Skene estimate of each annotator's accuracy:
what the Admin tab and `GET /api/datasets/{name}/annotators` call quality.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from capscope.annotation.votes import ItemData

METHODS = ("majority", "dawid-skene", "model-aware")
# tokens: the semantic words, positive = incorrect; regions: positive = mentioned; function words
# (articles, prepositions: what nobody marks) are decided by the majority under every method, so
# that they neither inflate an annotator's estimated accuracy nor drown the words' class prior
KINDS = ("token", "region", "function")
EM_STEPS = 10_000
EM_TOLERANCE = 1e-9  # relative change of the log-likelihood that ends EM
SMOOTHING = 0.01  # pseudo-count in each confusion cell: no annotator is ever certain


@dataclass
class Units:
    """The binary units of one kind and every vote cast on them."""
    keys: list[tuple[int, int]] = field(default_factory=list)  # (caption id, index)
    votes: list[tuple[int, str, bool]] = field(default_factory=list)  # (unit, annotator, positive)
    model: dict[int, float] = field(default_factory=dict)  # unit -> the model's P(positive)

    def add(self, key: tuple[int, int], ballots: list[tuple[str, bool]]) -> int:
        unit = len(self.keys)
        self.keys.append(key)
        self.votes.extend((unit, who, value) for who, value in ballots)
        return unit

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """(unit, annotator number, label 0/1) per vote, and the annotators' names."""
        names = sorted({who for _, who, _ in self.votes})
        number = {name: i for i, name in enumerate(names)}
        unit = np.fromiter((u for u, _, _ in self.votes), dtype=np.int64, count=len(self.votes))
        worker = np.fromiter((number[w] for _, w, _ in self.votes), dtype=np.int64, count=len(self.votes))
        label = np.fromiter((int(v) for _, _, v in self.votes), dtype=np.int64, count=len(self.votes))
        return unit, worker, label, names


def collect(items: list[ItemData]) -> dict[str, Units]:
    """The semantic word, region and function word units of `items` with the votes of the store's judgements.
    Regions left without a label by the majority rule's junk and late-region checks are left out."""
    units = {kind: Units() for kind in KINDS}
    for item in items:
        for i, token in enumerate(item.tokens):
            units["token" if token["semantic"] else "function"].add(
                (item.caption_id, i), [(j.user, i in j.incorrect_tokens) for j in item.judgements])
        for i in range(len(item.regions)):
            seers = item.region_seers(i)
            if not seers or 2 * sum(i in j.junk_regions for j in seers) > len(seers) or item.too_few_seers(i):
                continue
            units["region"].add((item.caption_id, i), [(j.user, i in j.mentioned_regions) for j in seers])
    return units


# ---------------------------------------------------------------- the three methods

def majority_posterior(units: Units) -> np.ndarray:
    """P(positive) of each unit: its share of positive votes (0.5 without votes)."""
    unit, _, label, _ = units.arrays()
    positive = np.bincount(unit, weights=label, minlength=len(units.keys))
    total = np.bincount(unit, minlength=len(units.keys))
    return np.where(total > 0, positive / np.maximum(total, 1), 0.5)


@dataclass
class DawidSkeneFit:
    posterior: np.ndarray  # P(positive) per unit
    confusion: np.ndarray  # [annotator, true class, given class]
    prior: np.ndarray  # [P(negative), P(positive)]
    names: list[str]
    steps: int

    def accuracy(self) -> dict[str, float]:
        """Each annotator's expected accuracy: sum over classes of prior x P(right | class)."""
        right = self.prior[0] * self.confusion[:, 0, 0] + self.prior[1] * self.confusion[:, 1, 1]
        return dict(zip(self.names, right.tolist()))


def dawid_skene(units: Units, steps: int = EM_STEPS, tolerance: float = EM_TOLERANCE) -> DawidSkeneFit:
    """EM from the majority's shares until the log-likelihood stops rising."""
    unit, worker, label, names = units.arrays()
    n_units, n_workers = len(units.keys), len(names)
    positive = majority_posterior(units)
    posterior = np.stack([1 - positive, positive], axis=1)
    cell = (worker * 2)[:, None] * 2 + np.arange(2)[None, :] * 2 + label[:, None]  # [vote, true class]
    previous = -math.inf
    step = 0
    for step in range(1, steps + 1):
        prior = (posterior.sum(axis=0) + SMOOTHING) / (n_units + 2 * SMOOTHING)
        counts = np.bincount(cell.ravel(), weights=posterior[unit].ravel(), minlength=n_workers * 4)
        confusion = counts.reshape(n_workers, 2, 2) + SMOOTHING
        confusion /= confusion.sum(axis=2, keepdims=True)
        log_confusion = np.log(confusion)
        joint = np.tile(np.log(prior), (n_units, 1))
        for true in (0, 1):
            joint[:, true] += np.bincount(unit, weights=log_confusion[worker, true, label], minlength=n_units)
        top = joint.max(axis=1, keepdims=True)
        posterior = np.exp(joint - top)
        total = posterior.sum(axis=1, keepdims=True)
        posterior /= total
        likelihood = float((np.log(total[:, 0]) + top[:, 0]).sum())
        if likelihood - previous <= tolerance * abs(likelihood):
            break
        previous = likelihood
    return DawidSkeneFit(posterior[:, 1], confusion, prior, names, step)


def model_aware_posterior(units: Units) -> np.ndarray:
    """CROWDLAB: the majority first; then each annotator's vote counts as a
    distribution that puts their agreement with it on their label, the model's
    P(positive) as one more, each weighted by 1 - error / the most common class's error."""
    unit, worker, label, names = units.arrays()
    n_units = len(units.keys)
    first = majority_posterior(units)
    decided = first != 0.5
    consensus = first > 0.5
    common_share = max(consensus[decided].mean(), 1 - consensus[decided].mean()) if decided.any() else 0.5
    baseline_error = max(1.0 - common_share, 1e-6)

    agreeing = np.bincount(worker, weights=(label == consensus[unit]) & decided[unit], minlength=len(names))
    counted = np.bincount(worker, weights=decided[unit], minlength=len(names))
    agreement = np.where(counted > 0, agreeing / np.maximum(counted, 1), common_share)
    agreement = np.clip(agreement, 1e-3, 1 - 1e-3)
    annotator_weight = np.clip(1 - (1 - agreement) / baseline_error, 1e-3, None)

    vote_p = np.where(label == 1, agreement[worker], 1 - agreement[worker])
    numerator = np.bincount(unit, weights=annotator_weight[worker] * vote_p, minlength=n_units)
    weights = np.bincount(unit, weights=annotator_weight[worker], minlength=n_units)
    if units.model:
        scored = np.array(sorted(units.model))
        model_p = np.array([units.model[u] for u in scored])
        model_accuracy = ((model_p > 0.5) == consensus[scored])[decided[scored]].mean() if decided[scored].any() \
            else 0.5
        votes_per_unit = len(unit) / max(n_units, 1)
        model_weight = max(1 - (1 - model_accuracy) / baseline_error, 1e-3) * math.sqrt(votes_per_unit)
        numerator[scored] += model_weight * model_p
        weights[scored] += model_weight
    return np.where(weights > 0, numerator / np.maximum(weights, 1e-12), 0.5)


def posterior(units: Units, method: str) -> np.ndarray:
    if method == "majority":
        return majority_posterior(units)
    if method == "dawid-skene":
        return dawid_skene(units).posterior
    return model_aware_posterior(units)


def label_and_confidence(p: float, kind: str) -> tuple[str | None, float | None]:
    """The likelier label and its probability; a tie at 0.5: (None, 0.5)."""
    if p == 0.5:
        return None, 0.5
    positive = p > 0.5
    names = ("mentioned", "unmentioned") if kind == "region" else ("incorrect", "correct")
    return (names[0] if positive else names[1]), round(float(max(p, 1 - p)), 6)


def consensus_labels(items: list[ItemData], method: str,
                     model: dict[int, tuple[list, list]] | None = None) -> dict[int, dict]:
    """caption id -> {"token_labels", "token_confidence", "region_labels", "region_confidence"}
    under `method`, over every item given (units the method cannot decide: None);
    `model`: the model's probabilities for `model-aware` (`attach_model`)."""
    units = collect(items)
    if model:
        attach_model(units, model)
    out = {item.caption_id: {"token_labels": [None] * len(item.tokens), "token_confidence": [None] * len(item.tokens),
                             "region_labels": [None] * len(item.regions),
                             "region_confidence": [None] * len(item.regions)} for item in items}
    for kind, found in units.items():
        if not found.keys:
            continue
        probabilities = posterior(found, "majority" if kind == "function" else method)
        field_ = "region" if kind == "region" else "token"
        for (caption_id, index), p in zip(found.keys, probabilities.tolist()):
            label, confidence = label_and_confidence(p, kind)
            out[caption_id][f"{field_}_labels"][index] = label
            out[caption_id][f"{field_}_confidence"][index] = confidence
    return out


def annotator_accuracy(items: list[ItemData]) -> dict[str, float]:
    """Each annotator's accuracy as the Dawid-Skene model estimates it, over semantic words and
    regions (each kind's estimate weighted by how many labels they gave of it)."""
    weighted: dict[str, list[float]] = {}
    for kind, found in collect(items).items():
        if kind == "function" or not found.votes:
            continue
        fit = dawid_skene(found)
        given = {}
        for _, who, _ in found.votes:
            given[who] = given.get(who, 0) + 1
        for name, accuracy in fit.accuracy().items():
            total = weighted.setdefault(name, [0.0, 0.0])
            total[0] += accuracy * given[name]
            total[1] += given[name]
    return {name: total / count for name, (total, count) in weighted.items() if count}


# ---------------------------------------------------------------- the model's voice

def attach_model(units: dict[str, Units], probabilities: dict[int, tuple[list, list]]) -> None:
    """Give each unit the model's P(positive) where it has one:
    `probabilities`: caption id -> (P(incorrect) per token, P(mentioned) per region), None where unscored."""
    for kind, found in units.items():
        side = 1 if kind == "region" else 0
        for unit, (caption_id, index) in enumerate(found.keys):
            values = probabilities.get(caption_id)
            value = values[side][index] if values is not None and index < len(values[side]) else None
            if value is not None:
                found.model[unit] = float(value)
