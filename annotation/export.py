"""Exports, streamed item by item: CapTokenEval JSONL (docs/formats.md §3, with votes
and majority or gold labels), CSV (one row per submitted judgement of a token
or region), and COCO-style region annotations with RLE masks.

`iter_export` yields text pieces; the server streams them, `export_to_file`
writes them to any text file object. `export_benchmark` writes a CapTokenEval
file that travels: its images copied beside it and named relatively.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Iterator, TextIO

from capscope.common.spreadsheet import FORMULA_STARTS, csv_cells  # noqa: F401  (csv_cells: its old home)
from capscope.annotation import audit
from capscope.annotation.refusals import Invalid
from capscope.annotation.votes import ItemData, iter_exported_items
from capscope.db import Store
from capscope.common.paths import safe_name

FORMATS = {"captokeneval": "application/x-ndjson", "csv": "text/csv", "coco": "application/json"}
EXTENSIONS = {"captokeneval": "jsonl", "csv": "csv", "coco": "json"}
CSV_COLUMNS = ["dataset", "item_id", "id", "image", "annotator", "submitted_at", "time_spent_ms",
               "kind", "index", "text", "box", "label", "region"]
COCO_CATEGORIES = [{"id": 1, "name": "mentioned"}, {"id": 2, "name": "unmentioned"},
                   {"id": 3, "name": "unlabelled"}]


def export_stem(dataset: str | None) -> str:
    """The file name (without extension) of an export: `capscope-<dataset or all>`, made safe."""
    return "capscope-" + safe_name(dataset or "all", max_chars=80)


def iter_export(store: Store, fmt: str, dataset: str | None = None) -> Iterator[str]:
    """The export in `fmt` (captokeneval, csv or coco), piece by piece."""
    if fmt not in FORMATS:
        raise Invalid(f"unknown export format {fmt!r}; choose from {', '.join(FORMATS)}")
    audit.record(store, "export", target=dataset, details={"format": fmt})
    return {"captokeneval": _iter_captokeneval, "csv": _iter_csv, "coco": _iter_coco}[fmt](store, dataset)


def export_to_file(store: Store, fmt: str, out: TextIO, dataset: str | None = None) -> None:
    """Write the export to an open text file."""
    for piece in iter_export(store, fmt, dataset):
        out.write(piece)


# ---------------------------------------------------------------- CapTokenEval

def captokeneval_row(item: ItemData) -> dict:
    row = {"id": item.external_id, "image": item.image_path, "caption": item.text}
    if item.references:
        row["references"] = item.references
    row["tokens"] = []
    token_confidence, region_confidence = item.gold_confidence()
    for i, token in enumerate(item.tokens):
        entry = {**token, "label": item.token_label(i)}
        if token_confidence[i] is not None:
            entry["confidence"] = token_confidence[i]
        incorrect, total = item.token_votes(i)
        if total:
            entry["votes"] = {"incorrect": incorrect, "total": total}
        row["tokens"].append(entry)
    row["regions"] = []
    for i, region in enumerate(item.regions):
        entry = {"box": region["box"], "mask": region["mask"], "label": item.region_label(i),
                 "source": region["source"], "added_by": region["added_by"]}
        if region_confidence[i] is not None:
            entry["confidence"] = region_confidence[i]
        mentioned, total = item.region_votes(i)
        if total:
            entry["votes"] = {"mentioned": mentioned, "junk": item.junk_votes(i), "total": total}
        row["regions"].append(entry)
    links = item.link_votes()
    if links:
        row["links"] = links
    row["dataset"] = item.dataset
    if item.gold is not None:
        row["gold_method"] = item.gold.source
    row["control"] = item.control
    return row


def captokeneval_items(store: Store, dataset: str | None = None) -> list[dict]:
    """The export's CapTokenEval items in memory (what fine-tuning learns from)."""
    return [captokeneval_row(item) for item in iter_exported_items(store, dataset)]


def _iter_captokeneval(store: Store, dataset: str | None) -> Iterator[str]:
    for item in iter_exported_items(store, dataset):
        yield json.dumps(captokeneval_row(item), ensure_ascii=False) + "\n"


def export_benchmark(store: Store, out: Path, dataset: str | None = None) -> tuple[int, int]:
    """CapTokenEval JSONL at `out` with every image copied to `images/` beside
    it (named by content, so each is copied once) and referenced relatively:
    `capscope import --captokeneval` and `capscope evaluate --gold` read it on
    any machine. The file appears whole or not at all. Returns (items, images)."""
    out = Path(out)
    folder = out.parent / "images"
    folder.mkdir(parents=True, exist_ok=True)
    copied: dict[str, str] = {}
    partial = out.with_name(out.name + ".partial")
    items = 0
    with partial.open("w", encoding="utf-8") as handle:
        for item in iter_exported_items(store, dataset):
            row = captokeneval_row(item)
            if item.image_path not in copied:
                copied[item.image_path] = _copy_by_content(Path(item.image_path), folder)
            row["image"] = copied[item.image_path]
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            items += 1
    partial.replace(out)
    audit.record(store, "export", target=dataset, details={"format": "captokeneval with images", "items": items})
    return items, len(set(copied.values()))


def export_benchmark_zip(store: Store, folder: Path, stem: str, dataset: str | None = None) -> Path:
    """`export_benchmark` as `folder/stem.zip` holding `stem/captokeneval.jsonl` and `stem/images/`."""
    folder = Path(folder)
    export_benchmark(store, folder / stem / "captokeneval.jsonl", dataset)
    archive = Path(shutil.make_archive(str(folder / stem), "zip", folder, stem))
    shutil.rmtree(folder / stem)
    return archive


def read_image_bytes(source: Path) -> bytes:
    """An imported image's bytes, or one line on why it cannot be read."""
    try:
        return source.read_bytes()
    except OSError as err:
        raise Invalid(f"image {source.name} of the dataset cannot be read ({err.strerror}); was it moved?") from None


def _copy_by_content(source: Path, folder: Path) -> str:
    data = read_image_bytes(source)
    name = hashlib.sha256(data).hexdigest()[:16] + source.suffix.lower()
    target = folder / name
    if not target.exists():
        target.write_bytes(data)
    return f"images/{name}"


# ---------------------------------------------------------------- CSV

def _iter_csv(store: Store, dataset: str | None) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for item in iter_exported_items(store, dataset):
        for judgement in item.judgements:
            common = [item.dataset, item.caption_id, item.external_id, item.image_path, judgement.user,
                      judgement.submitted_at.isoformat() + "Z" if judgement.submitted_at else "",
                      judgement.time_spent_ms]
            for row in judgement_rows(item, judgement):
                writer.writerow(csv_cells(common + row))
        if buffer.tell():
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue()



def judgement_rows(item: ItemData, judgement) -> list[list]:
    """One judgement as CSV cells from `kind` on: every token; every region the annotator saw
    (`ItemData.region_seers`), labelled junk, mentioned or unmentioned as CapTokenEval's votes count
    it; every word they tied to a region (kind `tie`, the region's index in the last column)."""
    rows = [["token", i, token["text"], "", "incorrect" if i in judgement.incorrect_tokens else "correct", ""]
            for i, token in enumerate(item.tokens)]
    for i, region in enumerate(item.regions):
        if judgement not in item.region_seers(i):
            continue
        label = "junk" if i in judgement.junk_regions else \
            "mentioned" if i in judgement.mentioned_regions else "unmentioned"
        rows.append(["region", i, "", json.dumps(region["box"]), label, ""])
    rows += [["tie", token, item.tokens[token]["text"], json.dumps(item.regions[region]["box"]), "tied", region]
             for token, region in sorted(judgement.links) if region < len(item.regions) and token < len(item.tokens)]
    return rows


# ---------------------------------------------------------------- COCO

def box_rle(box: list[float], height: int, width: int) -> dict:
    from pycocotools import mask as mask_utils

    x0, y0, x1, y1 = box
    rles = mask_utils.frPyObjects([[x0, y0, x1, y0, x1, y1, x0, y1]], height, width)
    rle = mask_utils.merge(rles)
    return {"size": [height, width], "counts": rle["counts"].decode("ascii")}


def _coco_area(segmentation: dict) -> float:
    from pycocotools import mask as mask_utils

    return float(mask_utils.area({"size": segmentation["size"], "counts": segmentation["counts"].encode("ascii")}))


def _iter_coco(store: Store, dataset: str | None) -> Iterator[str]:
    yield '{"info": {"description": "capscope region annotations"}, "categories": '
    yield json.dumps(COCO_CATEGORIES) + ', "images": ['
    first = True
    for item in iter_exported_items(store, dataset):
        image = {"id": item.caption_id, "file_name": item.image_path, "width": item.width,
                 "height": item.height, "caption": item.text, "item_id": item.external_id,
                 "dataset": item.dataset}
        yield ("" if first else ", ") + json.dumps(image, ensure_ascii=False)
        first = False
    yield '], "annotations": ['
    first, next_id = True, 1
    for item in iter_exported_items(store, dataset):
        for i, region in enumerate(item.regions):
            yield ("" if first else ", ") + json.dumps(_coco_annotation(item, i, region, next_id))
            first, next_id = False, next_id + 1
    yield "]}\n"


def _coco_annotation(item: ItemData, index: int, region: dict, annotation_id: int) -> dict:
    x0, y0, x1, y1 = region["box"]
    segmentation = region["mask"] or box_rle(region["box"], item.height, item.width)
    label = item.region_label(index)
    mentioned, total = item.region_votes(index)
    return {
        "id": annotation_id, "image_id": item.caption_id,
        "category_id": {"mentioned": 1, "unmentioned": 2}.get(label, 3),
        "bbox": [x0, y0, x1 - x0, y1 - y0], "area": _coco_area(segmentation),
        "segmentation": segmentation, "iscrowd": 0,
        "region_index": index, "score": region["confidence"], "source": region["source"],
        "added_by": region["added_by"],
        "votes": {"mentioned": mentioned, "junk": item.junk_votes(index), "total": total},
        "links": [{k: link[k] for k in ("token", "votes", "total")} for link in item.link_votes()
                  if link["region"] == index],
    }
