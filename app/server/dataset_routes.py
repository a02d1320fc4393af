"""What admins ask of a dataset over REST (docs/formats.md §8): gold, the queue order, agreement, exports, a diagnosis."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path as FilePath
from typing import Annotated, Literal

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, Field, StrictInt
from starlette.background import BackgroundTask

from capscope.annotation import agreement, export, gold, queue
from capscope.common import limits
from capscope.common.jsonl import JsonTextError, loads_limited
from capscope.db import Store
from capscope.server.auth import Admin
from capscope.server.data_roots import OutsideDataRoots
from capscope.server.params import ItemId, MAX_INDICES


class GoldRequest(BaseModel):
    token_labels: list[Literal["correct", "incorrect"] | None] = Field(max_length=MAX_INDICES)
    region_labels: list[Literal["mentioned", "unmentioned"] | None] = Field(max_length=MAX_INDICES)


class QueueRequest(BaseModel):
    order: str = Field(max_length=50, description=f"one of {', '.join(queue.ORDERS)}")
    seed: StrictInt | None = Field(default=None, description="the random order's seed (default 0)")
    model_version: str | None = Field(default=None, max_length=200,
                                      description="uncertainty: this model version's predictions (default the newest)")


def add_dataset_routes(app: FastAPI) -> None:
    store: Store = app.state.store

    @app.get("/api/items/{item_id}/gold")
    def get_gold(item_id: ItemId, user: Admin) -> dict:
        labels = agreement.gold_view(store, item_id)
        if labels is None:
            raise HTTPException(404, f"item {item_id} has no gold labels")
        return labels

    @app.get("/api/items/{item_id}/gold/history")
    def get_gold_history(item_id: ItemId, user: Admin) -> list[dict]:
        """Every gold label set of the item, oldest first (imported, majority, adjudicated)."""
        return gold.gold_history(store, item_id)

    @app.put("/api/items/{item_id}/gold")
    def put_gold(item_id: ItemId, body: GoldRequest, user: Admin) -> dict:
        return agreement.adjudicate(store, user, item_id, body.token_labels, body.region_labels)

    @app.post("/api/gold/majority")
    def gold_majority(user: Admin, dataset: str | None = None, min_judgements: int = Query(2, ge=1, le=1000)) -> dict:
        return {"written": agreement.gold_from_majority(store, dataset, min_judgements=min_judgements)}

    @app.get("/api/datasets/{name}/queue")
    def get_queue(name: str, user: Admin) -> dict:
        """The dataset's queue order, seed and the item ids it hands out next."""
        return queue.queue_view(store, name)

    @app.put("/api/datasets/{name}/queue")
    def put_queue(name: str, body: QueueRequest, user: Admin) -> dict:
        """Set the dataset's queue order (and seed) and rank its items for it."""
        seed = 0 if body.seed is None else body.seed
        return queue.set_queue_order(store, name, body.order, seed, body.model_version,
                                     token_rule=app.state.models.token_rule)

    @app.get("/api/agreement")
    def agreement_report(user: Admin, dataset: str | None = None, all_tokens: bool = False) -> dict:
        return agreement.agreement_report(store, dataset, semantic_only=not all_tokens)

    @app.get("/api/diagnose")
    def diagnose_summary(user: Admin, folder: Annotated[str, Query(max_length=4096)]) -> dict:
        """The summary.json `capscope diagnose --out FOLDER` wrote (docs/formats.md §12); FOLDER
        inside the server's data roots, and the file too once its links are followed (403: a
        summary.json linking elsewhere is not read). Over MAX_SUMMARY_BYTES 413; not a JSON object,
        malformed or nested deeper than MAX_JSON_DEPTH 422 with one line: never a 500."""
        try:
            named = app.state.data_roots.check(folder, "folder") / "summary.json"
        except OutsideDataRoots as err:
            raise HTTPException(403, str(err)) from None
        try:  # opened once, and what was opened is checked: no swap between a check and an open
            with app.state.data_roots.open_checked(named, "summary.json") as handle:
                data = handle.read(limits.MAX_SUMMARY_BYTES + 1)  # at most one byte past the limit
        except OutsideDataRoots:
            raise HTTPException(403, f"summary.json in {folder} links outside the server's data roots") from None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
            raise HTTPException(404, f"no summary.json in {folder}: run capscope diagnose --out {folder} first") \
                from None
        except OSError as err:  # a name too long, no permission
            raise HTTPException(404, f"summary.json in {folder} cannot be read ({err.strerror})") from None
        if len(data) > limits.MAX_SUMMARY_BYTES:
            raise HTTPException(413, f"summary.json in {folder} is over {limits.MAX_SUMMARY_BYTES // 2**20} MB")
        try:
            summary = loads_limited(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise HTTPException(422, f"summary.json in {folder} is not UTF-8 text") from None
        except JsonTextError as err:
            raise HTTPException(422, f"summary.json in {folder}: {err}") from None
        if not isinstance(summary, dict):
            raise HTTPException(422, f"summary.json in {folder} is not a JSON object")
        return summary

    @app.get("/api/export")
    def export_(user: Admin, format: str = "captokeneval", dataset: str | None = None, images: bool = False):
        """Streamed; with `images=true` (CapTokenEval only) a zip of the file and its images."""
        stem = export.export_stem(dataset)
        if images:
            if format != "captokeneval":
                raise HTTPException(422, "images=true needs format=captokeneval")
            folder = tempfile.mkdtemp(prefix="capscope-benchmark-")
            archive = export.export_benchmark_zip(store, FilePath(folder), stem, dataset)
            return FileResponse(archive, media_type="application/zip", filename=archive.name,
                                background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True))
        pieces = export.iter_export(store, format, dataset)  # raises for an unknown format before streaming
        name = f"{stem}.{export.EXTENSIONS[format]}"
        return StreamingResponse(pieces, media_type=export.FORMATS[format],
                                 headers={"Content-Disposition": f'attachment; filename="{name}"'})
