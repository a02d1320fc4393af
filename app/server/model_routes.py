"""Model versions over REST (docs/formats.md §8): fine-tuning jobs and which version scores."""
from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated, Literal

from fastapi import FastAPI, Path
from pydantic import BaseModel, Field, StrictBool, StrictInt, conint

from capscope.annotation import model_versions
from capscope.db import Store
from capscope.server.auth import Admin
from capscope.server.params import ItemId
from capscope.server.training import DEFAULT_HOLDOUT


class TrainRequest(BaseModel):
    dataset: str = Field(max_length=200)
    init: Literal["active", "demo"] | conint(strict=True, ge=1, le=2**62) = "active"  # or a version's id
    minutes: float | None = Field(default=None, gt=0, le=240)
    steps: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    holdout: float = Field(default=DEFAULT_HOLDOUT, ge=0, lt=1)
    seed: StrictInt = Field(default=0, ge=0, lt=2**32)
    augment: StrictBool = Field(default=False, description="new brightness, contrast and mirroring each step")
    check_dataset: str | None = Field(default=None, max_length=200,
                                      description="another dataset whose labels are scored before and after")


class ActivateRequest(BaseModel):
    dataset: str | None = Field(default=None, max_length=200,
                                description="whose queued items to score again (default the version's own dataset)")
    rescore: bool = True


def public_version(version: dict) -> dict:
    """A model version as the API shows it (the file's name, not where it lies on the server)."""
    return {k: v for k, v in version.items() if k != "path"} | {"file": FilePath(version["path"]).name}


def add_model_routes(app: FastAPI) -> None:
    store: Store = app.state.store

    @app.get("/api/models")
    def get_models(user: Admin) -> dict:
        """The model versions, the active one (null: the default model) and the current or last training job."""
        versions = model_versions.list_versions(store)
        active = next((v["id"] for v in versions if v["active"]), None)
        return {"active": active, "versions": [public_version(v) for v in versions],
                "job": app.state.training.last(), "rescoring": app.state.activations.rescoring()}

    @app.post("/api/models/train", status_code=202)
    def train(body: TrainRequest, user: Admin) -> dict:
        """Fine-tune InfoMetIC on the dataset's labels in the background (one job at a time)."""
        job_id = app.state.training.start(body.dataset, body.init, minutes=body.minutes, steps=body.steps,
                                          holdout=body.holdout, seed=body.seed, admin=user.name,
                                          check_dataset=body.check_dataset, augment=body.augment)
        return {"job": app.state.training.job(job_id)}

    @app.get("/api/models/jobs/{job_id}")
    def get_job(job_id: Annotated[str, Path(max_length=40)], user: Admin) -> dict:
        return {"job": app.state.training.job(job_id)}

    @app.post("/api/models/jobs/{job_id}/cancel")
    def cancel_job(job_id: Annotated[str, Path(max_length=40)], user: Admin) -> dict:
        return {"job": app.state.training.cancel(job_id)}

    @app.post("/api/models/default/activate")
    def activate_default(user: Admin, body: ActivateRequest | None = None) -> dict:
        """Go back to the server's default model (kept across restarts); the queued
        items of the dataset of the version it replaces are scored again."""
        body = body or ActivateRequest()
        return app.state.activations.activate(None, body.dataset, rescore=body.rescore)

    @app.post("/api/models/{version_id}/activate")
    def activate(version_id: ItemId, user: Admin, body: ActivateRequest | None = None) -> dict:
        """Score with this version from now on (kept across restarts); its dataset's queued items are scored again."""
        body = body or ActivateRequest()
        return app.state.activations.activate(version_id, body.dataset, rescore=body.rescore)
