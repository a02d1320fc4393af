"""The REST API (docs/formats.md §8): FastAPI, HTTP Basic users, everything under `/api`.

`create_app()` returns the FastAPI app; the Gradio UI mounts itself on the same
app at `/` afterwards (`gr.mount_gradio_app(app, demo, path="/")`), using
`app.state.store`, `app.state.models` and `user_from_request` so that both
share one database, one scorer (one token rule, CLIP loaded once) and one
login. Every workflow call goes through `capscope.annotation`.

Bad input never yields a 5xx: request bodies are size-limited before they are
read, images are decoded completely before scoring, label indices are checked
against the item, and workflow errors map to 4xx with `{"detail": ...}`.
"""
from __future__ import annotations

import base64
import binascii
import logging
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path as FilePath
from typing import Annotated, Callable, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from pydantic import BaseModel, Field, StrictBool, StrictInt, conint
from starlette.background import BackgroundTask

from capscope import __version__
from capscope.annotation import (added_regions, agreement, audit, browse, export, gold, model_versions, queue,
                                 removed_regions, users, workflow)
from capscope.annotation.refusals import AnnotationError
from capscope.annotation.users import UserInfo, authenticate
from capscope.db import Store
from capscope.common.errors import ModelUnavailable
from capscope.metrics.images import ImageError, ImageTooLarge, read_image
from capscope.common.jsonl import JsonTextError, loads_limited
from capscope.common import limits
from capscope.metrics.text import check_caption, check_references
from capscope.metrics.config import ScorerConfig
from capscope.server.audit_routes import audit_router
from capscope.server.review_routes import review_router
from capscope.server.quality_routes import quality_router
from capscope.server.callers import SIGNIN_KEY, CallerIdentity, basic_credentials
from capscope.server.content_policy import ContentPolicy
from capscope.server.first_run import first_run as make_first_run, private_files
from capscope.server.suggestions import Suggestions
from capscope.server.data_roots import DataRoots, OutsideDataRoots
from capscope.server.guards import (BodyLimit, InFlightCap, RequestGuard, SecurityHeaders, ThreadBudget,
                                    quiet_cut_short_answers, script_or_json)
from capscope.server.segmenting import MAX_POINTS, ClickService, SegmentingBusy
from capscope.server.scoring import SERVER_CONFIG, Models, ScoreGate, ScoringBusy, ScoringTimeout
from capscope.server.signin import guard_for, signin_log_due
from capscope.server.training import DEFAULT_HOLDOUT, RESCORE_LIMIT, Activations, TrainingJobs, models_folder

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 * 2**20
MAX_SCORE_BODY_BYTES = 32 * 2**20
MAX_UPLOAD_FILE_BYTES = 25 * 2**20        # one file uploaded through the web UI (a photo, a JSONL file)
MAX_UPLOAD_REQUEST_BYTES = 256 * 2**20    # one upload request of the web UI (Admin import sends several files)
SCORE_FORMATS = {"PNG", "JPEG", "WEBP"}
ItemId = Annotated[int, Path(ge=1, le=2**62)]
ItemQuery = Annotated[int | None, Query(ge=1, le=2**62)]
RegionIndex = Annotated[int, Path(ge=0, le=limits.MAX_REGIONS)]
MAX_INDICES = 10_000
GIL_SWITCH_INTERVAL_S = 0.001
WORKER_THREADS = 100  # synchronous handlers at once: room for the scorings waiting their turn and everything else
DEFAULT_API_METRICS = ("infometic",)  # POST /api/score without `metrics`


# ---------------------------------------------------------------- request bodies

class ScoreRequest(BaseModel):
    image: str = Field(description="base64 PNG or JPEG (a data: URL prefix is accepted)")
    caption: str
    references: list[str] | None = None
    metrics: list[str] | None = None


class LabelsRequest(BaseModel):
    incorrect_tokens: list[StrictInt] = Field(default_factory=list, max_length=MAX_INDICES)
    mentioned_regions: list[StrictInt] = Field(default_factory=list, max_length=MAX_INDICES)
    status: Literal["draft", "submitted", "skipped"] = "draft"
    junk_regions: list[StrictInt] | None = Field(default=None, max_length=MAX_INDICES,
                                                 description="regions that are no object (absent: unchanged)")
    links: list[tuple[StrictInt, StrictInt]] | None = Field(
        default=None, max_length=MAX_INDICES, description="[token_index, region_index] ties (absent: unchanged)")


class SegmentRequest(BaseModel):
    points: list[tuple[float, float, StrictInt]] = Field(default_factory=list, max_length=MAX_POINTS,
                                                             description="[x, y, 1] positive, [x, y, 0] negative")
    box: tuple[float, float, float, float] | None = None


class RegionRequest(BaseModel):
    mask: dict | None = Field(default=None, description="COCO RLE {size: [h, w], counts: str}")
    box: tuple[float, float, float, float] | None = None
    prompts: SegmentRequest | None = Field(default=None, description="the clicks that made the mask (kept with it)")


class FlagRequest(BaseModel):
    kind: Literal["unsure", "bad_image", "bad_caption", "comment"]
    comment: str = Field(default="", max_length=workflow.MAX_COMMENT_CHARS)


class GoldRequest(BaseModel):
    token_labels: list[Literal["correct", "incorrect"] | None] = Field(max_length=MAX_INDICES)
    region_labels: list[Literal["mentioned", "unmentioned"] | None] = Field(max_length=MAX_INDICES)


class DatasetChoice(BaseModel):
    dataset: str | None = Field(max_length=200)


class QueueRequest(BaseModel):
    order: str = Field(max_length=50, description=f"one of {', '.join(queue.ORDERS)}")
    seed: StrictInt | None = Field(default=None, description="the random order's seed (default 0)")
    model_version: str | None = Field(default=None, max_length=200,
                                      description="uncertainty: this model version's predictions (default the newest)")


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


# ---------------------------------------------------------------- auth

_basic = HTTPBasic(auto_error=False)


def user_from_request(request: Request) -> UserInfo | None:
    """The user named by the request's HTTP Basic credentials, or None (for the UI's auth hook);
    None too while failed sign-ins for the name or the client are backing off."""
    credentials = basic_credentials(request.headers.get("authorization"))
    if credentials is None:
        return None
    user, _wait = _guarded_sign_in(request, *credentials)
    return user


def basic_sign_in(scope, name: str, password: str) -> tuple[UserInfo | None, float]:
    """`_guarded_sign_in` for callers.CallerIdentity, which has the request's scope."""
    return _guarded_sign_in(Request(scope), name, password)


def _guarded_sign_in(request: Request, name: str, password: str) -> tuple[UserInfo | None, float]:
    """(the user or None, seconds to wait): the password is not even checked while failed
    sign-ins for this name or client address are backing off (app/server/signin.py).
    Checked once a request: the answer is kept in the request's scope."""
    kept = request.scope.get(SIGNIN_KEY)
    if kept is not None and kept[0] == (name, password):
        return kept[1]
    answer = _checked_sign_in(request, name, password)
    request.scope[SIGNIN_KEY] = ((name, password), answer)
    return answer


def _checked_sign_in(request: Request, name: str, password: str) -> tuple[UserInfo | None, float]:
    guard, address = guard_for(request.app), request.client.host if request.client else ""
    wait = guard.retry_after(name, address)
    if wait:
        return None, wait
    store = request.app.state.store
    user = authenticate(store, name, password)
    if user is None:
        guard.failed(name, address)
        audit.record(store, "sign-in failed", actor=name, address=address, details={"by": "REST"})
    else:
        guard.succeeded(name, address)
        if signin_log_due(request.app, name, address):
            audit.record(store, "sign-in", actor=name, address=address, details={"by": "REST"})
    return user, 0.0


def current_user(request: Request, _scheme: HTTPBasicCredentials | None = Depends(_basic)) -> UserInfo:
    challenge = {"WWW-Authenticate": 'Basic realm="capscope"'}
    credentials = basic_credentials(request.headers.get("authorization"))
    if credentials is None:
        raise HTTPException(401, "credentials required (HTTP Basic)", headers=challenge)
    user, wait = _guarded_sign_in(request, *credentials)
    if wait:
        seconds = max(1, math.ceil(wait))
        raise HTTPException(429, f"too many failed sign-ins: try again in {seconds} s",
                            headers={"Retry-After": str(seconds)})
    if user is None:
        raise HTTPException(401, "unknown user or wrong password", headers=challenge)
    if not script_or_json(request.method, request.headers):
        raise HTTPException(415, "a call that changes something takes Content-Type: application/json or an "
                                 "X-Requested-With header (a script's body-less call: -H 'X-Requested-With: script')")
    return user


def admin_user(user: UserInfo = Depends(current_user)) -> UserInfo:
    if not user.is_admin:
        raise HTTPException(403, "this call needs the admin role")
    return user


User = Annotated[UserInfo, Depends(current_user)]
Admin = Annotated[UserInfo, Depends(admin_user)]


# ---------------------------------------------------------------- scoring

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


def public_version(version: dict) -> dict:
    """A model version as the API shows it (the file's name, not where it lies on the server)."""
    return {k: v for k, v in version.items() if k != "path"} | {"file": FilePath(version["path"]).name}


# ---------------------------------------------------------------- the app

def create_app(db_url: str | None = None, scorer_factory: Callable | None = None, *, store: Store | None = None,
               lease_seconds: int | None = None, scorer_config: ScorerConfig = SERVER_CONFIG,
               token_rule: str | None = None, precision: str | None = None, data_roots: DataRoots | None = None, models_dir: str | FilePath | None = None,
               rescore_limit: int | None = RESCORE_LIMIT, cors_origins: tuple[str, ...] = (),
               score_gate: ScoreGate | None = None, segmenter: str = "auto",
               click_service: ClickService | None = None, warm_segmenter: bool | None = None,
               first_run: bool = False) -> FastAPI:
    """The API app over the database at `db_url` (default `CAPSCOPE_DB_URL` or
    the data folder's SQLite file). `app.state.models` is the process's one
    scorer, which the UI mounted on this app shares: capscope's Scorer as
    `scorer_config` says (`token_rule` and `precision`, when given, replace its
    own), or what `scorer_factory(metrics)` builds (given every metric to try;
    again without those whose loading failed). `app.state.data_roots`:
    the folders whose files the UI may read when a user names them (default
    the data folder). `app.state.training` and `app.state.activations`: the
    fine-tuning jobs and model versions (app/server/training.py); fine-tuned
    checkpoints go to `models_dir` (default a `models` folder beside the
    SQLite file, else in the data folder); after an activation, the first
    `rescore_limit` queued items (None: all) are scored again. The active
    model version, if any, is what the scorer loads. `app.state.clicks`: click
    to segment with `segmenter` (app/server/segmenting.py), loaded and run once on
    a small picture in the background as the app is made (`warm_segmenter`; default:
    when the service is made here, not for a `click_service` given), so that the first
    click after a start is as quick as the later ones. `first_run`: make the first admin and the demo
    dataset where there are none (app/server/first_run.py; `capscope serve` asks for it)."""
    app = FastAPI(title="capscope", version=__version__, openapi_url="/openapi.json", docs_url="/api/docs",
                  redoc_url=None)
    # a thread that waits on the database gets the interpreter back within 1 ms of a scoring thread's
    # time slice instead of 5 (Python's default): a label save beside busy scoring needs many such turns
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    app.state.store = store or Store(db_url)
    given = {name: value for name, value in (("token_rule", token_rule), ("precision", precision)) if value is not None}
    app.state.models = Models(scorer_factory, config=scorer_config, gate=score_gate, **given)
    app.state.data_roots = data_roots or DataRoots()
    app.state.data_roots.protect(private_files(app.state.store))
    if first_run:
        make_first_run(app.state.store)
    app.state.training = TrainingJobs(app.state.store, app.state.models, models_folder(app.state.store, models_dir))
    app.state.activations = Activations(app.state.store, app.state.models, rescore_limit=rescore_limit)
    app.state.activations.load_active()
    app.state.suggestions = Suggestions(app.state.store, app.state.models)
    app.state.clicks = click_service or ClickService(segmenter)
    if warm_segmenter if warm_segmenter is not None else click_service is None:
        app.state.clicks.warm_up()  # a background thread: start-up and requests do not wait for it
    app.state.lease_seconds = lease_seconds or int(os.environ.get("CAPSCOPE_LEASE_SECONDS", workflow.LEASE_SECONDS))
    _add_guards(app, cors_origins)
    quiet_cut_short_answers()  # a transfer cut short is one WARNING line in the server's log, not a traceback

    @app.exception_handler(AnnotationError)
    async def _annotation_error(_request, err: AnnotationError):
        return JSONResponse({"detail": str(err)}, status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request, err: RequestValidationError):
        return JSONResponse({"detail": validation_details(err)}, status_code=422)

    _add_routes(app)
    app.include_router(audit_router(admin_user))
    app.include_router(review_router(current_user, admin_user))
    app.include_router(quality_router(admin_user))
    return app


def _add_guards(app: FastAPI, cors_origins: tuple[str, ...]) -> None:
    """The checks of app/server/guards.py, outermost last (Starlette wraps each added middleware around the others)."""
    app.state.cors_origins = tuple(cors_origins)
    app.add_middleware(RequestGuard, origins=app.state.cors_origins)
    # a caller's scorings past the scorer's cap are refused here, before their bodies are read (REST calls,
    # and the web UI's events that skip Gradio's queue: Inspect's scorings and keystrokes)
    app.add_middleware(InFlightCap, paths=frozenset({"/api/score", "/gradio_api/run/predict"}),
                       per_caller=app.state.models.gate.per_user, state=app.state)
    app.add_middleware(BodyLimit, default=MAX_BODY_BYTES, by_path={"/api/score": MAX_SCORE_BODY_BYTES},
                       by_prefix={"/gradio_api/upload": MAX_UPLOAD_REQUEST_BYTES})
    app.state.basic_sign_in = basic_sign_in
    app.add_middleware(CallerIdentity, state=app.state)  # before any body is read: the limits above are per caller
    app.add_middleware(CORSMiddleware, allow_origins=list(app.state.cors_origins),
                       allow_credentials=bool(cors_origins), allow_methods=["GET", "POST", "PUT"],
                       allow_headers=["Authorization", "Content-Type", "X-Requested-With"])
    app.add_middleware(ContentPolicy)  # inside SecurityHeaders, whose own policy it replaces
    app.add_middleware(SecurityHeaders)
    app.add_middleware(ThreadBudget, threads=WORKER_THREADS)


def validation_details(err: RequestValidationError) -> list[dict]:
    """FastAPI's validation errors without the input they were about: an answer
    never echoes what a client sent (it may not even be encodable)."""
    details = []
    for problem in err.errors():
        location = [part if isinstance(part, int) else ascii_text(part) for part in problem.get("loc", ())]
        details.append({"loc": location, "msg": ascii_text(problem.get("msg", "")), "type": problem.get("type")})
    return details


def ascii_text(value) -> str:
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def _add_routes(app: FastAPI) -> None:
    store: Store = app.state.store
    lease = app.state.lease_seconds

    @app.get("/api/health")
    def health() -> dict:
        try:
            store.ping()
        except Exception as err:  # the database is down: the server is up but cannot serve
            raise HTTPException(503, f"database unavailable: {type(err).__name__}") from None
        return {"status": "ok", "version": __version__, "database": store.dialect,
                "token_rule": app.state.models.token_rule}

    @app.get("/api/me")
    def me(user: User) -> dict:
        return {"id": user.id, "name": user.name, "role": user.role,
                "dataset": users.annotate_dataset(store, user)}

    @app.put("/api/me/dataset")
    def put_my_dataset(body: DatasetChoice, user: User) -> dict:
        """Remember the dataset this user annotates (null: every dataset, the demo world's last)."""
        return {"dataset": users.set_annotate_dataset(store, user, body.dataset)}

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

    @app.post("/api/items/{item_id}/segment", responses={422: {"description": "no prompt, or a point outside"}})
    def segment(item_id: ItemId, body: SegmentRequest, user: User) -> dict:
        """A mask from clicks (and a box) on the item's image; nothing is stored."""
        image = added_regions.item_image_file(store, user, item_id)
        try:
            return app.state.clicks.segment(image.id, image.path, body.points, body.box, user=user.name,
                                            size=image.size)
        except SegmentingBusy as err:
            raise HTTPException(429, str(err), headers={"Retry-After": "1"}) from None
        except ModelUnavailable as err:
            raise HTTPException(503, str(err)) from None
        except OSError:
            raise HTTPException(404, f"the image of item {item_id} is missing on disk") from None
        except ImageError as err:
            raise HTTPException(422, str(err)) from None

    @app.post("/api/items/{item_id}/regions", status_code=201,
              responses={200: {"description": "an existing region is the same object (IoU >= 0.9): nothing added"}})
    def add_region(item_id: ItemId, body: RegionRequest, user: User, response: Response) -> dict:
        """Append a region (a mask or a box) to the item's image; indexes never change."""
        prompts = None if body.prompts is None else body.prompts.model_dump()
        if prompts is not None:  # checked against the image with the region; naming the segmenter loads nothing
            prompts["segmenter"] = app.state.clicks.name
        region, added = added_regions.add_region(store, user, item_id, mask=body.mask, box=body.box, prompts=prompts)
        if not added:
            response.status_code = 200
        return region

    @app.delete("/api/items/{item_id}/regions/{index}",
                responses={403: {"description": "an annotator may withdraw only a region they added"},
                           422: {"description": "others have labelled it, or it was taken away already"}})
    def remove_region(item_id: ItemId, index: RegionIndex, user: User) -> dict:
        """Take a region away (it keeps its index; votes on it go): an admin removes any, the one
        who added a region withdraws it while no one else has labelled it."""
        return removed_regions.remove_region(store, user, item_id, index)

    @app.post("/api/items/{item_id}/undo")
    def undo(item_id: ItemId, user: User) -> dict:
        return workflow.undo(store, user, item_id, lease_seconds=lease)

    @app.get("/api/items/{item_id}/history")
    def history(item_id: ItemId, user: User) -> list:
        return workflow.history(store, user, item_id)

    @app.post("/api/items/{item_id}/flags")
    def flag(item_id: ItemId, body: FlagRequest, user: User) -> dict:
        return workflow.add_flag(store, user, item_id, body.kind, body.comment)

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

    @app.get("/api/progress")
    def progress(user: User, dataset: str | None = None) -> dict:
        return browse.progress(store, user, dataset=dataset)

    @app.get("/api/agreement")
    def agreement_report(user: Admin, dataset: str | None = None, all_tokens: bool = False) -> dict:
        return agreement.agreement_report(store, dataset, semantic_only=not all_tokens)

    @app.get("/api/images/{image_id}")
    def image(image_id: ItemId, user: User):
        path = workflow.image_path(store, user, image_id)
        if not os.path.isfile(path):
            raise HTTPException(404, f"image {image_id} is missing on disk")
        return FileResponse(path)

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

