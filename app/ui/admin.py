"""The Admin tab's Models panel: fine-tune InfoMetIC on a dataset's labels,
watch the job, cancel it, compare versions' held-out figures and activate one
(the same calls as `/api/models`, app/server/training.py)."""
from __future__ import annotations

import gradio as gr

from capscope.annotation import browse
from capscope.annotation import model_versions as mv
from capscope.annotation.errors import AnnotationError
from capscope.db import Store
from capscope.server.training import DEFAULT_HOLDOUT, DEFAULT_MINUTES, Activations, TrainingJobs
from capscope.ui.explore import admin_only

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
        head = f"Job {job['id']} on **{job['dataset']}**: {job['status']}"
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
        return f"Not started: {err}"
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
        return f"Not activated: {err}"
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
