"""The Admin tab's label quality section: control items and a dataset's control
rate, gold by a consensus method, and each annotator's quality as a table and a
plot (annotation/controls.py and annotation/consensus.py do the work)."""
from __future__ import annotations

import html

import gradio as gr

from capscope.annotation import agreement, browse, controls
from capscope.annotation.consensus import METHODS
from capscope.annotation.refusals import AnnotationError
from capscope.db import Store
from capscope.ui.shared import admin_only

QUALITY_HEADERS = ["annotator", "judgements", "controls", "control accuracy", "95% interval", "quality (model)",
                   "agreement with gold", "s per item", "flagged"]
MAX_IDS = 1000


def _share(value) -> str:
    return "" if value is None else f"{value:.3f}"


def quality_rows(rows: list[dict]) -> list[list]:
    shown = [[r["annotator"], r["judgements"], r["controls"], _share(r["control_accuracy"]),
              "" if r["control_interval"] is None else f"{r['control_interval'][0]:.3f}-{r['control_interval'][1]:.3f}",
              _share(r["quality"]), _share(r["agreement_with_consensus"]),
              "" if r["mean_time_s"] is None else f"{r['mean_time_s']:.1f}", "yes" if r["flagged"] else ""]
             for r in rows]
    return shown or [[""] * len(QUALITY_HEADERS)]


def quality_plot(rows: list[dict]):
    """Each annotator's control accuracy with its 95% interval (bars) and the model's estimate (diamonds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 0.5 + 0.45 * max(len(rows), 1)))
    for place, row in enumerate(rows):
        if row["control_interval"] is not None:
            low, high = row["control_interval"]
            axes.plot([low, high], [place, place], color="#1f77b4", linewidth=3, alpha=0.6)
            axes.plot(row["control_accuracy"], place, "o", color="#1f77b4",
                      label="control accuracy, 95% interval" if place == 0 else None)
        if row["quality"] is not None:
            axes.plot(row["quality"], place, "D", color="#d62728", markersize=5,
                      label="quality (Dawid-Skene estimate)" if place == 0 else None)
    axes.set_yticks(range(len(rows)), [r["annotator"] + (" (flagged)" if r["flagged"] else "") for r in rows])
    axes.set_xlim(0, 1)
    axes.set_xlabel("accuracy on semantic words and regions")
    axes.invert_yaxis()
    if rows:
        axes.legend(loc="lower left", fontsize=8)
    figure.tight_layout()
    plt.close(figure)
    return figure


def show_quality(store: Store, dataset: str):
    """(settings text, rate, flag threshold, show answers, table, plot) for a dataset."""
    if not dataset:
        return "", gr.skip(), gr.skip(), gr.skip(), quality_rows([]), None
    try:
        settings = controls.control_settings(store, dataset)
        rows = controls.annotator_quality(store, dataset)
    except AnnotationError as err:
        return f"**Not found:** {html.escape(str(err))}", gr.skip(), gr.skip(), gr.skip(), quality_rows([]), None
    return (_settings_text(settings), settings["rate"], settings["min_accuracy"], settings["show_answers"],
            quality_rows(rows), quality_plot(rows))


def _settings_text(settings: dict) -> str:
    threshold = "nobody flagged" if settings["min_accuracy"] is None else \
        f"flagged under {settings['min_accuracy']:.2f} control accuracy"
    return (f"Dataset **{html.escape(settings['dataset'])}**: controls are {settings['rate']:.0%} of what each "
            f"annotator is handed; answers {'shown' if settings['show_answers'] else 'not shown'} after a control; "
            f"{threshold}.")


def save_settings(store: Store, dataset: str, rate, flag_below, show_answers) -> str:
    if not dataset:
        return "**Not saved:** choose a dataset."
    try:
        threshold = None if flag_below in (None, "") else float(flag_below)
        return _settings_text(controls.set_control_settings(store, dataset, float(rate or 0), min_accuracy=threshold,
                                                            show_answers=bool(show_answers)))
    except (AnnotationError, ValueError) as err:
        return f"**Not saved:** {html.escape(str(err))}"


def parse_ids(text: str) -> list[int]:
    """Item ids from "3, 7 12": numbers separated by commas or spaces."""
    parts = (text or "").replace(",", " ").split()
    if len(parts) > MAX_IDS:
        raise ValueError(f"at most {MAX_IDS} item ids at once")
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ValueError("item ids are whole numbers separated by commas or spaces") from None


def mark_controls(store: Store, text: str, control: bool) -> str:
    """Mark (or unmark) the listed items; stops at the first item refused and says which."""
    try:
        ids = parse_ids(text)
    except ValueError as err:
        return f"**Not changed:** {html.escape(str(err))}"
    if not ids:
        return "**Not changed:** give item ids."
    done = 0
    for item_id in ids:
        try:
            controls.set_control(store, item_id, control)
        except AnnotationError as err:
            return f"{done} changed; **stopped at item {item_id}:** {html.escape(str(err))}"
        done += 1
    return f"{done} items {'marked as controls' if control else 'no longer controls'}."


def make_gold(store: Store, dataset: str, method: str, token_rule: str) -> str:
    if not dataset:
        return "**No gold written:** choose a dataset."
    try:
        done = agreement.gold_by_consensus(store, dataset, method, token_rule=token_rule)
    except AnnotationError as err:
        return f"**No gold written:** {html.escape(str(err))}"
    return f"Gold written for **{done['written']}** items by **{done['method']}** (controls keep theirs)."


def build_label_quality(store: Store, c: dict, token_rule: str) -> None:
    gr.Markdown("### Label quality\nControls are items with gold, mixed into every annotator's queue without a "
                "sign; their answers measure each annotator. Gold can come from the majority, from Dawid-Skene "
                "(each annotator's own error rates) or from the model as one more voice.", elem_id="cs-quality-intro")
    with gr.Row():
        c["quality_dataset"] = gr.Dropdown(label="Dataset", choices=[], allow_custom_value=True,
                                           elem_id="cs-quality-dataset")
        c["quality_rate"] = gr.Number(label="Control rate (0-0.5)", value=controls.DEFAULT_CONTROL_RATE,
                                      minimum=0, maximum=controls.MAX_CONTROL_RATE, elem_id="cs-quality-rate")
        c["quality_flag"] = gr.Number(label="Flag below control accuracy", value=None, minimum=0, maximum=1,
                                      elem_id="cs-quality-flag")
        c["quality_answers"] = gr.Checkbox(label="Show a control's answer after submit", value=False)
        c["quality_save"] = gr.Button("Save", elem_id="cs-quality-save")
    with gr.Row():
        c["quality_ids"] = gr.Textbox(label="Item ids (with gold)", max_length=20_000, elem_id="cs-quality-ids")
        c["quality_mark"] = gr.Button("Make controls", elem_id="cs-quality-mark")
        c["quality_unmark"] = gr.Button("No longer controls")
        c["quality_method"] = gr.Radio(list(METHODS), value="majority", label="Gold by",
                                       elem_id="cs-quality-method")
        c["quality_gold"] = gr.Button("Write gold", elem_id="cs-quality-gold")
    c["quality_message"] = gr.Markdown(elem_id="cs-quality-message")
    c["quality_table"] = gr.Dataframe(headers=QUALITY_HEADERS, interactive=False, elem_id="cs-quality-table")
    c["quality_plot"] = gr.Plot(label="Annotator quality", elem_id="cs-quality-plot")
    shown = [c["quality_message"], c["quality_rate"], c["quality_flag"], c["quality_answers"], c["quality_table"],
             c["quality_plot"]]
    refresh = admin_only(store, lambda d: show_quality(store, d))
    c["quality_dataset"].change(refresh, c["quality_dataset"], shown, api_visibility="private")
    c["quality_save"].click(admin_only(store, lambda d, r, f, a: save_settings(store, d, r, f, a)),
                            [c["quality_dataset"], c["quality_rate"], c["quality_flag"], c["quality_answers"]],
                            c["quality_message"], api_visibility="private")
    c["quality_mark"].click(admin_only(store, lambda text: mark_controls(store, text, True)), c["quality_ids"],
                            c["quality_message"], api_visibility="private")
    c["quality_unmark"].click(admin_only(store, lambda text: mark_controls(store, text, False)), c["quality_ids"],
                              c["quality_message"], api_visibility="private")
    c["quality_gold"].click(admin_only(store, lambda d, m: make_gold(store, d, m, token_rule)),
                            [c["quality_dataset"], c["quality_method"]], c["quality_message"],
                            api_visibility="private", concurrency_id="db", concurrency_limit=4)
    c["quality_load"] = (admin_only(store, lambda: gr.update(choices=browse.dataset_names(store)), 1), None,
                         c["quality_dataset"])
