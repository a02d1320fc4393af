"""Captions in the store by the captioner that wrote them (their `model`
field, set by `capscope import --model`), read back as the score rows
`capscope diagnose` adds up (docs/formats.md §2.2): each caption with its
newest stored prediction per metric, words and regions decided as the
server's scorer decides them."""
from __future__ import annotations

from typing import Iterator

from sqlalchemy import func, select
from sqlalchemy.orm import selectinload

from capscope.db import Caption, Dataset, Image, Prediction, Store
from capscope.metrics.constants import BETA
from capscope.metrics.registry import SPECS
from capscope.metrics.verdict import Verdict

CHUNK = 500  # captions read per query: memory stays flat however many there are


def captioners(store: Store) -> list[tuple[str, str, int]]:
    """(dataset, model, captions) for every captioner named in the store."""
    with store.read() as session:
        rows = session.execute(
            select(Dataset.name, Caption.model, func.count()).join(Dataset, Caption.dataset_id == Dataset.id)
            .where(Caption.model.is_not(None)).group_by(Dataset.name, Caption.model)
            .order_by(Dataset.name, Caption.model)).all()
    return [(dataset, model, n) for dataset, model, n in rows]


def stored_rows(store: Store, dataset: str, model: str, token_rule: str) -> Iterator[dict]:
    """The captioner's captions in `dataset` as score rows, in id order; a
    caption with no stored prediction is a row with an error."""
    last = 0
    while True:
        with store.read() as session:
            captions = session.scalars(
                select(Caption).join(Dataset, Caption.dataset_id == Dataset.id)
                .where(Dataset.name == dataset, Caption.model == model, Caption.id > last)
                .options(selectinload(Caption.tokens), selectinload(Caption.image).selectinload(Image.regions))
                .order_by(Caption.id).limit(CHUNK)).all()
            if not captions:
                return
            predictions = newest_predictions(session, [c.id for c in captions])
            rows = [score_row(c, predictions.get(c.id, {}), token_rule) for c in captions]
            last = captions[-1].id
        yield from rows


def newest_predictions(session, caption_ids: list[int]) -> dict[int, dict[str, Prediction]]:
    """caption id -> metric -> its newest prediction."""
    out: dict[int, dict[str, Prediction]] = {}
    for p in session.scalars(select(Prediction).where(Prediction.caption_id.in_(caption_ids))
                             .order_by(Prediction.created_at, Prediction.id)):
        out.setdefault(p.caption_id, {})[p.metric] = p  # later ones replace earlier ones
    return out


def score_row(caption: Caption, predictions: dict[str, Prediction], token_rule: str) -> dict:
    tokens = [{"text": t.text, "start": t.start, "end": t.end, "semantic": t.semantic} for t in caption.tokens]
    row = {"id": caption.external_id, "image": caption.image.path, "caption": caption.text, "tokens": tokens,
           "regions": [{"box": r.box} for r in caption.image.regions], "error": None,
           "metrics": {metric: {"scores": dict(p.scores or {}),
                                **stored_verdicts(metric, p.token_scores, p.region_scores, tokens, token_rule,
                                                  p.word_scale or 1.0)}
                       for metric, p in predictions.items()}}
    if not predictions:
        row["error"] = "no stored prediction (score the dataset in Explore, or capscope import --predictions)"
    return row


def stored_verdicts(metric: str, token_scores, region_scores, tokens: list[dict], token_rule: str,
                    word_scale: float) -> dict:
    """A stored prediction's scores with their verdicts, decided as the
    server's scorer decides: by the token rule's `Verdict` for the metrics that
    follow it (at the version's word scale), else at the metric's own threshold
    for words and regions alike."""
    spec = SPECS.get(metric)
    threshold = spec.threshold if spec is not None and spec.threshold is not None else BETA
    follows = spec is not None and spec.follows_token_rule
    verdict = Verdict(token_rule, threshold, word_scale)
    scores, regions = list(token_scores or []), list(region_scores or [])
    semantic = [t["semantic"] for t in tokens]
    if len(scores) != len(tokens):
        correct: list = [None] * len(tokens)
    elif follows:
        correct = verdict.decide(semantic, scores)
    else:
        correct = [(s > threshold) if (sem and s is not None) else None for sem, s in zip(semantic, scores)]
    if follows and None not in regions:
        mentioned: list = verdict.decide_regions(regions)
    else:
        mentioned = [None if s is None else s > threshold for s in regions]
    return {"token_scores": scores, "token_correct": correct, "region_scores": regions,
            "region_mentioned": mentioned}
