"""The Admin tab: users, importing a dataset, the queue order, exports
(`build_admin`), and the Models panel (`build_model_versions`): fine-tune InfoMetIC on a dataset's labels,
watch the job, cancel it, compare versions' held-out figures and activate one
(the same calls as `/api/models`, app/server/training.py)."""
from __future__ import annotations

import html
import json
import shutil
import time
from pathlib import Path

import gradio as gr

from capscope.annotation import audit, browse, importer, model_versions as mv, queue
from capscope.annotation.refusals import AnnotationError, Invalid
from capscope.annotation.users import add_user, list_users
from capscope.db import Store, data_dir
from capscope.common.jsonl import JsonTextError, loads_limited
from capscope.common.paths import UnsafePath, inside, name_problem, safe_name
from capscope.server.training import DEFAULT_HOLDOUT, DEFAULT_MINUTES, Activations, TrainingJobs
from capscope.ui.label_quality import build_label_quality
from capscope.ui.releases import build_releases
from capscope.ui.shared import admin_only, build_export, scratch_folder

HEADERS = ["id", "name", "parent", "dataset", "wrong-word F1 before → after", "wrong-word AUROC before → after",
           "checked on", "its F1 before → after", "word threshold", "active"]
TICK_SECONDS = 2.0


def _figure(figures: dict, key: str) -> str:
    show = lambda side: "-" if not figures.get(side) or figures[side].get(key) is None else f"{figures[side][key]:.3f}"
    return f"{show('before')} → {show('after')}"


def versions_rows(store: Store) -> list[list]:
    rows = []
    for v in mv.list_versions(store):
        parent = f"v{v['parent_id']}" if v["parent_id"] else (v["parent_sha256"] or "")[:12]
        check = v["figures"].get("check") or {}
        rows.append([v["id"], v["name"], parent, v["dataset"] or "", _figure(v["figures"], "incorrect_token_f1"),
                     _figure(v["figures"], "incorrect_token_auroc"), check.get("dataset") or check.get("file") or "",
                     _figure(check, "incorrect_token_f1") if check else "", _scale(v["figures"]),
                     "✓" if v["active"] else ""])
    return rows


def _scale(figures: dict) -> str:
    """The rule's word threshold times the version's fitted scale (docs/fine-tuning.md)."""
    scale = mv.fitted_word_scale(figures)
    return f"× {scale:g}" if scale is not None else "-"


DEFAULT_CHOICE = "default"


def version_choices(store: Store) -> list[tuple[str, int | str]]:
    """Every version, then the server's default model (the way back from a version)."""
    return ([(f"{v['name']} ({v['sha256'][:12]})", v["id"]) for v in mv.list_versions(store)]
            + [("the default model", DEFAULT_CHOICE)])


def job_line(job: dict | None, rescoring: dict | None = None) -> str:
    """One line on the current or last job (and the re-scoring after an activation)."""
    parts = []
    if job is not None:
        head = f"Job {job['id']} on **{html.escape(str(job['dataset']))}**: {job['status']}"
        if job["status"] == "running":
            head += f", {job['stage']} {round(100 * (job['fraction'] or 0))}%"
            if job.get("step"):
                head += f", step {job['step']}"
            if job.get("loss") is not None:
                head += f", loss {job['loss']:.4f}"
        elif job["status"] == "done":
            head += f": version {job['version_id']} added (not active yet)"
        elif job["status"] == "failed":
            head += f": {job['error']}"
        parts.append(head)
    if rescoring is not None:
        total = rescoring["total"] if rescoring["total"] is not None else "?"
        parts.append(f"Re-scoring **{rescoring['dataset']}** with {rescoring['model_version']}: "
                     f"{rescoring['state']}, {rescoring['done']}/{total} queued items")
    return " · ".join(parts) or "No training job yet."


def running(training: TrainingJobs, activations: Activations) -> bool:
    job, rescoring = training.last(), activations.rescoring()
    return bool((job and job["status"] == "running") or (rescoring and rescoring["state"] == "running"))


def start_training(training: TrainingJobs, dataset, minutes, steps, check_dataset=None, holdout=DEFAULT_HOLDOUT,
                   augment=False) -> str:
    if not dataset:
        return "Choose a dataset."
    try:
        job_id = training.start(dataset, "active", minutes=float(minutes) if minutes else None,
                                steps=int(steps) if steps else None, check_dataset=check_dataset or None,
                                holdout=DEFAULT_HOLDOUT if holdout is None else float(holdout), augment=bool(augment))
    except AnnotationError as err:
        return f"Not started: {html.escape(str(err))}"
    return job_line(training.job(job_id))


def cancel_training(training: TrainingJobs) -> str:
    job = training.last()
    if job is None or job["status"] != "running":
        return "No job is running."
    return job_line(training.cancel(job["id"]))


def activate_click(activations: Activations, version) -> str:
    if version in (None, ""):
        return "Choose a version."
    try:
        result = activations.activate(None if version == DEFAULT_CHOICE else int(version))
    except AnnotationError as err:
        return f"Not activated: {html.escape(str(err))}"
    text = (f"Version {result['active']} is active ({result['model_version']})." if result["active"] is not None
            else "The default model is active again.")
    if result["rescoring"] is not None:  # its progress is the progress line's, which keeps up to date
        text += f" Its dataset **{result['rescoring']['dataset']}**'s queued items are scored again with it."
    return text


def build_model_versions(store: Store, training: TrainingJobs, activations: Activations) -> dict:
    c: dict = {}
    gr.Markdown("### Models\nFine-tune the word and region model on a dataset's labels (gold where set, else the "
                "judgements' majority), compare held-out figures, and choose the version the server scores with.")
    with gr.Row():
        c["dataset"] = gr.Dropdown(label="Dataset", choices=[], allow_custom_value=True, elem_id="cs-models-dataset")
        c["minutes"] = gr.Number(label="Minutes", value=DEFAULT_MINUTES, minimum=0, elem_id="cs-models-minutes")
        c["steps"] = gr.Number(label="Steps (optional)", value=None, precision=0, minimum=0,
                               elem_id="cs-models-steps")
        # With a few hundred labels, training on all of them and checking on another
        # dataset did better than holding a fifth out (docs/fine-tuning.md).
        c["holdout"] = gr.Number(label="Hold out", value=DEFAULT_HOLDOUT, minimum=0, maximum=0.9, step=0.1,
                                 info="share of images kept for before/after figures; 0 trains on all",
                                 elem_id="cs-models-holdout")
        c["augment"] = gr.Checkbox(label="Augment", value=False, elem_id="cs-models-augment",
                                   info="new brightness, contrast and mirroring each step")
        c["check"] = gr.Dropdown(label="Check on (optional)", info="another dataset, scored before and after",
                                 choices=[], elem_id="cs-models-check")
        c["train"] = gr.Button("Train", elem_id="cs-models-train")
        c["cancel"] = gr.Button("Cancel", elem_id="cs-models-cancel")
    c["progress"] = gr.Markdown("No training job yet.", elem_id="cs-models-progress")
    c["table"] = gr.Dataframe(headers=HEADERS, interactive=False, elem_id="cs-models-versions")
    with gr.Row():
        c["version"] = gr.Dropdown(label="Version", choices=[], elem_id="cs-models-version")
        c["activate"] = gr.Button("Activate", elem_id="cs-models-activate")
    c["result"] = gr.Markdown(elem_id="cs-models-result")
    c["timer"] = gr.Timer(TICK_SECONDS, active=False)

    def refresh():
        return (job_line(training.last(), activations.rescoring()), versions_rows(store),
                gr.update(choices=version_choices(store)), gr.Timer(active=running(training, activations)))

    outputs = [c["progress"], c["table"], c["version"], c["timer"]]
    c["timer"].tick(admin_only(store, refresh, len(outputs)), None, outputs, api_visibility="private",
                    queue=False, show_progress="hidden")
    train = lambda d, m, s, k, h, a: (start_training(training, d, m, s, k, h, a), gr.Timer(active=True))
    c["train"].click(admin_only(store, train),
                     [c["dataset"], c["minutes"], c["steps"], c["check"], c["holdout"], c["augment"]],
                     [c["progress"], c["timer"]], api_visibility="private")
    c["cancel"].click(admin_only(store, lambda: cancel_training(training)), None, c["progress"],
                      api_visibility="private", queue=False)
    c["activate"].click(admin_only(store, lambda v: (activate_click(activations, v), gr.Timer(active=True))),
                        c["version"], [c["result"], c["timer"]], api_visibility="private", concurrency_id="model",
                        concurrency_limit=1)
    c["load"] = [(admin_only(store, refresh, len(outputs)), None, outputs),
                 (admin_only(store, lambda: dataset_choices(store), 2), None, [c["dataset"], c["check"]])]
    return c


def dataset_choices(store: Store) -> tuple:
    """The datasets to train on, and the same with none first for Check on (one read of the store)."""
    names = browse.dataset_names(store)
    return gr.update(choices=names), gr.update(choices=[""] + names)


# ---------------------------------------------------------------- users, import, queue

def import_files(store: Store, files: list[str], kind: str, dataset: str, per_item: int) -> str:
    """Copy uploaded files into the data folder and import the one JSONL among them.
    The dataset name is stored as the admin typed it; the folder it names is made safe."""
    files = [Path(f) for f in files or []]
    listing = [f for f in files if f.suffix == ".jsonl"]
    if len(listing) != 1:
        return "Upload exactly one .jsonl file (plus its images)."
    dataset = dataset or "default"
    try:
        folder = _import_folder(dataset)
        images = inside(folder, "images")
        images.mkdir(parents=True, exist_ok=True)
        for f in files:
            if f.suffix != ".jsonl":
                shutil.copy(f, inside(images, f.name))
        target = inside(folder, listing[0].name)
    except (Invalid, UnsafePath) as err:
        return f"**Import failed:** {html.escape(str(err))}"
    shutil.copy(listing[0], target)
    _point_images_at(target, images)
    options = importer.ImportOptions(dataset=dataset, annotators_per_item=int(per_item), progress=False,
                                     regions="classic")
    try:
        if kind == "captokeneval":
            report = importer.import_captokeneval(store, target, options, images)
        else:
            report = importer.import_captions(store, target, images, options)
    except AnnotationError as err:
        return f"**Import failed:** {html.escape(str(err))}"
    errors = "".join(f"\n- {e}" for e in report.errors[:20])
    return report.summary() + errors


def _import_folder(dataset: str) -> Path:
    """A new folder under the data folder's `imports` for one upload, named by
    the time and the dataset name made safe (`x/../../outside` stays inside);
    Invalid for a name the importer would refuse, before anything is written."""
    problem = name_problem(dataset, "dataset name")
    if problem:
        raise Invalid(problem)
    return inside(data_dir() / "imports", f"{time.strftime('%Y%m%d-%H%M%S')}-{safe_name(dataset)}")


def _point_images_at(listing: Path, images: Path) -> None:
    """Uploaded images arrive flat: make each row's `image` its bare file name.
    A line that is not UTF-8 JSON is left as it is: the importer reports it with its number."""
    lines = []
    for raw in listing.read_bytes().removesuffix(b"\n").split(b"\n"):  # as the importer counts lines
        try:
            row = loads_limited(raw.decode("utf-8")) if raw.strip() else None
        except (UnicodeDecodeError, JsonTextError):
            row = None
        if isinstance(row, dict) and isinstance(row.get("image"), str):
            row["image"] = Path(row["image"]).name
            raw = json.dumps(row, ensure_ascii=False).encode("utf-8")
        lines.append(raw)
    listing.write_bytes(b"\n".join(lines) + b"\n")


def users_rows(store: Store) -> list[list]:
    return [[u.name, u.role] for u in list_users(store)]


def add_user_action(store: Store, name: str, password: str, role: str) -> tuple[str, list[list]]:
    try:
        user = add_user(store, (name or "").strip(), password or "", role)
    except AnnotationError as err:
        return f"**Not added:** {html.escape(str(err))}", users_rows(store)
    return f"User **{user.name}** ({user.role}) added.", users_rows(store)


def queue_text(view: dict) -> str:
    upcoming = ", ".join(str(i) for i in view["next"]) or "nothing left"
    return (f"Dataset **{html.escape(view['dataset'])}**: order **{view['order']}**, seed {view['seed']}, "
            f"{view['ranked']} items ranked. Next items: {upcoming}.")


def show_queue(store: Store, dataset: str):
    """(order, seed, text) of the dataset's queue; nothing changed without a dataset."""
    if not dataset:
        return gr.skip(), gr.skip(), ""
    try:
        view = queue.queue_view(store, dataset)
    except AnnotationError as err:
        return gr.skip(), gr.skip(), f"**Not found:** {html.escape(str(err))}"
    return view["order"], view["seed"], queue_text(view)


def apply_queue_order(store: Store, dataset: str, order: str, seed, token_rule: str) -> str:
    """The Apply order button: `queue.set_queue_order` (uncertainty by `token_rule`), its result as text."""
    if not dataset:
        return "**Not applied:** choose a dataset."
    try:
        seed = int(seed or 0)
        return queue_text(queue.set_queue_order(store, dataset, order, seed, token_rule=token_rule))
    except (AnnotationError, ValueError) as err:
        return f"**Not applied:** {html.escape(str(err))}"


AUDIT_HEADERS = ["at (UTC)", "who", "action", "from", "what", "details"]


def audit_rows(store: Store, action: str | None = None, actor: str | None = None) -> list[list]:
    """The newest 200 rows of the audit log (one action's or one person's, or all), as the Admin tab shows them."""
    found = audit.events(store, action=action or None, actor=(actor or "").strip() or None, page_size=200)["events"]
    return [[e["at"][:19], e["actor"] or "", e["action"], e["address"] or "", e["target"] or "",
             json.dumps(e["details"]) if e["details"] else ""] for e in found] or [[""] * len(AUDIT_HEADERS)]


def audit_file(store: Store) -> str:
    """The whole log as a JSONL download (streamed to a file, never held whole)."""
    path = scratch_folder("audit-") / "capscope-audit.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        handle.writelines(audit.iter_export(store, "jsonl"))
    return str(path)


def build_audit(store: Store, c: dict) -> None:
    gr.Markdown("### Audit log\nWho signed in, changed a user, imported, exported, wrote gold, trained or "
                "activated a model: when and from which address. Nothing here can be changed.")
    with gr.Row():
        c["audit_action"] = gr.Dropdown(["", *audit.ACTIONS], value="", label="Action", elem_id="cs-audit-action")
        c["audit_actor"] = gr.Textbox(label="Who", max_length=200, elem_id="cs-audit-actor")
        c["audit_refresh"] = gr.Button("Show", elem_id="cs-audit-show")
        c["audit_download"] = gr.Button("Download (JSONL)")
    c["audit_table"] = gr.Dataframe(headers=AUDIT_HEADERS, interactive=False, elem_id="cs-audit")
    c["audit_file"] = gr.File(label="Audit log", interactive=False, height=90)
    c["audit_refresh"].click(admin_only(store, lambda a, w: audit_rows(store, a, w)),
                             [c["audit_action"], c["audit_actor"]], c["audit_table"], api_visibility="private")
    c["audit_download"].click(admin_only(store, lambda: audit_file(store)), None, c["audit_file"],
                              api_visibility="private")


def build_admin(store: Store, token_rule: str) -> dict:
    """The panel; `token_rule` (the server's) decides the uncertainty order and model-aware gold."""
    c: dict = {}
    with gr.Row():
        with gr.Column():
            gr.Markdown("### Users")
            c["name"] = gr.Textbox(label="Name", elem_id="cs-admin-name")
            c["password"] = gr.Textbox(label="Password", type="password", elem_id="cs-admin-password")
            c["role"] = gr.Radio(["annotator", "reviewer", "admin"], value="annotator", label="Role")
            c["add"] = gr.Button("Add user", elem_id="cs-admin-add")
            c["message"] = gr.Markdown(elem_id="cs-admin-message")
            c["users"] = gr.Dataframe(headers=["name", "role"], interactive=False, elem_id="cs-admin-users")
        with gr.Column():
            gr.Markdown("### Import a dataset\nOne JSONL file (captions or CapTokenEval) and its images.")
            c["files"] = gr.File(file_count="multiple", label="JSONL + images")
            c["kind"] = gr.Radio(["captokeneval", "captions"], value="captokeneval", label="Format")
            c["dataset"] = gr.Textbox(label="Dataset name", value="uploaded")
            c["per_item"] = gr.Number(label="Annotators per item", value=3, precision=0, minimum=0)
            c["import"] = gr.Button("Import")
            c["report"] = gr.Markdown()
    gr.Markdown("### Queue order\nWhich item the Annotate queue hands out first: by id, in a seeded random order, "
                "the model's least certain first, the items annotators disagree on first, or the least confident gold "
                "first (to re-label).")
    with gr.Row():
        c["queue_dataset"] = gr.Dropdown(label="Dataset", choices=[], allow_custom_value=True,
                                         elem_id="cs-admin-queue-dataset")
        c["queue_order"] = gr.Radio(list(queue.ORDERS), value="sequential", label="Order",
                                    elem_id="cs-admin-queue-order")
        c["queue_seed"] = gr.Number(label="Seed", value=0, precision=0, minimum=0, elem_id="cs-admin-queue-seed")
        c["queue_apply"] = gr.Button("Apply order", elem_id="cs-admin-queue-apply")
    c["queue_result"] = gr.Markdown(elem_id="cs-admin-queue-result")
    build_label_quality(store, c, token_rule)
    build_releases(store, c)
    build_export(store, c, None, api=False)
    build_audit(store, c)
    c["queue_dataset"].change(admin_only(store, lambda d: show_queue(store, d)), c["queue_dataset"],
                              [c["queue_order"], c["queue_seed"], c["queue_result"]], api_visibility="private")
    c["queue_apply"].click(admin_only(store, lambda d, o, n: apply_queue_order(store, d, o, n, token_rule)),
                           [c["queue_dataset"], c["queue_order"], c["queue_seed"]], c["queue_result"],
                           api_visibility="private", concurrency_id="db", concurrency_limit=4)
    c["add"].click(admin_only(store, lambda n, p, r: add_user_action(store, n, p, r)),
                   [c["name"], c["password"], c["role"]],
                   [c["message"], c["users"]], api_visibility="private")
    c["import"].click(admin_only(store, lambda f, k, d, n: import_files(store, f, k, d, n)),
                      [c["files"], c["kind"], c["dataset"], c["per_item"]], c["report"], api_visibility="private")
    c["load"] = [(admin_only(store, lambda: users_rows(store), 1), None, c["users"]),
                 (admin_only(store, lambda: audit_rows(store), 1), None, c["audit_table"]),
                 (admin_only(store, lambda: gr.update(choices=browse.dataset_names(store)), 1), None,
                  c["queue_dataset"]), c["quality_load"], *c["release_load"]]
    return c
