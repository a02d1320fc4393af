"""A dataset's items as Label Studio tasks: the image, the caption, the model's
suggestions as predictions (their verdicts decided by the token rule the caller
names) and, with an option, the team's labels as annotations."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from capscope.annotation import audit
from capscope.annotation.captioners import newest_predictions, stored_verdicts
from capscope.annotation.label_studio.brushes import brush_rle
from capscope.annotation.label_studio.labeling import (CAPTION, IMAGE, JUNK, LEFT_OUT, MASKS, MENTIONED, REGIONS,
                                                       SPEAKS_OF, TIED, WORDS, WRONG)
from capscope.annotation.refusals import Invalid
from capscope.annotation.votes import ItemData, iter_exported_items
from capscope.db import Store
from capscope.metrics.regions import rle_to_mask
from capscope.metrics.registry import SPECS

CHUNK = 200


def image_url(path: str, image_root: str | None = "/", url_prefix: str | None = None) -> str:
    """The image as Label Studio will serve it: under `url_prefix` (path
    relative to `image_root`), else through its local-files storage
    (LOCAL_FILES_DOCUMENT_ROOT = `image_root`)."""
    relative = Path(path).resolve().relative_to(Path(image_root or "/").resolve()).as_posix()
    if url_prefix:
        return url_prefix.rstrip("/") + "/" + relative
    return "/data/local-files/?d=" + relative


def tasks(store: Store, dataset: str | None = None, *, token_rule: str, with_labels: bool = False,
          image_root: str | None = "/", url_prefix: str | None = None, masks: bool = False) -> Iterator[dict]:
    """Every item as a Label Studio task, in id order, a chunk at a time; the
    predictions' verdicts decided by `token_rule`. Regions are boxes; with `masks`, a masked region is a brush stroke too
    (Label Studio's RLE is most of an export's size)."""
    audit.record(store, "export", target=dataset, details={"format": "label studio", "with_labels": with_labels})
    chunk: list[ItemData] = []
    for item in iter_exported_items(store, dataset):
        chunk.append(item)
        if len(chunk) == CHUNK:
            yield from _tasks_of(store, chunk, with_labels, image_root, url_prefix, token_rule, masks)
            chunk = []
    if chunk:
        yield from _tasks_of(store, chunk, with_labels, image_root, url_prefix, token_rule, masks)


def _tasks_of(store, items, with_labels, image_root, url_prefix, token_rule, masks) -> list[dict]:
    with store.read() as session:
        newest = newest_predictions(session, [item.caption_id for item in items])
        predictions = {item.caption_id: [_prediction(item, p, token_rule, masks)
                                         for p in newest.get(item.caption_id, {}).values()] for item in items}
    out = []
    for item in items:
        try:
            url = image_url(item.image_path, image_root, url_prefix)
        except ValueError:
            raise Invalid(f"image {item.image_path} is not under the image root {image_root}") from None
        task = {"data": {IMAGE: url, CAPTION: item.text, "capscope_id": item.external_id,
                         "capscope_dataset": item.dataset,
                         "capscope_regions": [{"index": i, "source": r.get("source"), "added_by": r.get("added_by")}
                                              for i, r in enumerate(item.regions)]},
                "predictions": predictions[item.caption_id]}
        if with_labels:
            task["annotations"] = [_annotation(item, j, masks) for j in item.judgements]
        out.append(task)
    return out


def _prediction(item: ItemData, prediction, token_rule: str, masks: bool) -> dict:
    verdicts = stored_verdicts(prediction.metric, prediction.token_scores, prediction.region_scores, item.tokens,
                               token_rule, prediction.word_scale or 1.0)
    spec = SPECS.get(prediction.metric)
    score = (prediction.scores or {}).get(spec.primary_key) if spec else None
    wrong = {i for i, c in enumerate(verdicts["token_correct"]) if c is False}
    mentioned = {i for i, m in enumerate(verdicts["region_mentioned"]) if m}
    judges_regions = bool(spec and spec.region_decision)  # CLIP-S, PAC-S, CLIP4DM say nothing about regions
    result = _result(item, wrong, mentioned, verdicts["token_scores"], verdicts["region_scores"],
                     regions=judges_regions, masks=masks)
    return {"model_version": f"capscope {prediction.metric} {version_label(prediction.model_version)}"[:200],
            "score": float(score) if isinstance(score, (int, float)) else None, "result": result}


def version_label(version: str) -> str:
    """A stored prediction's model version as people read it: a version tag
    (`v3:5f2a...`, `default-model`) as it is; the description a scored row
    carries (its `model` object, stored as JSON) as its CLIP, and "demo" when
    the demo model scored."""
    try:
        model = json.loads(version)
    except ValueError:
        return version
    if not isinstance(model, dict):
        return version
    name = str(model.get("clip") or "model")
    return f"{name} demo" if model.get("demo") else name


def _annotation(item: ItemData, judgement, masks: bool) -> dict:
    """One judgement as a Label Studio annotation: the regions added after it was made, which its
    annotator never saw, are left out of it (as CapTokenEval's votes leave them out)."""
    unseen = {i for i in range(len(item.regions)) if judgement not in item.region_seers(i)}
    return {"result": _result(item, judgement.incorrect_tokens, judgement.mentioned_regions, masks=masks,
                              junk=judgement.junk_regions, links=judgement.links, unseen=unseen),
            "lead_time": (judgement.time_spent_ms or 0) / 1000,
            "meta": {"capscope_annotator": judgement.user}}


def _result(item: ItemData, wrong: set[int], mentioned: set[int], token_scores=None, region_scores=None, *,
            regions: bool = True, masks: bool = False, junk: set[int] = frozenset(),
            links: set[tuple[int, int]] = frozenset(), unseen: set[int] = frozenset()) -> list[dict]:
    out = []
    tied = {t for t, _ in links} - set(wrong)
    for i in sorted(set(wrong) | tied):
        token = item.tokens[i]
        entry = {"id": f"w{i}", "from_name": WORDS, "to_name": CAPTION, "type": "labels",
                 "value": {"start": token["start"], "end": token["end"], "text": token["text"],
                           "labels": [WRONG if i in wrong else TIED]}}
        out.append(_scored(entry, token_scores, i))
    out += [{"type": "relation", "from_id": f"w{t}", "to_id": f"r{r}", "direction": "right", "labels": [SPEAKS_OF]}
            for t, r in sorted(links) if regions]
    for i, region in enumerate(item.regions if regions else ()):
        if i in unseen:
            continue
        label = JUNK if i in junk else MENTIONED if i in mentioned else LEFT_OUT
        x0, y0, x1, y1 = region["box"]
        box = {"x": 100 * x0 / item.width, "y": 100 * y0 / item.height, "width": 100 * (x1 - x0) / item.width,
               "height": 100 * (y1 - y0) / item.height, "rotation": 0, "rectanglelabels": [label]}
        size = {"original_width": item.width, "original_height": item.height, "image_rotation": 0}
        out.append(_scored({"id": f"r{i}", "from_name": REGIONS, "to_name": IMAGE, "type": "rectanglelabels",
                            **size, "value": box}, region_scores, i))
        if masks and region.get("mask"):
            rle = brush_rle(rle_to_mask(region["mask"]))
            out.append(_scored({"id": f"m{i}", "from_name": MASKS, "to_name": IMAGE, "type": "brushlabels", **size,
                                "value": {"format": "rle", "rle": rle, "brushlabels": [label]}}, region_scores, i))
    return out


def _scored(entry: dict, scores, index: int) -> dict:
    value = scores[index] if scores and index < len(scores) else None
    return {**entry, "score": float(value)} if isinstance(value, (int, float)) else entry

