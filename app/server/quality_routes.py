"""Label quality over REST (docs/formats.md §11): control items and each
dataset's control rate, each annotator's quality, and gold by a consensus
method. Admins only; nothing here is ever shown to an annotator."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from capscope.annotation import agreement, controls, release
from capscope.server.params import DatasetName, ItemId



class ControlRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    control: StrictBool


class ControlsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rate: float | None = Field(default=None, description=f"0 to {controls.MAX_CONTROL_RATE}: the share of handed-out "
                                                         "items that are controls")
    show_answers: StrictBool | None = Field(default=None, description="show an annotator a control's gold once "
                                                                       "they submit it")
    min_accuracy: float | None = Field(default=None, description="flag annotators whose control accuracy is below "
                                                                 "this (0 to 1)")
    clear_min_accuracy: StrictBool = Field(default=False, description="flag nobody")


class ReleaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(max_length=64)
    licence: str | None = Field(default=None, max_length=release.MAX_TEXT_CHARS)
    citation: str | None = Field(default=None, max_length=release.MAX_TEXT_CHARS)
    guidelines: str | None = Field(default=None, max_length=release.MAX_TEXT_CHARS)


class GoldMethodRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: Literal["majority", "dawid-skene", "model-aware"] = "majority"
    min_judgements: int = Field(default=2, ge=1, le=1000)
    replace_adjudicated: StrictBool = False


def quality_router(admin_user) -> APIRouter:
    """The routes, each behind `admin_user` (the API's admin dependency)."""
    router = APIRouter(dependencies=[Depends(admin_user)])

    @router.put("/api/items/{item_id}/control")
    def put_control(item_id: ItemId, body: ControlRequest, request: Request) -> dict:
        """Mark an item with gold as a control (or unmark it): {"item_id", "control"}."""
        return controls.set_control(_store(request), item_id, body.control)

    @router.get("/api/datasets/{name}/controls")
    def get_controls(name: DatasetName, request: Request) -> dict:
        """The dataset's control settings: {"dataset", "rate", "show_answers", "min_accuracy"}."""
        return controls.control_settings(_store(request), name)

    @router.put("/api/datasets/{name}/controls")
    def put_controls(name: DatasetName, body: ControlsRequest, request: Request) -> dict:
        """Set any of the control rate, show_answers and min_accuracy; answers the settings."""
        given = {key: value for key, value in (("rate", body.rate), ("show_answers", body.show_answers),
                                                ("min_accuracy", body.min_accuracy)) if value is not None}
        if body.clear_min_accuracy:
            given["min_accuracy"] = None
        return controls.set_control_settings(_store(request), name, **given)

    @router.get("/api/datasets/{name}/annotators")
    def get_annotators(name: DatasetName, request: Request) -> list[dict]:
        """Per annotator: judgements, controls, control_accuracy, control_interval (95%, Wilson),
        quality (the Dawid-Skene estimate), agreement_with_consensus, mean_time_s, flagged."""
        return controls.annotator_quality(_store(request), name)

    @router.post("/api/datasets/{name}/gold")
    def post_gold(name: DatasetName, body: GoldMethodRequest, request: Request) -> dict:
        """Gold by `method` on every item with at least `min_judgements` judgements: {"written", "method"}."""
        return agreement.gold_by_consensus(_store(request), name, body.method, min_judgements=body.min_judgements,
                                           replace_adjudicated=body.replace_adjudicated,
                                           token_rule=request.app.state.models.token_rule)

    @router.get("/api/releases")
    def get_releases(request: Request, dataset: Annotated[str | None, Query(max_length=200)] = None) -> list[dict]:
        """Every recorded release: {"dataset", "version", "created_at", "created_by", "method", "items", "files"}."""
        return release.list_releases(_store(request), dataset)

    @router.post("/api/datasets/{name}/releases", status_code=201)
    def post_release(name: DatasetName, body: ReleaseRequest, request: Request, user=Depends(admin_user)) -> dict:
        """Freeze the dataset as release `version` in the server's data folder (releases/NAME-VERSION):
        its metadata.json; a version that exists: 422, nothing written."""
        metadata, _ = release.make_server_release(_store(request), name, body.version, licence=body.licence,
                                                  citation=body.citation, guidelines=body.guidelines,
                                                  actor=user.name)
        return metadata

    return router


def _store(request: Request):
    return request.app.state.store
