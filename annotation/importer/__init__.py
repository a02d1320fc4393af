"""Import: a folder of images plus a captions JSONL file, or a CapTokenEval file.

Every row is checked on its own; a bad row gets a `RejectedRow` (line, id,
reason) and the rest goes on. Rows are written in batches, one transaction per
batch, so a killed import leaves only whole batches behind; running it again
skips what is already there (captions by dataset and id plus a content hash,
images by the SHA-256 of their bytes) and adds the rest.

This package's entry is the public one and the batching loop; the work is split by concern:
`rows` (reading and checking rows), `images` (image files), `regions` (regions
given or proposed), `writes` (writing to the database), `problems` (the
report of bad rows), `predictions` (a `capscope score` output as pre-annotations).
The file formats are in docs/formats.md.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from capscope.annotation import audit
from capscope.annotation.refusals import Invalid
from capscope.annotation.importer.image_files import (
    ImageFile, decode_image, hash_image_file, resolve_image_path,
)
from capscope.annotation.importer.predictions import import_predictions
from capscope.annotation.importer.row_regions import checked_regions, make_proposer, propose_regions
from capscope.annotation.importer.problems import ImportReport, RejectedRow, RowProblem
from capscope.annotation.importer.rows import (
    REGION_LABELS, TOKEN_LABELS, PreparedRow, checked_tokens, finish_row, prepare_row, read_jsonl,
    row_id_for_report, tokenize,
)
from capscope.annotation.importer.writes import known_state, set_annotators_needed, write_rows
from capscope.annotation.uncertainty import token_uncertainty
from capscope.db import Store
from capscope.common.paths import name_problem
from capscope.metrics.regions import mask_to_rle

__all__ = [
    "ImportOptions", "ImportReport", "RejectedRow", "RowProblem", "Invalid", "import_captions",
    "import_captokeneval", "import_predictions", "token_uncertainty", "read_jsonl", "prepare_row",
    "finish_row", "PreparedRow", "checked_tokens", "checked_regions", "tokenize", "mask_to_rle",
    "ImageFile", "resolve_image_path", "hash_image_file", "decode_image",
    "TOKEN_LABELS", "REGION_LABELS",
]


log = logging.getLogger(__name__)

# What checking one row may raise beyond RowProblem when a field has a type no check foresaw:
# caught per row (logged with its traceback), so that an import never stops half way.
ROW_FAILURES = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, OSError, RecursionError)


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
    """Import a CapTokenEval file (docs/formats.md): its tokens and regions as they
    are, its labels and votes as gold. Images are relative to the file's folder
    unless `images_dir` is given."""
    path = Path(path)
    return _import(store, path, Path(images_dir) if images_dir else path.parent, options, captokeneval=True)


def _check_options(options: ImportOptions) -> None:
    if not 0 <= options.annotators_per_item <= 100:
        raise Invalid("--annotators-per-item must be between 0 and 100")
    problem = name_problem(options.dataset, "dataset name")
    if problem:
        raise Invalid(problem)
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
    proposer = make_proposer(options.regions)
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
    audit.record(store, "import", target=options.dataset, details={
        "file": path.name, "kind": "captokeneval" if captokeneval else "captions", "added": report.added,
        "errors": len(report.errors)})
    if report.gold_added:
        audit.record(store, "gold written", target=options.dataset, details={"method": "import",
                                                                             "items": report.gold_added})
    return report


def _prepare_or_report(line, obj, base, seen, report, captokeneval) -> PreparedRow | None:
    if isinstance(obj, RejectedRow):
        report.errors.append(obj)
        return None
    try:
        row = prepare_row(line, obj, base, captokeneval=captokeneval)
    except RowProblem as err:
        report.errors.append(RejectedRow(line, row_id_for_report(obj), str(err)))
        return None
    except ROW_FAILURES as err:
        report.errors.append(_unforeseen(line, row_id_for_report(obj), err))
        return None
    if row.external_id in seen:
        report.errors.append(RejectedRow(line, row.external_id, f"duplicate id (first on line {seen[row.external_id]})"))
        return None
    seen[row.external_id] = line
    return row


def _import_batch(store, batch, options, proposer, report, captokeneval) -> None:
    known = known_state(store, options.dataset, [row for row, _ in batch])
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
            report.errors.append(RejectedRow(row.line, row.external_id,
                                          "id already imported with different content (caption, image or labels)"))
            continue
        try:
            finish_row(row, captokeneval=captokeneval, obj=obj)
        except RowProblem as err:
            report.errors.append(RejectedRow(row.line, row.external_id, str(err)))
            continue
        except ROW_FAILURES as err:
            report.errors.append(_unforeseen(row.line, row.external_id, err))
            continue
        todo.append(row)
    if renumbered:
        store.run_write(lambda s: set_annotators_needed(s, options.dataset, options.annotators_per_item, renumbered))
        report.updated += len(renumbered)
    propose_regions(todo, known["images_with_regions"], proposer, options.max_regions, report)
    if not todo:
        return
    write = partial(write_rows, rows=todo, dataset_name=options.dataset,
                    annotators_needed=options.annotators_per_item, report=report)
    try:
        store.run_write(write)
    except IntegrityError:
        # another import wrote the same image or caption meanwhile: the retry sees it
        store.run_write(write)


def _unforeseen(line: int, ident: str | None, err: Exception) -> RejectedRow:
    """A row error for a failure no check foresaw; its traceback goes to the log, not the report."""
    log.warning("import line %d: %s", line, type(err).__name__, exc_info=err)
    return RejectedRow(line, ident, f"a field of this row has a type or value that cannot be read ({type(err).__name__})")
