"""An annotator's items over REST (docs/formats.md §8): the queue, an item and its image, labels, undo, history, flags, progress."""
from __future__ import annotations

import os
from typing import Literal

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, Field, StrictInt

from capscope.annotation import browse, users, workflow
from capscope.db import Store
from capscope.server.auth import Admin, User
from capscope.server.params import ItemId, ItemQuery, MAX_INDICES


class LabelsRequest(BaseModel):
    incorrect_tokens: list[StrictInt] = Field(default_factory=list, max_length=MAX_INDICES)
    mentioned_regions: list[StrictInt] = Field(default_factory=list, max_length=MAX_INDICES)
    status: Literal["draft", "submitted", "skipped"] = "draft"
    junk_regions: list[StrictInt] | None = Field(default=None, max_length=MAX_INDICES,
                                                 description="regions that are no object (absent: unchanged)")
    links: list[tuple[StrictInt, StrictInt]] | None = Field(
        default=None, max_length=MAX_INDICES, description="[token_index, region_index] ties (absent: unchanged)")


class FlagRequest(BaseModel):
    kind: Literal["unsure", "bad_image", "bad_caption", "comment"]
    comment: str = Field(default="", max_length=workflow.MAX_COMMENT_CHARS)


def add_item_routes(app: FastAPI) -> None:
    store: Store = app.state.store
    lease = app.state.lease_seconds

    @app.get("/api/items/next", responses={204: {"description": "nothing left for this user"}})
    def next_item(user: User, dataset: str | None = Query(None, max_length=200), predictions: bool = False):
        """The next item of `dataset`, else of the dataset the user chose (PUT /api/me/dataset), else of
        any dataset, the demo world's last."""
        chosen = dataset if dataset is not None else users.annotate_dataset(store, user)
        item = workflow.next_item(store, user, dataset=chosen, lease_seconds=lease)
        if item is None:
            return Response(status_code=204)
        if predictions:
            item = workflow.get_item(store, user, item["item_id"], include_predictions=True)
        app.state.clicks.prefetch(user.name, item["image_id"], workflow.image_path(store, user, item["image_id"]),
                                  dataset=item.get("dataset"))
        return item

    @app.get("/api/items/previous", responses={204: {"description": "no earlier submitted item"}})
    def previous_item(user: User, before: ItemQuery = None):
        """The item this user submitted before `before` (default: their latest submitted one)."""
        item = workflow.previous_item(store, user, before)
        return Response(status_code=204) if item is None else item

    @app.get("/api/items")
    def list_items(user: Admin, dataset: str | None = None, status: str = "all", search: str | None = None,
                   sort: str = "id", descending: bool = False, page: int = Query(1, ge=1, le=10**9),
                   page_size: int = Query(50, ge=1, le=browse.MAX_PAGE_SIZE)) -> dict:
        return browse.list_items(store, dataset=dataset, status=status, search=search, sort=sort,
                                 descending=descending, page=page, page_size=page_size)

    @app.get("/api/items/{item_id}")
    def get_item(item_id: ItemId, user: User, predictions: bool = False, suggestions: bool = False) -> dict:
        """The item; `suggestions`: also the model's suggestions (Annotate's, app/server/suggestions.py)."""
        item = workflow.get_item(store, user, item_id, include_predictions=predictions)
        if suggestions:
            item["suggestions"] = app.state.suggestions.view(user, item)
        return item

    @app.put("/api/items/{item_id}/labels")
    def put_labels(item_id: ItemId, body: LabelsRequest, user: User) -> dict:
        return workflow.save_labels(store, user, item_id, body.incorrect_tokens, body.mentioned_regions,
                                    body.status, junk_regions=body.junk_regions, links=body.links,
                                    lease_seconds=lease)

    @app.post("/api/items/{item_id}/undo")
    def undo(item_id: ItemId, user: User) -> dict:
        return workflow.undo(store, user, item_id, lease_seconds=lease)

    @app.get("/api/items/{item_id}/history")
    def history(item_id: ItemId, user: User) -> list:
        return workflow.history(store, user, item_id)

    @app.post("/api/items/{item_id}/flags")
    def flag(item_id: ItemId, body: FlagRequest, user: User) -> dict:
        return workflow.add_flag(store, user, item_id, body.kind, body.comment)

    @app.get("/api/progress")
    def progress(user: User, dataset: str | None = None) -> dict:
        return browse.progress(store, user, dataset=dataset)

    @app.get("/api/images/{image_id}")
    def image(image_id: ItemId, user: User):
        path = workflow.image_path(store, user, image_id)
        if not os.path.isfile(path):
            raise HTTPException(404, f"image {image_id} is missing on disk")
        return FileResponse(path)
