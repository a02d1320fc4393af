"""The capscope web UI (Gradio), mounted at `/` on the API's FastAPI app.

    app = create_app(...)          # capscope.server.api: the REST API under /api
    app = mount_ui(app)            # this module: the pages at /, same users

Tabs: Inspect (score an image and captions), Annotate (the queue), Review for
reviewers and admins, and for admins Explore, Benchmark, Admin and Compare. Login is Gradio's login page
checked against the store's users. Database handlers run in Gradio's "db"
queue; scoring skips Gradio's queue and takes the scorer's turns by user
(`shared.SCORING_EVENTS`), so a label save never waits behind scoring.

On first run the server (app/server/first_run.py) makes the first admin and the
demo dataset; `mount_ui` does the same for an app made without it.
"""
from __future__ import annotations

import logging
import os
from importlib import resources
from pathlib import Path

import gradio as gr
from PIL import Image

from capscope.common.heap import freeze_long_lived
from capscope.annotation import queue
from capscope.annotation.users import get_user
from capscope.db import Store, data_dir
from capscope.common import limits
from capscope.common.jsonl import read_json_lines
from capscope.server.api import MAX_UPLOAD_FILE_BYTES
from capscope.server.data_roots import DataRoots
from capscope.server.first_run import DEMO_SCENES, first_run, private_files
from capscope.server.signin import ClientAddress, ui_auth
from capscope.server.scoring import TOKEN_RULE_NOTES, Models
from capscope.server.training import Activations, TrainingJobs, models_folder
from capscope.ui.admin import build_admin, build_model_versions
from capscope.ui.annotate import build_annotate
from capscope.ui.annotator import Annotator
from capscope.ui.benchmark import build_benchmark
from capscope.ui.compare import build_compare, link_to_inspect
from capscope.ui.explore import build_explore
from capscope.ui.inspect import banner, build_inspect
from capscope.ui.queue_cap import cap_per_user, merged_load
from capscope.ui.reviewing import build_review
from capscope.ui.sessions import expire_sessions, session_hours as lifetime_hours
from capscope.ui.shared import SCORING_EVENTS, DatasetScores, admin_only

log = logging.getLogger(__name__)

DEMO_DATASET = queue.DEMO_DATASET  # one name for the demo world's dataset (annotation/queue.py)
QUEUE_MAX_SIZE = 64  # events waiting in Gradio's queue, all users together; more are refused with "queue full"
MAX_EXAMPLES = 12


def static_text(name: str) -> str:
    return resources.files("capscope.static").joinpath(name).read_text(encoding="utf-8")


def demo_examples(folder: Path | None, limit: int = MAX_EXAMPLES) -> list[dict]:
    """Demo scenes for the Inspect tab: image, polluted caption, its clean twin, the scene's boxes."""
    listing = folder / "captokeneval.jsonl" if folder else None
    if listing is None or not listing.is_file():
        return []
    rows = read_json_lines(listing)
    by_image: dict[str, dict[str, dict]] = {}
    for row in rows:
        kind = "polluted" if "pollut" in row["id"] else "clean"
        by_image.setdefault(row["image"], {})[kind] = row
    examples = []
    for image, pair in by_image.items():
        first = pair.get("polluted") or pair.get("clean")
        twin = pair.get("clean") if "polluted" in pair else None
        examples.append({"id": first["id"], "path": str(folder / image), "caption": first["caption"],
                         "twin_caption": twin["caption"] if twin else "",
                         "regions": [{"box": r["box"], **({"mask": r["mask"]} if r.get("mask") else {})}
                                     for r in first["regions"]]})  # a mask is scored (HICE-S) and outlined
        if len(examples) >= limit:
            break
    return examples


# ---------------------------------------------------------------- the page

def token_rule_note(rule: str) -> str:
    """The line that says which token rule this server judges words by."""
    return f"<small>Token rule: **{rule}**: {TOKEN_RULE_NOTES[rule]}. The REST API uses the same.</small>"


def build_ui(store: Store, models: Models | None = None, examples: list[dict] | None = None,
             lease_seconds: int | None = None, data_roots: DataRoots | None = None,
             training: TrainingJobs | None = None, activations: Activations | None = None,
             clicks=None, suggestions=None) -> gr.Blocks:
    """The page; `data_roots`: the folders whose files a user may name (default the data folder);
    `training`, `activations`: the server's fine-tuning jobs and model versions (app/server/training.py)."""
    models = models or Models()
    training = training or TrainingJobs(store, models, models_folder(store))
    activations = activations or Activations(store, models)
    annotator = Annotator(store, models, **({"lease_seconds": lease_seconds} if lease_seconds else {}), clicks=clicks,
                          suggestions=suggestions)
    scores = DatasetScores(store, models)
    # Gradio's copies of returned files (exports, plots, pictures) go after a day, checked hourly
    with gr.Blocks(title="capscope", delete_cache=(3600, 86400)) as demo:
        with gr.Row():
            gr.Markdown("## capscope · which words are wrong, which regions were left out")
            who = gr.Markdown("", elem_id="cs-who")
        model_banner = gr.Markdown(visible=False, elem_classes="cs-banner", elem_id="cs-banner")
        with gr.Tabs() as tabs:
            with gr.Tab("Inspect", id="inspect"):
                gr.Markdown(token_rule_note(models.token_rule), elem_id="cs-token-rule")
                inspect = build_inspect(models, examples or [], annotator.clicks, store)  # one click service
            with gr.Tab("Annotate", id="annotate"):
                annotate = build_annotate(annotator)
            with gr.Tab("Review", id="review", visible=False) as review_tab:
                reviewing = build_review(store, lease_seconds)
            with gr.Tab("Explore", id="explore", visible=False) as explore_tab:
                explore = build_explore(store, scores)
            with gr.Tab("Benchmark", id="benchmark", visible=False) as bench_tab:
                bench = build_benchmark(store, scores, data_roots)
            with gr.Tab("Admin", id="admin", visible=False) as admin_tab:
                admin = build_admin(store, models.token_rule)
                model_versions = build_model_versions(store, training, activations)
            with gr.Tab("Compare", id="compare", visible=False) as compare_tab:
                compare = build_compare(lambda fn, outputs=None: admin_only(store, fn, outputs), data_roots, store,
                                        token_rule=models.token_rule)
        link_to_inspect(compare, inspect, tabs, lambda fn, outputs=None: admin_only(store, fn, outputs))

        def whoami(request: gr.Request):
            name = getattr(request, "username", None)
            try:
                user = get_user(store, name) if name else None
            except Exception:
                user = None
            is_admin = bool(user and user.is_admin)
            text = f"Signed in as **{user.name}** ({user.role}) · [log out](logout)" if user else ""
            reviews = bool(user and user.role in ("reviewer", "admin"))
            return (text, *(gr.Tab(visible=is_admin) for _ in range(4)), gr.Tab(visible=reviews))

        demo.load(whoami, None, [who, explore_tab, bench_tab, admin_tab, compare_tab, review_tab],
                  api_visibility="private", queue=False)
        review_tab.select(*reviewing["open"], api_visibility="private", concurrency_id="db", concurrency_limit=4)
        demo.load(*annotate["open"], api_visibility="private", concurrency_id="db", concurrency_limit=4)
        demo.load(lambda: banner(models), None, [model_banner, inspect["metric"]], api_visibility="private",
                  **SCORING_EVENTS)
        for part in (annotate, explore, bench, admin, model_versions, compare, reviewing):
            demo.load(*merged_load(part["load"]), api_visibility="private")
    return demo


def mount_ui(app, *, store: Store | None = None, seed: bool | None = None, demo_scenes: int = DEMO_SCENES,
             path: str = "/", session_hours: float | None = None):
    """Mount the UI on the API app (one port). Uses the app's store and its one
    scorer (`app.state.models`, which the REST API scores with too); seeds the
    demo dataset on first run unless CAPSCOPE_NO_SEED is set. A sign-in lasts
    `session_hours` (default CAPSCOPE_SESSION_HOURS, else 12) or until the user's
    password changes or they are disabled; failed sign-ins back off as the REST API's do."""
    store = store or app.state.store
    if seed is None:
        seed = not os.environ.get("CAPSCOPE_NO_SEED")
    folder = data_dir() / "demo-data"
    if seed:  # `capscope serve` has done it already (create_app's first_run): then nothing is left to do
        first_run(store, folder, demo_scenes)
    demo = build_ui(store, app.state.models, demo_examples(folder), getattr(app.state, "lease_seconds", None),
                    getattr(app.state, "data_roots", None), getattr(app.state, "training", None),
                    getattr(app.state, "activations", None), getattr(app.state, "clicks", None),
                    getattr(app.state, "suggestions", None))
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_MAX_SIZE)
    cap_per_user(demo)

    lifetime_s = lifetime_hours(session_hours) * 3600
    app = gr.mount_gradio_app(app, demo, path=path, auth=ui_auth(app, store), auth_message="capscope: sign in "
                              "with your annotator or admin account", ssr_mode=False, css=static_text("ui.css"),
                              head=static_text("hotkeys.js"), max_file_size=MAX_UPLOAD_FILE_BYTES,
                              blocked_paths=[str(f) for f in private_files(store)])
    # Gradio checks that a file an event names was uploaded only once its Blocks "has launched", which
    # mount_gradio_app never marks: without this, any signed-in user could have a server file copied out
    demo.has_launched = True
    Image.MAX_IMAGE_PIXELS = limits.MAX_IMAGE_PIXELS  # whatever decodes an image in this process, Gradio included
    sessions = expire_sessions(app, store, lifetime_s)
    app.state.session_user = sessions.get  # who a UI request comes from, for the caps on scoring (guards.InFlightCap)
    app.add_middleware(ClientAddress)
    freeze_long_lived()  # the UI's and the app's objects live as long as the server
    return app
