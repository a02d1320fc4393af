"""POST /api/score (docs/formats.md §8): an image and captions scored by the server's one scorer, in turns user by user."""
from __future__ import annotations

import base64
import binascii

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from capscope.common.errors import ModelUnavailable
from capscope.metrics.images import ImageError, ImageTooLarge, read_image
from capscope.metrics.text import check_caption, check_references
from capscope.server.auth import User
from capscope.server.scoring import ScoringBusy, ScoringTimeout

SCORE_FORMATS = {"PNG", "JPEG", "WEBP"}
DEFAULT_API_METRICS = ("infometic",)  # POST /api/score without `metrics`


class ScoreRequest(BaseModel):
    image: str = Field(description="base64 PNG or JPEG (a data: URL prefix is accepted)")
    caption: str
    references: list[str] | None = None
    metrics: list[str] | None = None


def known_metrics() -> tuple[str, ...] | None:
    try:
        from capscope.metrics.registry import METRIC_NAMES
    except ImportError:
        return None
    return tuple(METRIC_NAMES)


def _checked_score_request(body: ScoreRequest):
    """(PIL image, caption, references, metrics) or HTTPException 4xx."""
    names = known_metrics()
    if body.metrics is not None:
        if not body.metrics:
            raise HTTPException(422, "metrics, when given, must name at least one metric")
        unknown = [m for m in body.metrics if names is not None and m not in names]
        if unknown:
            raise HTTPException(422, f"unknown metric {unknown[0]!r}; choose from {', '.join(names)}")
    problem = check_caption(body.caption) or check_references(body.references)
    if problem:
        raise HTTPException(422, problem)
    return decode_score_image(body.image), body.caption, body.references, body.metrics


def decode_score_image(encoded: str):
    if encoded.startswith("data:"):
        encoded = encoded.partition(",")[2]
    try:
        raw = base64.b64decode("".join(encoded.split()), validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(422, "image is not valid base64") from None
    try:
        return read_image(raw, name="upload", formats=SCORE_FORMATS)
    except ImageTooLarge as err:
        raise HTTPException(413, str(err)) from None
    except ImageError as err:
        raise HTTPException(422, str(err)) from None


def add_scoring_routes(app: FastAPI) -> None:
    @app.post("/api/score", responses={429: {"description": "this user (or the server) has too many scorings "
                                                           "waiting"},
                                        503: {"description": "no model, or the scorer stayed busy too long"}})
    def score(body: ScoreRequest, user: User) -> dict:
        models = app.state.models
        try:
            models.gate.admissible(user.name)  # refused before the image is decoded
            image, caption, refs, metrics = _checked_score_request(body)
            return models.score(image, caption, refs, metrics=metrics or list(DEFAULT_API_METRICS), user=user.name)
        except ScoringBusy as err:
            raise HTTPException(429, str(err), headers={"Retry-After": "1"}) from None
        except ScoringTimeout as err:
            raise HTTPException(503, str(err), headers={"Retry-After": "5"}) from None
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        except ModelUnavailable as err:
            raise HTTPException(503, str(err)) from None
