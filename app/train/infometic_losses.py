"""The losses of one `capscope train infometic` step: the InfoMetIC multi-task
recipe (Hu et al. 2023, sec. 3.2 and 4.1) on the (image, caption) pairs of one
forward.

Losses (docs/train-infometic.md says why each is there):
- coarse: NCE on vision recall and on text precision, image->caption and
  caption->image (eq. 5-7), with in-batch negatives taken by shifting the
  batch; hard textual negatives on recall (eq. 8); the polluted twin as one
  more negative caption for *precision* (a caption with a wrong word is less
  precise, not less complete);
- fine: text labels from polluted captions (eq. 9) and vision labels from
  grounding (eq. 10);
- capscope's: a class-balanced BCE on the token verifier's per-piece logits
  and a grounding cross-entropy on its phrase-region scores.
Coarse and fine are weighted 3:1 (sec. 4.1) in every step (the same expected
gradient as alternating batches 3:1, with one forward).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from capscope.train.infometic_data import OTHER, region_labels
from capscope.train.infometic_setup import InfoTrainConfig

LOSS_NAMES = ("nce_recall", "nce_precision", "htn", "text_token", "vision_token", "verify", "grounding")
COARSE, FINE = ("nce_recall", "nce_precision", "htn"), ("text_token", "vision_token")


@dataclass
class Pairs:
    """The (image, caption) pairs of one forward and where each task finds its own."""

    images: list = field(default_factory=list)     # bank index per pair
    samples: list = field(default_factory=list)
    positive: list = field(default_factory=list)   # pair index of (I_b, C_b)
    shifted: dict = field(default_factory=dict)    # (b, k) -> pair index of (I_b, C_{b+k})
    polluted: dict = field(default_factory=dict)   # b -> pair indices of (I_b, C'_b), one per polluted twin
    htn: list = field(default_factory=list)        # (more, less) pair indices

    def add(self, image: int, sample) -> int:
        self.images.append(image)
        self.samples.append(sample)
        return len(self.images) - 1


def build_pairs(draws, images: list[int], shifts: int) -> Pairs:
    pairs = Pairs()
    size = len(draws)
    for b, draw in enumerate(draws):
        pairs.positive.append(pairs.add(images[b], draw.clean))
    for k in range(1, min(shifts, size - 1) + 1):
        for b in range(size):
            pairs.shifted[(b, k)] = pairs.add(images[b], draws[(b + k) % size].clean)
    for b, draw in enumerate(draws):
        if draw.polluted:
            pairs.polluted[b] = [pairs.add(images[b], s) for s in draw.polluted]
        if draw.htn is not None:
            more, less = draw.htn
            index = {id(draw.clean): pairs.positive[b]}
            pairs.htn.append(tuple(index.get(id(s)) if id(s) in index else pairs.add(images[b], s) for s in (more, less)))
    return pairs


def forward_pairs(model, bank, texts, pairs: Pairs, device):
    v_g, regions, boxes, sizes = bank.batch(pairs.images)
    text = texts.batch(pairs.samples, [bank.boxes[i] for i in pairs.images])
    inputs = [v_g, regions, boxes, sizes, text.t_g, text.tokens, text.mask]
    out = model.outputs(*[x.to(device) for x in inputs])
    return out, text, torch.stack([region_labels_of(s, bank.boxes[i]) for s, i in zip(pairs.samples, pairs.images)])


def region_labels_of(sample, boxes):
    return region_labels(sample, boxes)


def nce_losses(scores, pairs: Pairs, source, size: int, extra_negatives: dict | None = None):
    """(image->caption + caption->image) / 2 (eq. 5-7) over the shifted
    negatives, leaving out any "negative" known to be true of the image."""
    to_caption, to_image = [], []
    for b in range(size):
        row = [scores[pairs.positive[b]]]
        col = [scores[pairs.positive[b]]]
        for (bb, k), p in pairs.shifted.items():
            if bb == b and not source.true_of(pairs.images[p], pairs.samples[p]):
                row.append(scores[p])
            if (bb + k) % size == b and not source.true_of(pairs.images[p], pairs.samples[p]):
                col.append(scores[p])
        for p in (extra_negatives or {}).get(b, []):
            row.append(scores[p])
        to_caption.append(_first_wins(row))
        to_image.append(_first_wins(col))
    stack = lambda xs: torch.stack(xs).mean() if xs else scores.sum() * 0
    return (stack([x for x in to_caption if x is not None]) + stack([x for x in to_image if x is not None])) / 2


def _first_wins(logits):
    if len(logits) < 2:
        return None
    return F.cross_entropy(torch.stack(logits)[None], torch.zeros(1, dtype=torch.long, device=logits[0].device))


def text_token_loss(log_alpha, labels):
    """Eq. 9: -1/n_s sum over correct semantic pieces of log alpha_t."""
    semantic = (labels == 0) | (labels == 1)
    correct = labels == 1
    per_pair = -(log_alpha * correct).sum(-1) / semantic.sum(-1).clamp(min=1)
    keep = correct.any(-1)
    return per_pair[keep].mean() if keep.any() else per_pair.sum() * 0


def vision_token_loss(log_attention, labels):
    """Eq. 10: -1/m sum over mentioned regions of log alpha_v (null slot excluded from m)."""
    n = labels.shape[1]
    log_alpha = log_attention[:, :n]
    mentioned = labels == 1
    per_pair = -(log_alpha * mentioned).sum(-1) / max(n, 1)
    keep = mentioned.any(-1)
    return per_pair[keep].mean() if keep.any() else per_pair.sum() * 0


def verify_loss(logits, labels, other_weight: float = 0.5):
    """Class-balanced BCE on the verifier's per-piece logits: 1 for a correct
    semantic piece, 0 for a wrong one and (weighted `other_weight`) for a piece
    of a non-semantic word, which should draw no text attention either."""
    parts, weights = [], []
    for value, target, weight in ((1, 1.0, 1.0), (0, 0.0, 1.0), (OTHER, 0.0, other_weight)):
        chosen = labels == value
        if chosen.any() and weight > 0:
            parts.append(weight * F.binary_cross_entropy_with_logits(logits[chosen], logits[chosen].new_full((int(chosen.sum()),), target)))
            weights.append(weight)
    return sum(parts) / sum(weights) if parts else logits.sum() * 0


def grounding_loss(phrase, grounding):
    """Cross-entropy over regions: the phrase of a grounded piece should fit its region best."""
    if phrase is None:
        return grounding.sum() * 0.0
    chosen = grounding >= 0
    if not chosen.any():
        return phrase.sum() * 0
    return F.cross_entropy(phrase[chosen], grounding[chosen].to(phrase.device))


def step_losses(model, bank, texts, source, draws, images, config: InfoTrainConfig, device) -> dict:
    pairs = build_pairs(draws, images, config.shifts)
    out, text, regions = forward_pairs(model, bank, texts, pairs, device)
    size = len(draws)
    losses = {
        "nce_recall": nce_losses(out["recall"], pairs, source, size),
        "nce_precision": nce_losses(out["precision"], pairs, source, size, pairs.polluted),
        "htn": torch.stack([-F.logsigmoid(out["recall"][m] - out["recall"][l]) for m, l in pairs.htn]).mean()
        if pairs.htn else out["recall"].sum() * 0,
    }
    own = pairs.positive + [p for twins in pairs.polluted.values() for p in twins]
    labels = text.labels.to(device)
    losses["text_token"] = text_token_loss(out["text_log_attention"][own], labels[own])
    losses["vision_token"] = vision_token_loss(out["region_log_attention"][own], regions.to(device)[own])
    checks = out["checks"]
    losses["verify"] = verify_loss(checks["logits"][own], labels[own])
    phrase = None if checks["phrase"] is None else checks["phrase"][pairs.positive]
    losses["grounding"] = grounding_loss(phrase, text.grounding[pairs.positive].to(device))
    return losses


def total_loss(losses: dict, config: InfoTrainConfig):
    coarse = sum(losses[k] for k in COARSE)
    fine = sum(losses[k] for k in FINE)
    mix = (config.coarse_weight * coarse + config.fine_weight * fine) / (config.coarse_weight + config.fine_weight)
    return mix + config.verify_weight * losses["verify"] + config.grounding_weight * losses["grounding"]
