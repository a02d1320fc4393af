"""What several tabs share: scoring whole datasets (`DatasetScores`, which
stores the rows as predictions), the admin guard of hidden tabs' endpoints,
the dataset choices, the export buttons, and the scratch folders their files
are written to."""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import shutil
import tempfile
import time
from pathlib import Path

import gradio as gr

from capscope.annotation import audit
from capscope.annotation import browse, export
from capscope.annotation.refusals import AnnotationError
from capscope.annotation.importer.predictions import import_prediction_rows
from capscope.annotation.users import get_user
from capscope.annotation.votes import iter_exported_items
from capscope.db import Store
from capscope.metrics.images import read_image
from capscope.server.scoring import Models

log = logging.getLogger(__name__)

# Gradio copies a file an event returns into its own cache as the event ends; the folder it was
# written to is only scratch, removed on a later request once it is this old (and at exit): an hour,
# longer than any export takes to write
SCRATCH_KEEP_S = 3600


@functools.cache
def _scratch_root() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="capscope-ui-")


def scratch_folder(prefix: str) -> Path:
    """A fresh folder for one request's files (an export, a plot), inside the
    process's scratch folder; folders left by earlier requests go once they are
    `SCRATCH_KEEP_S` old, so a long-running server does not fill the disk."""
    root = Path(_scratch_root().name)
    cutoff = time.time() - SCRATCH_KEEP_S
    for old in root.iterdir():
        with contextlib.suppress(FileNotFoundError):  # another request's clean-up got there first
            if old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def scratch_copy(path: str | Path) -> str:
    """A copy of a server file (already checked to lie inside the data roots)
    in a scratch folder, byte for byte, for an Image component to show and hand
    back: Gradio then serves and re-reads the copy, never the data folder
    itself, and no pixel is re-encoded on the way."""
    source = Path(path)
    target = scratch_folder("image-") / source.name
    shutil.copyfile(source, target)
    return str(target)


# Handlers that score skip Gradio's queue, one first-come line for every user, and wait in the scorer's
# own turns instead (ScoreGate: in turns by user, at most 8 a user, the rest refused with one line): one
# user keeping 20 Inspect scores queued took another's from 71 ms to 1.3 s in Gradio's queue
SCORING_EVENTS = {"queue": False}


class DatasetScores:
    """Model rows for dataset items (scored on the items' own tokens and
    regions), kept in memory and stored as predictions in the database."""

    def __init__(self, store: Store, models: Models):
        self.store, self.models = store, models
        self.rows: dict[int, dict] = {}

    def score_item(self, item) -> dict:
        """`item` is a votes.ItemData."""
        if item.caption_id not in self.rows:
            image = read_image(item.image_path)
            self.rows[item.caption_id] = self.models.score(
                image, item.text, item.references or None,
                regions=[{"box": r["box"], "mask": r.get("mask")} for r in item.regions],  # as `capscope evaluate`
                tokens=[{k: t[k] for k in ("text", "start", "end", "semantic")} for t in item.tokens])
        return self.rows[item.caption_id]

    def score_dataset(self, dataset: str | None, limit: int, progress=None) -> list[tuple[dict, dict]]:
        """[(CapTokenEval item, model row)] for up to `limit` items; predictions stored."""
        pairs = []
        for item in iter_exported_items(self.store, dataset):
            if len(pairs) >= limit:
                break
            try:
                row = self.score_item(item)
            except Exception as err:  # one unreadable image must not stop the run
                log.warning("item %s not scored: %s", item.external_id, err)
                continue
            pairs.append((export.captokeneval_row(item), row))
            if progress is not None:
                progress(len(pairs) / max(limit, 1), desc=f"scored {len(pairs)} items")
        self.store_predictions(pairs)
        return pairs

    def store_predictions(self, pairs: list[tuple[dict, dict]]) -> None:
        by_dataset: dict[str, list[dict]] = {}
        for gold, row in pairs:
            by_dataset.setdefault(gold["dataset"], []).append({**row, "id": gold["id"], "error": None})
        for dataset, rows in by_dataset.items():
            import_prediction_rows(self.store, enumerate(rows, 1), dataset)


def rounded(value):
    return None if value is None else round(float(value), 3)


def formatted(value) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def export_file(store: Store, fmt: str, dataset: str | None = None) -> str:
    """Write an export to a fresh temporary file and return its path."""
    folder = scratch_folder("export-")
    path = folder / f"{export.export_stem(dataset)}.{export.EXTENSIONS[fmt]}"
    with path.open("w", encoding="utf-8", newline="") as handle:
        export.export_to_file(store, fmt, handle, dataset or None)
    return str(path)


def benchmark_zip(store: Store, dataset: str | None = None) -> str:
    """A zip of the CapTokenEval file with its images (`export_benchmark`): a
    benchmark to hand to others; `capscope evaluate --gold` reads it unzipped."""
    folder = scratch_folder("benchmark-")
    return str(export.export_benchmark_zip(store, folder, export.export_stem(dataset), dataset or None))


def dataset_choices(store: Store) -> list[tuple[str, str]]:
    return [("all datasets", "")] + [(name, name) for name in browse.dataset_names(store)]


def is_admin(store: Store, request) -> bool:
    name = getattr(request, "username", None)
    try:
        return bool(name) and get_user(store, name).is_admin
    except AnnotationError:
        return False


def admin_only(store: Store, fn, outputs: int | None = None):
    """`fn` for admins only: the hidden tabs' endpoints stay reachable through
    the API, so every call checks the caller's role in the store. Others get
    an error, or with `outputs` (page loads) nothing changed."""
    signature = inspect.signature(fn)
    request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                annotation=gr.Request)

    def guarded(*args):
        request = args[-1] if args else None
        if not is_admin(store, request):
            if outputs is not None:
                return gr.skip() if outputs == 1 else tuple(gr.skip() for _ in range(outputs))
            raise gr.Error("This needs the admin role.")
        client = getattr(request, "client", None)
        with audit.acting_as(getattr(request, "username", None), getattr(client, "host", None)):
            return fn(*args[:-1])

    guarded.__signature__ = signature.replace(parameters=[*signature.parameters.values(), request])
    # Gradio finds event data, progress and request through type hints, not the signature
    guarded.__annotations__ = {**getattr(fn, "__annotations__", {}), "request": gr.Request}
    guarded.__name__ = getattr(fn, "__name__", "admin_call")
    return guarded


def exporter(store: Store, fmt: str):
    def export_(dataset: str | None = None) -> str:
        return export_file(store, fmt, dataset or None)
    return export_


def build_export(store: Store, c: dict, dataset=None, api: bool = True) -> None:
    """Export buttons: each writes the file and offers it for download."""
    gr.Markdown("### Export")
    with gr.Row():
        buttons = {fmt: gr.Button(f"Export {fmt}", size="sm") for fmt in export.FORMATS}
        bundle = gr.Button("Benchmark with images (.zip)", size="sm")
    c["export_file"] = gr.File(label="Export", interactive=False, height=90)
    for fmt, button in buttons.items():
        visibility = {"api_name": f"export_{fmt}"} if api else {"api_visibility": "private"}
        button.click(admin_only(store, exporter(store, fmt)), dataset, c["export_file"],
                     **visibility)
    bundle.click(admin_only(store, lambda d=None: benchmark_zip(store, d or None)), dataset, c["export_file"],
                 **({"api_name": "export_benchmark_zip"} if api else {"api_visibility": "private"}))
