"""Import: a folder of images plus a captions JSONL file, or a CapTokenEval file.

Every row is checked on its own; a bad row gets a `RowError` (line, id,
reason) and the rest goes on. Rows are written in batches, one transaction per
batch, so a killed import leaves only whole batches behind; running it again
skips what is already there (captions by dataset and id plus a content hash,
images by the SHA-256 of their bytes) and adds the rest.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from capscope.annotation.errors import Invalid
from capscope.annotation.gold import write_gold
from capscope.db import Caption, Dataset, Image, Prediction, Region, Store, Token
from capscope.db.models import utcnow

log = logging.getLogger(__name__)

MAX_IMAGE_BYTES = 50 * 2**20
MAX_IMAGE_PIXELS = 60_000_000
MAX_CAPTION_CHARS = 1000  # the scoring engine's limit as well
MAX_ID_CHARS = 200
MAX_LINE_BYTES = 8 * 2**20
MAX_REGIONS = 100
MAX_REFERENCES = 50
TOKEN_LABELS = ("correct", "incorrect")
REGION_LABELS = ("mentioned", "unmentioned")


class RowProblem(ValueError):
    """Why one input row cannot be imported."""


@dataclass
class RowError:
    line: int
    id: str | None
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f" (id {self.id!r})" if self.id is not None else "")
        return f"{where}: {self.reason}"


@dataclass
class ImportReport:
    added: int = 0
    unchanged: int = 0
    updated: int = 0
    images_added: int = 0
    regions_proposed: int = 0
    errors: list[RowError] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, "
            f"{len(self.errors)} rejected; {self.images_added} new images, "
            f"regions proposed for {self.regions_proposed}"
        )


@dataclass
class ImageFile:
    path: Path
    sha256: str
    n_bytes: int
    width: int = 0
    height: int = 0
    pil: object = None  # PIL image, decoded only when needed


@dataclass
class PreparedRow:
    line: int
    external_id: str
    text: str
    references: list[str]
    model: str | None
    image: ImageFile
    regions: list[dict] | None  # from the file; None = propose / keep the image's own
    tokens: list[dict] | None  # from the file; None = tokenise
    gold: dict | None = None
    content_hash: str = ""


# ---------------------------------------------------------------- reading rows

def read_jsonl(stream: IO[bytes]) -> Iterator[tuple[int, dict | RowError]]:
    """(line number, object) for each non-blank line, or a RowError for a line
    that is not UTF-8, not JSON, or not a JSON object."""
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        if len(raw) > MAX_LINE_BYTES:
            yield number, RowError(number, None, f"line is {len(raw)} bytes (limit {MAX_LINE_BYTES})")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            yield number, RowError(number, None, f"not UTF-8 (byte {err.start})")
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            yield number, RowError(number, None, f"malformed JSON: {err.msg} at column {err.colno}")
            continue
        if not isinstance(obj, dict):
            yield number, RowError(number, None, f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield number, obj


def _row_id(obj: dict) -> str:
    value = obj.get("id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RowProblem("missing field 'id' (a string)")
    value = str(value)
    if not value.strip() or len(value) > MAX_ID_CHARS:
        raise RowProblem(f"id must be 1-{MAX_ID_CHARS} characters")
    return value


def _caption_text(obj: dict) -> str:
    text = obj.get("caption")
    if not isinstance(text, str):
        raise RowProblem("missing field 'caption' (a string)")
    if not text.strip():
        raise RowProblem("caption is empty")
    if len(text) > MAX_CAPTION_CHARS:
        raise RowProblem(f"caption has {len(text)} characters (limit {MAX_CAPTION_CHARS})")
    return text


def _references(obj: dict) -> list[str]:
    refs = obj.get("references") or []
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise RowProblem("'references' must be a list of strings")
    if len(refs) > MAX_REFERENCES or any(len(r) > MAX_CAPTION_CHARS for r in refs):
        raise RowProblem(f"at most {MAX_REFERENCES} references of at most {MAX_CAPTION_CHARS} characters")
    return refs


def _model_name(obj: dict) -> str | None:
    model = obj.get("model")
    if model is None:
        return None
    if not isinstance(model, str) or len(model) > 200:
        raise RowProblem("'model' must be a string of at most 200 characters")
    return model


# ---------------------------------------------------------------- images

def resolve_image_path(name, base: Path) -> Path:
    """The image file `name` inside `base`; RowProblem when it leaves `base`."""
    if not isinstance(name, str) or not name.strip():
        raise RowProblem("missing field 'image' (a path)")
    if "\x00" in name:
        raise RowProblem("image path contains a NUL byte")
    root = base.resolve()
    path = (root / name).resolve()  # follows symbolic links too
    if not path.is_relative_to(root):
        raise RowProblem(f"image {name!r} is outside the images folder")
    if not path.is_file():
        raise RowProblem(f"image {name!r} not found")
    return path


def hash_image_file(path: Path) -> ImageFile:
    n_bytes = path.stat().st_size
    if n_bytes > MAX_IMAGE_BYTES:
        raise RowProblem(f"image is {n_bytes} bytes (limit {MAX_IMAGE_BYTES})")
    data = path.read_bytes()
    return ImageFile(path, hashlib.sha256(data).hexdigest(), len(data))


def decode_image(image: ImageFile) -> None:
    """Decode the whole file (a truncated or corrupt one fails here), fill size and pixels."""
    from PIL import Image as PILImage

    try:
        with PILImage.open(image.path) as probe:
            width, height = probe.size
            if width * height > MAX_IMAGE_PIXELS:
                raise RowProblem(f"image is {width}x{height} pixels (limit {MAX_IMAGE_PIXELS})")
            probe.verify()
        with PILImage.open(image.path) as pil:
            pil.load()
            image.pil = pil.convert("RGB")
    except RowProblem:
        raise
    except (OSError, SyntaxError, ValueError, PILImage.DecompressionBombError) as err:
        raise RowProblem(f"image {image.path.name!r} cannot be decoded: {err}") from None
    image.width, image.height = width, height


# ---------------------------------------------------------------- regions and tokens

def mask_to_rle(mask) -> dict:
    import numpy as np
    from pycocotools import mask as mask_utils

    rle = mask_utils.encode(np.asfortranarray(np.asarray(mask, dtype=np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def _checked_mask(mask, width: int, height: int) -> dict | None:
    if mask is None:
        return None
    from pycocotools import mask as mask_utils

    if not isinstance(mask, dict) or not isinstance(mask.get("size"), list) or "counts" not in mask:
        raise RowProblem("a region mask must be COCO RLE {'size': [h, w], 'counts': str}")
    if list(mask["size"]) != [height, width]:
        raise RowProblem(f"mask size {mask['size']} differs from the image's [{height}, {width}]")
    counts = mask["counts"]
    try:
        if isinstance(counts, list):
            rle = mask_utils.frPyObjects({"size": [height, width], "counts": counts}, height, width)
        elif isinstance(counts, str):
            rle = {"size": [height, width], "counts": counts.encode("ascii")}
        else:
            raise TypeError
        decoded = mask_utils.decode(rle)
    except (TypeError, ValueError, UnicodeEncodeError):
        raise RowProblem("a region mask has malformed RLE counts") from None
    if decoded.shape != (height, width):
        raise RowProblem("a region mask does not decode to the image size")
    return {"size": [height, width], "counts": rle["counts"].decode("ascii")}


def checked_regions(raw, width: int, height: int) -> list[dict]:
    """Regions from a file: boxes clipped into the image, masks checked RLE."""
    from capscope.metrics.regions import clip_box

    if not isinstance(raw, list):
        raise RowProblem("'regions' must be a list")
    if len(raw) > MAX_REGIONS:
        raise RowProblem(f"{len(raw)} regions (limit {MAX_REGIONS})")
    regions = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise RowProblem(f"region {i} must be an object with a 'box'")
        try:
            box = clip_box(item.get("box"), width, height)
        except ValueError as err:
            raise RowProblem(f"region {i}: {err}") from None
        confidence = item.get("confidence")
        if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, (int, float))
                                      or not math.isfinite(confidence)):
            raise RowProblem(f"region {i}: confidence must be a number")
        regions.append({
            "box": [round(v, 2) for v in box],
            "mask": _checked_mask(item.get("mask"), width, height),
            "confidence": confidence,
            "source": str(item.get("source") or "file")[:40],
        })
    return regions


def checked_tokens(raw, caption: str) -> list[dict]:
    if not isinstance(raw, list):
        raise RowProblem("'tokens' must be a list")
    tokens = []
    for i, tok in enumerate(raw):
        if not isinstance(tok, dict):
            raise RowProblem(f"token {i} must be an object")
        start, end, text = tok.get("start"), tok.get("end"), tok.get("text")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) or not isinstance(text, str):
            raise RowProblem(f"token {i} needs integer 'start', 'end' and a string 'text'")
        if not 0 <= start < end <= len(caption) or caption[start:end] != text:
            raise RowProblem(f"token {i} {text!r} does not match caption[{start}:{end}]")
        tokens.append({"text": text, "start": start, "end": end, "semantic": bool(tok.get("semantic", True))})
    return tokens


def tokenize(caption: str) -> list[dict]:
    from capscope.metrics.text import tokenize as engine_tokenize

    return [t.to_dict() for t in engine_tokenize(caption)]


def _gold_from_row(obj: dict, n_regions: int) -> dict | None:
    """Labels and votes of a CapTokenEval row, or None when it carries none."""
    tokens, regions = obj.get("tokens") or [], obj.get("regions") or []
    token_labels = [_checked_label(t.get("label"), TOKEN_LABELS, f"token {i}") for i, t in enumerate(tokens)]
    region_labels = [_checked_label(r.get("label"), REGION_LABELS, f"region {i}") for i, r in enumerate(regions)]
    token_votes = [_checked_votes(t.get("votes"), "incorrect", f"token {i}") for i, t in enumerate(tokens)]
    region_votes = [_checked_votes(r.get("votes"), "mentioned", f"region {i}") for i, r in enumerate(regions)]
    if len(region_labels) != n_regions:
        raise RowProblem("region labels do not match the regions")
    if not any(token_labels + region_labels + token_votes + region_votes):
        return None
    return {
        "token_labels": token_labels,
        "region_labels": region_labels,
        "token_votes": token_votes if any(token_votes) else None,
        "region_votes": region_votes if any(region_votes) else None,
    }


def _checked_label(label, allowed: tuple[str, ...], where: str) -> str | None:
    if label is not None and label not in allowed:
        raise RowProblem(f"{where}: label must be one of {', '.join(allowed)} or null, got {label!r}")
    return label


def _checked_votes(votes, key: str, where: str) -> dict | None:
    if votes is None:
        return None
    ok = isinstance(votes, dict) and all(
        isinstance(votes.get(k), int) and not isinstance(votes.get(k), bool) for k in (key, "total")
    )
    if not ok or not 0 <= votes[key] <= votes["total"]:
        raise RowProblem(f"{where}: votes must be {{'{key}': int, 'total': int}} with {key} <= total")
    return {key: votes[key], "total": votes["total"]}


# ---------------------------------------------------------------- preparing a row

def prepare_row(line: int, obj: dict, base: Path, *, captokeneval: bool) -> PreparedRow:
    """Check one row and hash its image (no decoding yet); RowProblem on bad input."""
    external_id = _row_id(obj)
    text = _caption_text(obj)
    refs = _references(obj)
    model = _model_name(obj)
    image = hash_image_file(resolve_image_path(obj.get("image"), base))
    if captokeneval and "tokens" not in obj:
        raise RowProblem("missing field 'tokens' (a CapTokenEval row)")
    tokens = checked_tokens(obj["tokens"], text) if obj.get("tokens") is not None else None
    raw_regions = obj.get("regions")
    row = PreparedRow(line, external_id, text, refs, model, image, None, tokens)
    row.content_hash = _content_hash(obj, image.sha256)
    if raw_regions is not None:
        row.regions = raw_regions  # checked once the image size is known
    return row


def _content_hash(obj: dict, image_sha: str) -> str:
    keep = {k: obj.get(k) for k in ("id", "caption", "references", "model", "tokens", "regions")}
    keep["image_sha256"] = image_sha
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


def finish_row(row: PreparedRow, *, captokeneval: bool, obj: dict) -> None:
    """Decode the image and check what depends on its size (regions, masks, gold)."""
    decode_image(row.image)
    if row.regions is not None:
        row.regions = checked_regions(row.regions, row.image.width, row.image.height)
    if captokeneval:
        row.gold = _gold_from_row(obj, len(row.regions or []))
        if row.gold and len(row.gold["token_labels"]) != len(row.tokens or []):
            raise RowProblem("token labels do not match the tokens")
    if row.tokens is None:
        row.tokens = tokenize(row.text)


# ---------------------------------------------------------------- importing

@dataclass
class ImportOptions:
    dataset: str = "default"
    annotators_per_item: int = 3
    regions: str = "classic"  # a proposer name, or "none"
    max_regions: int = 20
    batch_size: int = 16
    progress: bool = True


def import_captions(store: Store, captions_file: Path, images_dir: Path, options: ImportOptions) -> ImportReport:
    """Import a captions JSONL file (`{"id", "image", "caption", "references"?,
    "model"?, "regions"?, "tokens"?}` per line) whose images live in `images_dir`."""
    return _import(store, Path(captions_file), Path(images_dir), options, captokeneval=False)


def import_captokeneval(store: Store, path: Path, options: ImportOptions, images_dir: Path | None = None) -> ImportReport:
    """Import a CapTokenEval file (CONTRACTS §3): its tokens and regions as they
    are, its labels and votes as gold. Images are relative to the file's folder
    unless `images_dir` is given."""
    path = Path(path)
    return _import(store, path, Path(images_dir) if images_dir else path.parent, options, captokeneval=True)


def _check_options(options: ImportOptions) -> None:
    if not 0 <= options.annotators_per_item <= 100:
        raise Invalid("--annotators-per-item must be between 0 and 100")
    if not options.dataset or len(options.dataset) > 200:
        raise Invalid("dataset name must be 1-200 characters")
    if options.regions != "none":
        from capscope.metrics.regions import PROPOSERS

        if options.regions not in PROPOSERS:
            raise Invalid(f"unknown region source {options.regions!r}; choose from none, {', '.join(PROPOSERS)}")


def _import(store: Store, path: Path, base: Path, options: ImportOptions, *, captokeneval: bool) -> ImportReport:
    from tqdm import tqdm

    _check_options(options)
    if not path.is_file():
        raise Invalid(f"{path} not found")
    if not base.is_dir():
        raise Invalid(f"images folder {base} not found")
    report = ImportReport()
    proposer = _make_proposer(options.regions)
    with path.open("rb") as counting:
        total = sum(1 for line in counting if line.strip())
    seen: dict[str, int] = {}
    batch: list[tuple[PreparedRow, dict]] = []
    with path.open("rb") as stream, tqdm(total=total, unit="row", disable=not options.progress,
                                         desc="import") as bar:
        for line, obj in read_jsonl(stream):
            bar.update(1)
            row = _prepare_or_report(line, obj, base, seen, report, captokeneval)
            if row is not None:
                batch.append((row, obj))
            if len(batch) >= options.batch_size:
                _import_batch(store, batch, options, proposer, report, captokeneval)
                batch = []
        if batch:
            _import_batch(store, batch, options, proposer, report, captokeneval)
    return report


def _prepare_or_report(line, obj, base, seen, report, captokeneval) -> PreparedRow | None:
    if isinstance(obj, RowError):
        report.errors.append(obj)
        return None
    try:
        row = prepare_row(line, obj, base, captokeneval=captokeneval)
    except RowProblem as err:
        ident = obj.get("id") if isinstance(obj.get("id"), (str, int)) else None
        report.errors.append(RowError(line, None if ident is None else str(ident)[:MAX_ID_CHARS], str(err)))
        return None
    if row.external_id in seen:
        report.errors.append(RowError(line, row.external_id, f"duplicate id (first on line {seen[row.external_id]})"))
        return None
    seen[row.external_id] = line
    return row


def _make_proposer(name: str):
    if name == "none":
        return None
    from capscope.metrics.regions import PROPOSERS

    return PROPOSERS[name]()


def _import_batch(store, batch, options, proposer, report, captokeneval) -> None:
    known = _known_state(store, options.dataset, batch)
    todo: list[PreparedRow] = []
    renumbered: list[str] = []
    for row, obj in batch:
        existing_hash = known["captions"].get(row.external_id)
        if existing_hash == row.content_hash:
            if known["needed"][row.external_id] != options.annotators_per_item:
                renumbered.append(row.external_id)
            else:
                report.unchanged += 1
            continue
        if existing_hash is not None:
            report.errors.append(RowError(row.line, row.external_id,
                                          "id already imported with different content (caption, image or labels)"))
            continue
        try:
            finish_row(row, captokeneval=captokeneval, obj=obj)
        except RowProblem as err:
            report.errors.append(RowError(row.line, row.external_id, str(err)))
            continue
        todo.append(row)
    if renumbered:
        store.run_write(lambda s: _set_annotators_needed(s, options, renumbered))
        report.updated += len(renumbered)
    _propose_regions(todo, known["images_with_regions"], proposer, options.max_regions, report)
    if not todo:
        return
    try:
        store.run_write(lambda s: _write_rows(s, todo, options, report, captokeneval))
    except IntegrityError:
        # another import wrote the same image or caption meanwhile: the retry sees it
        store.run_write(lambda s: _write_rows(s, todo, options, report, captokeneval))


def _set_annotators_needed(session, options: ImportOptions, external_ids: list[str]) -> None:
    dataset_id = select(Dataset.id).where(Dataset.name == options.dataset).scalar_subquery()
    session.execute(
        update(Caption)
        .where(Caption.dataset_id == dataset_id, Caption.external_id.in_(external_ids))
        .values(annotators_needed=options.annotators_per_item)
    )


def _known_state(store: Store, dataset: str, batch) -> dict:
    ids = [row.external_id for row, _ in batch]
    hashes = [row.image.sha256 for row, _ in batch]
    with store.read() as session:
        rows = session.execute(
            select(Caption.external_id, Caption.content_hash, Caption.annotators_needed)
            .join(Dataset, Caption.dataset_id == Dataset.id)
            .where(Dataset.name == dataset, Caption.external_id.in_(ids))
        ).all()
        captions = {ext: content for ext, content, _ in rows}
        needed = {ext: n for ext, _, n in rows}
        with_regions = set(session.scalars(
            select(Image.sha256).where(Image.sha256.in_(hashes), Image.regions_source != "none")
        ))
    return {"captions": captions, "needed": needed, "images_with_regions": with_regions}


def _propose_regions(rows: list[PreparedRow], done: set[str], proposer, max_regions: int, report) -> None:
    """Regions from the engine for images that have none yet, one per distinct image."""
    if proposer is None:
        return
    from capscope.metrics.regions import select_regions

    proposed: dict[str, list[dict]] = {}
    for row in rows:
        sha = row.image.sha256
        if row.regions is not None or sha in done:
            continue
        if sha not in proposed:
            kept = select_regions(proposer.propose(row.image.pil), max_regions)
            proposed[sha] = [{
                "box": [round(float(v), 2) for v in region.box],
                "mask": None if region.mask is None else mask_to_rle(region.mask),
                "confidence": region.confidence,
                "source": region.source,
            } for region in kept]
            report.regions_proposed += 1
        row.regions = proposed[sha]


def _write_rows(session, rows: list[PreparedRow], options: ImportOptions, report: ImportReport, captokeneval) -> None:
    dataset = _get_or_create_dataset(session, options.dataset)
    counts = {"added": 0, "images": 0}
    errors: list[RowError] = []
    for row in rows:
        if session.scalar(select(Caption.id).where(Caption.dataset_id == dataset.id,
                                                   Caption.external_id == row.external_id)):
            errors.append(RowError(row.line, row.external_id, "id was imported meanwhile by another run"))
            continue
        image, created = _get_or_create_image(session, row)
        counts["images"] += created
        problem = _attach_regions(session, image, row)
        if problem:
            errors.append(RowError(row.line, row.external_id, problem))
            continue
        _add_caption(session, dataset, image, row, options)
        counts["added"] += 1
    # counted only once the transaction is sure to commit (a retry redoes them)
    report.added += counts["added"]
    report.images_added += counts["images"]
    report.errors.extend(errors)


def _get_or_create_dataset(session, name: str) -> Dataset:
    dataset = session.scalar(select(Dataset).where(Dataset.name == name))
    if dataset is None:
        dataset = Dataset(name=name)
        session.add(dataset)
        session.flush()
    return dataset


def _get_or_create_image(session, row: PreparedRow) -> tuple[Image, bool]:
    image = session.scalar(select(Image).where(Image.sha256 == row.image.sha256))
    if image is not None:
        return image, False
    image = Image(sha256=row.image.sha256, path=str(row.image.path), width=row.image.width,
                  height=row.image.height, n_bytes=row.image.n_bytes, regions_source="none")
    session.add(image)
    session.flush()
    return image, True


def _region_key(regions) -> list:
    return [(tuple(round(v, 2) for v in r["box"]), (r.get("mask") or {}).get("counts")) for r in regions]


def _attach_regions(session, image: Image, row: PreparedRow) -> str:
    """Give the image the row's regions; '' when fine, else why the row clashes."""
    if row.regions is None:
        return ""
    existing = image.regions
    if image.regions_source != "none":
        stored = [{"box": r.box, "mask": r.mask_rle} for r in existing]
        if _region_key(stored) != _region_key(row.regions):
            return "this image already has other regions (from an earlier row or import)"
        return ""
    for index, region in enumerate(row.regions):
        x0, y0, x1, y1 = region["box"]
        session.add(Region(image_id=image.id, index=index, source=region["source"], x0=x0, y0=y0, x1=x1, y1=y1,
                           mask_rle=region["mask"], confidence=region["confidence"]))
    image.regions_source = row.regions[0]["source"] if row.regions else "empty"
    session.flush()
    session.expire(image, ["regions"])
    return ""


def _add_caption(session, dataset: Dataset, image: Image, row: PreparedRow, options: ImportOptions) -> None:
    caption = Caption(dataset_id=dataset.id, external_id=row.external_id, image_id=image.id, text=row.text,
                      model=row.model, references=row.references, content_hash=row.content_hash,
                      annotators_needed=options.annotators_per_item)
    session.add(caption)
    session.flush()
    session.add_all(Token(caption_id=caption.id, index=i, **tok) for i, tok in enumerate(row.tokens))
    if row.gold:
        gold = write_gold(session, caption.id, row.gold["token_labels"], row.gold["region_labels"], "import")
        gold.token_votes, gold.region_votes = row.gold.get("token_votes"), row.gold.get("region_votes")


# ---------------------------------------------------------------- model predictions

def import_predictions(store: Store, path: Path, dataset: str = "default", model_version: str | None = None) -> ImportReport:
    """Store the metrics of a `capscope score` output file as pre-annotations
    of the dataset's captions (matched by id). Re-importing replaces them."""
    report = ImportReport()
    rows: list[tuple[int, str, dict, str]] = []
    with Path(path).open("rb") as stream:
        for line, obj in read_jsonl(stream):
            if isinstance(obj, RowError):
                report.errors.append(obj)
                continue
            metrics = obj.get("metrics")
            if obj.get("error") or not isinstance(metrics, dict):
                report.errors.append(RowError(line, str(obj.get("id")), "row has no metrics"))
                continue
            version = model_version or json.dumps(obj.get("model") or {}, sort_keys=True)[:200]
            rows.append((line, str(obj.get("id")), metrics, version))
    for start in range(0, len(rows), 200):
        store.run_write(lambda s, chunk=rows[start:start + 200]: _write_predictions(s, dataset, chunk, report))
    return report


def _write_predictions(session, dataset: str, rows, report: ImportReport) -> None:
    ids = {ext: cid for ext, cid in session.execute(
        select(Caption.external_id, Caption.id).join(Dataset, Caption.dataset_id == Dataset.id)
        .where(Dataset.name == dataset, Caption.external_id.in_([r[1] for r in rows]))
    )}
    for line, external_id, metrics, version in rows:
        if external_id not in ids:
            report.errors.append(RowError(line, external_id, f"no caption with this id in dataset {dataset!r}"))
            continue
        for metric, result in metrics.items():
            _upsert_prediction(session, ids[external_id], str(metric)[:50], version, result or {})
        report.added += 1


def _upsert_prediction(session, caption_id: int, metric: str, version: str, result: dict) -> None:
    prediction = session.scalar(select(Prediction).where(
        Prediction.caption_id == caption_id, Prediction.metric == metric, Prediction.model_version == version))
    if prediction is None:
        prediction = Prediction(caption_id=caption_id, metric=metric, model_version=version)
        session.add(prediction)
    prediction.scores = result.get("scores") or {}
    prediction.token_scores = result.get("token_scores") or []
    prediction.region_scores = result.get("region_scores") or []
    prediction.uncertainty = token_uncertainty(prediction.token_scores)
    prediction.created_at = utcnow()


def token_uncertainty(scores: list, threshold: float = 0.1) -> float | None:
    """Mean closeness of the token scores to the decision threshold (1 = on it)."""
    values = [s for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]
    if not values:
        return None
    return sum(math.exp(-abs(s - threshold) * 10) for s in values) / len(values)


def image_bytes_to_pil(data: bytes):
    """Decode image bytes completely (used by the API's score call)."""
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(data)) as probe:
        probe.verify()
    pil = PILImage.open(io.BytesIO(data))
    pil.load()
    return pil
