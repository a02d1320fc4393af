"""The REST API (docs/formats.md §8): FastAPI, HTTP Basic users, everything under `/api`.

`create_app()` returns the FastAPI app; the Gradio UI mounts itself on the same
app at `/` afterwards (`gr.mount_gradio_app(app, demo, path="/")`), using
`app.state.store`, `app.state.models` and the sign-in of app/server/auth.py so that both
share one database, one scorer (one token rule, CLIP loaded once) and one
login. Every workflow call goes through `capscope.annotation`.

Bad input never yields a 5xx: request bodies are size-limited before they are
read, images are decoded completely before scoring, label indices are checked
against the item, and workflow errors map to 4xx with `{"detail": ...}`.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path as FilePath
from typing import Callable

from fastapi import FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from capscope import __version__
from capscope.annotation import users, workflow
from capscope.annotation.refusals import AnnotationError
from capscope.db import Store
from capscope.metrics.config import ScorerConfig
from capscope.server.audit_routes import audit_router
from capscope.server.auth import User, admin_user, basic_sign_in, current_user
from capscope.server.callers import CallerIdentity
from capscope.server.content_policy import ContentPolicy
from capscope.server.data_roots import DataRoots
from capscope.server.dataset_routes import add_dataset_routes
from capscope.server.first_run import first_run as make_first_run, private_files
from capscope.server.answer_logging import quiet_cut_short_answers
from capscope.server.guards import BodyLimit, InFlightCap, RequestGuard, SecurityHeaders, ThreadBudget
from capscope.server.item_routes import add_item_routes
from capscope.server.model_routes import add_model_routes
from capscope.server.quality_routes import quality_router
from capscope.server.region_routes import add_region_routes
from capscope.server.review_routes import review_router
from capscope.server.scoring import SERVER_CONFIG, Models, ScoreGate
from capscope.server.scoring_routes import add_scoring_routes
from capscope.server.segmenting import ClickService
from capscope.server.suggestions import Suggestions
from capscope.server.training import RESCORE_LIMIT, Activations, TrainingJobs, models_folder

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 * 2**20
MAX_SCORE_BODY_BYTES = 32 * 2**20
MAX_UPLOAD_FILE_BYTES = 25 * 2**20        # one file uploaded through the web UI (a photo, a JSONL file)
MAX_UPLOAD_REQUEST_BYTES = 256 * 2**20    # one upload request of the web UI (Admin import sends several files)
GIL_SWITCH_INTERVAL_S = 0.001
WORKER_THREADS = 100  # synchronous handlers at once: room for the scorings waiting their turn and everything else


class DatasetChoice(BaseModel):
    dataset: str | None = Field(max_length=200)


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
    """Every route: who is calling and the server's health here, each concern's in its own module."""
    store: Store = app.state.store

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

    add_scoring_routes(app)
    add_item_routes(app)  # /api/items/next and /previous before /api/items/{item_id}
    add_region_routes(app)
    add_dataset_routes(app)
    add_model_routes(app)  # /api/models/default/activate before /api/models/{version_id}/activate
