"""Label Studio's JSON export read back: each annotation becomes one capscope
annotator's labels (a Label Studio user is one annotator, by e-mail when its
users can be read); a "mentioned" box or stroke drawn over no stored region
comes back as a region the annotator added."""
from __future__ import annotations

import re
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sqlalchemy import select

from capscope.annotation import added_regions, audit, workflow
from capscope.annotation.label_studio.brushes import brush_mask
from capscope.annotation.label_studio.labeling import JUNK, MENTIONED, TIED, WRONG
from capscope.annotation.refusals import Invalid, NotFound
from capscope.annotation.users import UserInfo, add_user, get_user
from capscope.annotation.votes import ItemData, load_item
from capscope.common.jsonl import JsonTextError, loads_limited, shown
from capscope.common.limits import finite_number
from capscope.db import Caption, Dataset, Store
from capscope.metrics.regions import box_mask, iou, rle_to_mask

ADDED_SOURCE = "label-studio"  # the source of a region an annotator drew in Label Studio
MATCH_IOU = 0.5           # a box drawn in Label Studio is a stored region when it overlaps it this much


@dataclass
class LabelStudioReport:
    annotations_added: int = 0
    annotations_unchanged: int = 0
    users_added: list[str] = field(default_factory=list)
    not_mapped: list[str] = field(default_factory=list)   # one line per task: what did not map
    regions_added: int = 0   # "mentioned" boxes and strokes drawn over no stored region

    def summary(self) -> str:
        return (f"{self.annotations_added} annotations imported, {self.annotations_unchanged} unchanged, "
                f"{len(self.users_added)} new annotators, "
                f"{self.regions_added} region{'s' * (self.regions_added != 1)} added, "
                f"{len(self.not_mapped)} tasks with parts that did not map")


@dataclass
class Judged:
    """What one Label Studio annotation says, in capscope's indices. A region
    drawn over no stored region is `("new", k)`: the k-th of `new_regions`
    (a mask or a box), appended to the image before the labels are written."""
    wrong: set[int] = field(default_factory=set)
    mentioned: set = field(default_factory=set)
    junk: set[int] = field(default_factory=set)
    links: set = field(default_factory=set)
    new_regions: list[dict] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


def read_export(path: Path) -> list:
    """Label Studio's JSON export, a list of tasks (each checked as it is
    imported); Invalid, in one line, for a file that is not a JSON list."""
    try:
        data = loads_limited(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise Invalid(f"{path}: not a Label Studio JSON export ({type(err).__name__})") from None
    except JsonTextError as err:
        raise Invalid(f"{path}: not a Label Studio JSON export ({err})") from None
    if not isinstance(data, list):
        raise Invalid(f"{path}: not a Label Studio JSON export (expected a list of tasks with 'data')")
    return data


def user_emails(url: str, token: str) -> dict[int, str]:
    """Label Studio's users as id -> e-mail, from its REST API (`GET /api/users`)
    with a legacy API token; Invalid, in one line, when it cannot be read."""
    request = urllib.request.Request(url.rstrip("/") + "/api/users", headers={"Authorization": f"Token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            data = loads_limited(response.read().decode("utf-8"))
    except urllib.error.HTTPError as err:
        raise Invalid(f"Label Studio at {url}: GET /api/users answered HTTP {err.code} "
                      "(LABEL_STUDIO_API_KEY must be a legacy API token of a user there)") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise Invalid(f"Label Studio at {url}: cannot read its users ({getattr(err, 'reason', err)})") from None
    users = data.get("results", []) if isinstance(data, dict) else data
    if not isinstance(users, list):
        raise Invalid(f"Label Studio at {url}: GET /api/users answered something other than a list of users")
    return {_user_id(u): u["email"] for u in users
            if isinstance(u, dict) and isinstance(u.get("email"), str) and _user_id(u) is not None}


def _user_id(user: dict) -> int | None:
    """A Label Studio user's id as a number (a string of digits counts), else None."""
    ident = user.get("id")
    if isinstance(ident, str) and ident.isdecimal():
        return int(ident)
    return ident if isinstance(ident, int) and not isinstance(ident, bool) else None


def import_export(store: Store, path: Path, dataset: str | None = None,
                  emails: dict[int, str] | None = None) -> LabelStudioReport:
    """Each annotation of Label Studio's export becomes the submitted labels of
    one capscope annotator (`label-studio-<email or id>`, created when new; the
    export names users by id, `emails` (`user_emails`) gives their e-mails):
    `wrong` spans mapped onto the tokens they overlap, `mentioned` boxes and
    strokes onto the stored region they overlap most. Importing the same file
    again changes nothing. A task, annotation or result of the wrong shape is
    reported in `not_mapped` and the rest imported."""
    return import_export_rows(store, read_export(path), dataset, emails)


def import_export_rows(store: Store, tasks: list, dataset: str | None = None,
                       emails: dict[int, str] | None = None) -> LabelStudioReport:
    """`import_export` on tasks already read."""
    report = LabelStudioReport()
    for index, task in enumerate(tasks, start=1):
        _import_task(store, task, index, dataset, emails or {}, report)
    audit.record(store, "import", target=dataset, details={"kind": "label studio", "tasks": len(tasks)})
    return report


def _import_task(store: Store, task, index: int, dataset: str | None, emails: dict, report: LabelStudioReport) -> None:
    where = _task_name(task, index)
    if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
        report.not_mapped.append(f"{where}: not a Label Studio task (an object with 'data')")
        return
    item = _item_of(store, task, dataset)
    if item is None:
        report.not_mapped.append(f"{where}: no capscope item {shown(task['data'].get('capscope_id'))} "
                                 f"in dataset {shown(dataset or task['data'].get('capscope_dataset'))}")
        return
    annotations = task.get("annotations") or []
    if not isinstance(annotations, list):
        report.not_mapped.append(f"{where}: 'annotations' is not a list")
        return
    for number, annotation in enumerate(annotations):
        judged, missed = _annotation_labels(item, annotation, number)
        if missed:
            report.not_mapped.append(f"{where} (capscope id {shown(item.external_id)}): " + "; ".join(missed))
        if judged is None:
            continue
        user = _annotator(store, annotation.get("completed_by"), report, emails)
        if judged.new_regions:
            _add_drawn_regions(store, user, item, judged, report)
            item = load_item(store, item.caption_id)  # a later annotation's box may be this one
        if workflow.record_judgement(store, user, item.caption_id, judged.wrong, judged.mentioned,
                                     links=judged.links, junk=judged.junk):
            report.annotations_added += 1
        else:
            report.annotations_unchanged += 1


def _add_drawn_regions(store: Store, user: UserInfo, item: ItemData, judged: Judged,
                       report: LabelStudioReport) -> None:
    """Append the regions drawn over no stored one, as added by `user`, and put their
    indices in place of the placeholders. The import acts with the store's authority:
    the user has no assignment on the item yet."""
    importer = UserInfo(user.id, user.name, "admin")
    indices = []
    for drawn in judged.new_regions:
        region, added = added_regions.add_region(store, importer, item.caption_id, source=ADDED_SOURCE,
                                                 prompts={"label_studio": True}, **drawn)
        indices.append(region["index"])
        report.regions_added += added

    def resolved(ref):
        return indices[ref[1]] if isinstance(ref, tuple) else ref

    judged.mentioned = {resolved(r) for r in judged.mentioned}
    judged.links = {(t, resolved(r)) for t, r in judged.links}


def _task_name(task, index: int) -> str:
    """`task <its id>` for an error line, or `task #<place in the file>` when it has no usable id."""
    ident = task.get("id") if isinstance(task, dict) else None
    usable = isinstance(ident, (int, str)) and not isinstance(ident, bool) and len(str(ident)) <= 80
    return f"task {ident}" if usable else f"task #{index}"


def _annotation_labels(item: ItemData, annotation, number: int) -> tuple[Judged | None, list[str]]:
    """(what one annotation says, None when it is left out: cancelled, or not of Label
    Studio's shape; what did not map)."""
    if not isinstance(annotation, dict):
        return None, [f"annotation {number} is not an object"]
    if annotation.get("was_cancelled"):
        return None, []
    result = annotation.get("result") or []
    if not isinstance(result, list):
        return None, [f"annotation {number}: 'result' is not a list"]
    judged = _labels_of(item, result)
    return judged, judged.missed


def _item_of(store: Store, task: dict, dataset: str | None) -> ItemData | None:
    external, name = task["data"].get("capscope_id"), dataset or task["data"].get("capscope_dataset")
    if not isinstance(external, (str, int)) or isinstance(external, bool) or not isinstance(name, str):
        return None
    with store.read() as session:
        caption_id = session.scalar(select(Caption.id).join(Dataset, Caption.dataset_id == Dataset.id)
                                    .where(Dataset.name == name, Caption.external_id == str(external)))
    return None if caption_id is None else load_item(store, caption_id)


def _labels_of(item: ItemData, result: list) -> Judged:
    judged = Judged()
    spans, boxes, relations = {}, {}, []   # result id -> its words / its region
    for number, entry in enumerate(result):
        if isinstance(entry, dict) and entry.get("type") == "relation":
            relations.append((_result_id(entry.get("from_id")), _result_id(entry.get("to_id"))))
            continue
        value = entry.get("value") if isinstance(entry, dict) else None
        if not isinstance(value, dict):
            judged.missed.append(f"result {number} is not an object with a 'value' object")
            continue
        kind, ident = entry.get("type"), _result_id(entry.get("id"))
        if kind == "labels" and {WRONG, TIED} & set(_names(value, "labels")):
            hit = _span_tokens(item, value, judged.missed)
            spans[ident] = hit
            if WRONG in _names(value, "labels"):
                judged.wrong |= hit
        elif kind in ("rectanglelabels", "brushlabels"):
            region = _region_of(item, entry, kind, judged)
            if region is not None:
                boxes[ident] = region
    for from_id, to_id in relations:
        words, region = spans.get(from_id) or spans.get(to_id), boxes.get(to_id, boxes.get(from_id))
        if words and region is not None:
            judged.links |= {(t, region) for t in words}
        else:
            judged.missed.append("a relation that ties no word span to a region")
    return judged


def _region_of(item: ItemData, entry: dict, kind: str, judged: Judged):
    """The region a box or stroke labels (an index, or a placeholder for a new one), with
    its label applied to `judged`; None when it labels none."""
    labels = _names(entry["value"], kind)
    if kind == "rectanglelabels":
        index, what = _matching_region(item, entry), f"box {_box_text(entry)}"
    else:
        index, what = _matching_stroke(item, entry), "a brush stroke"
    if index is None and MENTIONED in labels:
        index = _drawn_region(item, entry, kind, judged)
    if index is None:
        if MENTIONED in labels or JUNK in labels:
            judged.missed.append(f"{what} overlaps no stored region (IoU < {MATCH_IOU})")
        return None
    if MENTIONED in labels:
        judged.mentioned.add(index)
    elif JUNK in labels and not isinstance(index, tuple):
        judged.junk.add(index)
    return index


def _drawn_region(item: ItemData, entry: dict, kind: str, judged: Judged):
    """A "mentioned" box or stroke over no stored region: a new region (a placeholder), or None
    when it cannot be one (drawn on another size of the image, or not a shape)."""
    if kind == "rectanglelabels":
        size = (entry.get("original_width"), entry.get("original_height"))
        if size != (item.width, item.height) or not _box_numbers(entry["value"]):
            return None
        shape = {"box": list(_pixel_box(entry))}
    else:
        stroke = _stroke(item, entry)
        if stroke is None or not stroke.any():
            return None
        from capscope.metrics.regions import mask_to_rle

        shape = {"mask": mask_to_rle(stroke)}
    judged.new_regions.append(shape)
    return ("new", len(judged.new_regions) - 1)


def _names(value: dict, key: str) -> list[str]:
    """A result's label names (a list of strings in Label Studio's export; anything else labels nothing)."""
    names = value.get(key)
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _result_id(ident):
    """A result's id as a relation names it (a string or a number); None for anything else."""
    return ident if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None


def _span_tokens(item: ItemData, value: dict, missed: list[str]) -> set[int]:
    start, end = value.get("start"), value.get("end")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        missed.append(f"span {shown(value.get('text'))} has no whole-number start and end")
        return set()
    hit = {i for i, t in enumerate(item.tokens) if t["start"] < end and start < t["end"]}
    if not hit:
        missed.append(f"span {start}-{end} {shown(value.get('text'))} covers no word")
    return hit




def _pixel_box(entry: dict) -> tuple[float, float, float, float]:
    v, w, h = entry["value"], entry.get("original_width"), entry.get("original_height")
    x0, y0 = v["x"] * w / 100, v["y"] * h / 100
    return x0, y0, x0 + v["width"] * w / 100, y0 + v["height"] * h / 100


def _matching_region(item: ItemData, entry: dict) -> int | None:
    size = (entry.get("original_width"), entry.get("original_height"))
    if not all(finite_number(v) and v > 0 for v in size) or not _box_numbers(entry["value"]):
        return None
    box = _pixel_box(entry)
    return _best_match([0.0 if r.get("removed") else iou(box, r["box"]) for r in item.regions])


def _stroke(item: ItemData, entry: dict) -> np.ndarray | None:
    """A brush stroke's mask; None when drawn on another size of the image or not Label Studio's RLE."""
    size = (entry.get("original_height"), entry.get("original_width"))
    if size != (item.height, item.width):  # drawn on another size of the image: cannot be matched pixel for pixel
        return None
    rle = entry["value"].get("rle") or []
    if not isinstance(rle, list) or not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in rle):
        return None
    try:
        return brush_mask(rle, *size)
    except (ValueError, IndexError):
        return None


def _matching_stroke(item: ItemData, entry: dict) -> int | None:
    """The stored region a brush stroke covers: the best mask IoU (a region
    without a mask counts as its filled box), at least MATCH_IOU."""
    stroke = _stroke(item, entry)
    if stroke is None:
        return None
    size = (item.height, item.width)
    return _best_match([0.0 if region.get("removed") else iou(stroke, _region_mask(region, size))
                        for region in item.regions])


def _best_match(ious: list[float]) -> int | None:
    """The index of the region overlapped most, when that is at least MATCH_IOU."""
    best = max(range(len(ious)), key=ious.__getitem__, default=None)
    return best if best is not None and ious[best] >= MATCH_IOU else None


def _region_mask(region: dict, size: tuple[int, int]) -> np.ndarray:
    return rle_to_mask(region["mask"]) if region.get("mask") else box_mask(region["box"], *size)


def _box_numbers(value: dict) -> bool:
    return all(finite_number(value.get(key)) for key in ("x", "y", "width", "height"))


def _box_text(entry: dict) -> str:
    v = entry["value"]
    if not _box_numbers(v):
        return "without numeric x, y, width and height"
    return f"x {v['x']:.1f}% y {v['y']:.1f}% w {v['width']:.1f}% h {v['height']:.1f}%"


def _annotator(store: Store, completed_by, report: LabelStudioReport, emails: dict[int, str]) -> UserInfo:
    """The capscope annotator of a Label Studio user (an id, or a dict with its email)."""
    if isinstance(completed_by, dict):
        who = completed_by.get("email") or completed_by.get("id")
    elif isinstance(completed_by, (int, str)):
        who = emails.get(completed_by) or completed_by
    else:
        who = None
    name = "label-studio-" + re.sub(r"[^A-Za-z0-9_.@-]", "_", str(who if who is not None else "unknown"))[:80]
    try:
        return get_user(store, name)
    except NotFound:
        report.users_added.append(name)
        return add_user(store, name, secrets.token_urlsafe(16), "annotator")
