"""Explore (dataset table, item view: model against gold), Benchmark (metrics
against gold labels, score distributions, agreement, exports) and Admin
(import, users). Plain functions first, Gradio wiring last."""
from __future__ import annotations

import html
import logging

import gradio as gr

from capscope.annotation import agreement, browse, export, removed_regions
from capscope.annotation.refusals import AnnotationError, Invalid
from capscope.annotation.gold import gold_history
from capscope.annotation.users import get_user
from capscope.annotation.votes import load_item
from capscope.common.limits import MAX_REGIONS, finite_number
from capscope.db import Store
from capscope.metrics.images import read_image
from capscope.metrics.registry import metric_title
from capscope.pictures import draw as ui_draw
from capscope.ui.caption_shading import shaded_tokens, token_metrics, token_segments
from capscope.ui.shared import DatasetScores, admin_only, dataset_choices, is_admin, rounded

log = logging.getLogger(__name__)

PAGE_SIZE = 25
TABLE_COLUMNS = ["item", "id", "dataset", "caption", "submitted", "needed", "in progress", "disagreement",
                 "uncertainty", "flags", "gold"]


# ---------------------------------------------------------------- scoring whole datasets


# ---------------------------------------------------------------- explore

def table_rows(page: dict) -> list[list]:
    rows = []
    for item in page["items"]:
        row = [item["item_id"], item["id"], item["dataset"], item["caption"], item["submitted"], item["needed"],
               item["in_progress"], item["disagreement"], rounded(item["uncertainty"]), item["flags"],
               "✓" if item["has_gold"] else ""]
        if "score" in item:
            row.append(rounded(item["score"]))
        rows.append(row)
    return rows


def _bound(value) -> float | None:
    """A typed score bound; empty or not a number means none."""
    try:
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None


def sort_choices(store: Store) -> list[tuple[str, str]]:
    choices = [(name, name) for name in browse.SORTS]
    choices += [(f"score: {metric_title(m)} {k}", f"score:{m}:{k}") for m, k in browse.score_keys(store)]
    return choices


def explore_page(store: Store, dataset, status, sort, descending, annotator, search, page,
                 low=None, high=None) -> tuple[list[list], str, list[str]]:
    """One page of the table; a `score:metric:key` sort also keeps scores within [low, high]."""
    low, high = _bound(low), _bound(high)
    score = tuple(sort.split(":", 2)[1:]) if sort and sort.startswith("score:") else None
    result = browse.list_items(store, dataset=dataset or None, status=status or "all", search=search or None,
                               sort="id" if score else (sort or "id"), descending=bool(descending),
                               annotator=annotator or None, score=score, score_range=(low, high),
                               page=max(1, int(page or 1)), page_size=PAGE_SIZE)
    pages = max(1, -(-result["total"] // PAGE_SIZE))
    headers = TABLE_COLUMNS + (["score"] if score else [])
    return table_rows(result), f"{result['total']} items · page {result['page']} of {pages}", headers


def gold_and_model(store: Store, scores: DatasetScores, item_id: int, metric: str | None) -> tuple:
    """(gold overlay, model overlay, gold tokens, model tokens, note) for one item."""
    item = load_item(store, item_id)
    if item is None:
        return None, None, [], [], f"No item {item_id}."
    gold_overlay, gold_tokens, image = _gold_views(item)
    row = scores.score_item(item)
    metric = metric if metric in row["metrics"] else next((m for m in token_metrics() if m in row["metrics"]),
                                                          next(iter(row["metrics"]), None))
    boxes = ui_draw.shown_boxes(item.regions)
    model_overlay = ui_draw.score_overlay(image, boxes, (row["metrics"].get(metric) or {}).get("region_scores"),
                                          (row["metrics"].get(metric) or {}).get("region_mentioned"),
                                          masks=ui_draw.shown_masks(item.regions))
    note = f"{_gold_note(store, item)} · model: {metric_title(metric)}"
    return gold_overlay, model_overlay, gold_tokens, shaded_tokens(row, metric), note


def _gold_views(item) -> tuple:
    """(gold overlay, gold tokens, the image) of an item: adjudicated gold, else the votes' majority."""
    labels = export.captokeneval_row(item)
    image = read_image(item.image_path)
    mentioned = {i for i, r in enumerate(labels["regions"]) if r["label"] == "mentioned"}
    segments = token_segments(item.text, item.tokens)
    tokens = [(text, 1.0 if t["label"] == "incorrect" else -0.4 if t["label"] == "correct" else None)
              for text, t in zip(segments, labels["tokens"])]
    return ui_draw.labels_overlay(image, ui_draw.shown_boxes(item.regions), mentioned,
                                  masks=ui_draw.shown_masks(item.regions)), tokens, image


def _gold_note(store: Store, item) -> str:
    revisions = gold_history(store, item.caption_id)
    source = f"gold: {item.gold.source}, revision {len(revisions)}" if item.gold else "no gold yet: the votes' majority"
    return f"**{item.external_id}** · {source} · {len(item.judgements)} judgements"


def adjudicate_click(store: Store, admin_name: str, item_id: int, token: int | None = None,
                     point=None) -> tuple:
    """Flip one gold label of an item by a click on a word (incorrect <-> correct) or
    on a region (mentioned <-> unmentioned), starting from the shown labels;
    saved at once as a new gold revision. Returns (gold overlay, gold tokens, note)."""
    admin = get_user(store, admin_name)
    item = load_item(store, item_id)
    if item is None:
        raise AnnotationError(f"no item {item_id}")
    labels = export.captokeneval_row(item)
    tokens = [t["label"] for t in labels["tokens"]]
    regions = [r["label"] for r in labels["regions"]]
    if token is not None:
        tokens[token] = "correct" if tokens[token] == "incorrect" else "incorrect"
    else:
        index = ui_draw.clicked_region(ui_draw.shown_boxes(item.regions), (item.width, item.height), point)
        if index is None:
            overlay, words, _ = _gold_views(item)
            return overlay, words, _gold_note(store, item) + " · no region under that point"
        regions[index] = "unmentioned" if regions[index] == "mentioned" else "mentioned"
    agreement.adjudicate(store, admin, item_id, tokens, regions)
    item = load_item(store, item_id)
    overlay, words, _ = _gold_views(item)
    return overlay, words, _gold_note(store, item) + " · saved"


def remove_region_click(store: Store, admin_name: str, item_id: int, number) -> tuple:
    """Remove region `number` (as drawn, from 1) of the item's image (annotation/removed_regions.py):
    its votes go, it stays in the history. Returns (gold overlay, gold tokens, note)."""
    if isinstance(number, bool) or not finite_number(number) or number != int(number) or number < 1:
        raise Invalid("give the number of the region to remove, as drawn (1, 2, ...)")
    outcome = removed_regions.remove_region(store, get_user(store, admin_name), item_id, int(number) - 1)
    item = load_item(store, item_id)
    overlay, words, _ = _gold_views(item)
    changed = outcome["judgements_changed"]
    return overlay, words, (f"{_gold_note(store, item)} · region {int(number)} removed; "
                            f"{changed} judgement{'s' * (changed != 1)} lost their votes on it")


# ---------------------------------------------------------------- admin


# ---------------------------------------------------------------- Gradio wiring

def build_explore(store: Store, scores: DatasetScores) -> dict:
    c: dict = {}
    with gr.Row():
        c["dataset"] = gr.Dropdown(label="Dataset", choices=[("all datasets", "")], value="", allow_custom_value=True,
                                   scale=1)
        c["status"] = gr.Dropdown(label="Status", choices=list(browse.STATUS_FILTERS), value="all", scale=1)
        c["sort"] = gr.Dropdown(label="Sort by", choices=list(browse.SORTS), value="id", scale=2)
        c["descending"] = gr.Checkbox(label="Descending", value=False, scale=1)
        c["annotator"] = gr.Dropdown(label="Annotator", choices=[("everyone", "")], value="", allow_custom_value=True,
                                     scale=1)
        c["search"] = gr.Textbox(label="Search caption or id", scale=2, elem_id="cs-explore-search")
        c["page"] = gr.Number(label="Page", value=1, precision=0, minimum=1, scale=1)
    with gr.Row():
        c["low"] = gr.Textbox(label="Score at least (with a score sort; Enter)", placeholder="no bound")
        c["high"] = gr.Textbox(label="Score at most (Enter)", placeholder="no bound")
    c["total"] = gr.Markdown(elem_id="cs-explore-total")
    c["table"] = gr.Dataframe(headers=TABLE_COLUMNS, interactive=False, wrap=True, elem_id="cs-explore-table",
                              column_widths=["4%", "12%", "7%", "26%", "8%", "6%", "7%", "11%", "9%", "5%", "5%"],
                              max_height=420)
    gr.Markdown("Select a row to compare the model with the gold labels.")
    c["note"] = gr.Markdown(elem_id="cs-explore-note")
    c["item"] = gr.State(None)  # the item whose gold is shown
    with gr.Row():
        c["gold_image"] = gr.Image(label="Gold: mentioned regions (green)", interactive=False, buttons=[], height=320,
                                   elem_id="cs-explore-gold")
        c["model_image"] = gr.Image(label="Model: region scores (magenta dashed = not mentioned)", interactive=False,
                                    buttons=[], height=320)
    with gr.Row():
        c["remove_number"] = gr.Number(label="Region to remove (its number on the picture)", precision=0,
                                       minimum=1, maximum=MAX_REGIONS, scale=1, elem_id="cs-explore-remove-number")
        c["remove"] = gr.Button("Remove region: votes on it go, the history keeps it", variant="stop", scale=2,
                                elem_id="cs-explore-remove-region")
    with gr.Row():
        c["gold_tokens"] = gr.HighlightedText(label="Gold: red = incorrect · click a word or a region to change "
                                                    "the gold label (every change is kept)", interactive=False,
                                              elem_id="cs-explore-gold-tokens")
        c["model_tokens"] = gr.HighlightedText(label="Model: red = unsupported", interactive=False)

    filters = [c[k] for k in ("dataset", "status", "sort", "descending", "annotator", "search", "page", "low", "high")]

    def refresh(dataset, status, sort, descending, annotator, search, page, low, high):
        rows, total, headers = explore_page(store, dataset, status, sort, descending, annotator, search, page,
                                            low, high)
        return gr.update(value=rows, headers=headers), total

    for component in filters:
        event = component.submit if isinstance(component, gr.Textbox) else component.change
        event(admin_only(store, refresh), filters, [c["table"], c["total"]], api_visibility="private")

    def choices():
        return (gr.update(choices=dataset_choices(store)),
                gr.update(choices=[("everyone", "")] + [(n, n) for n in browse.annotator_names(store)]),
                gr.update(choices=sort_choices(store)))

    c["load"] = [(admin_only(store, choices, 3), None, [c["dataset"], c["annotator"], c["sort"]]),
                 (admin_only(store, refresh, 2), filters, [c["table"], c["total"]])]

    def on_row(table, evt: gr.SelectData):
        row = evt.row_value if evt.row_value is not None else None
        if not row:
            return tuple(gr.skip() for _ in range(6))
        return (*gold_and_model(store, scores, int(row[0]), None), int(row[0]))

    views = [c["gold_image"], c["model_image"], c["gold_tokens"], c["model_tokens"], c["note"], c["item"]]
    c["table"].select(admin_only(store, on_row), c["table"], views, api_visibility="private", concurrency_id="model",
                      concurrency_limit=1)

    def adjudicate(item_id, request: gr.Request, **where):
        if item_id is None or not is_admin(store, request):
            return gr.skip(), gr.skip(), gr.skip()
        try:
            return adjudicate_click(store, request.username, int(item_id), **where)
        except AnnotationError as err:
            return gr.skip(), gr.skip(), f"**Not saved:** {err}"

    def on_gold_token(item_id, evt: gr.SelectData, request: gr.Request):
        return adjudicate(item_id, request, token=evt.index)

    def on_gold_region(item_id, evt: gr.SelectData, request: gr.Request):
        return adjudicate(item_id, request, point=evt.index)

    def on_remove(item_id, number, request: gr.Request):
        if item_id is None or not is_admin(store, request):
            return gr.skip(), gr.skip(), gr.skip()
        try:
            return remove_region_click(store, request.username, int(item_id), number)
        except AnnotationError as err:
            return gr.skip(), gr.skip(), f"**Not removed:** {html.escape(str(err))}"

    gold_views = [c["gold_image"], c["gold_tokens"], c["note"]]
    c["remove"].click(on_remove, [c["item"], c["remove_number"]], gold_views, api_visibility="private",
                      concurrency_id="db", concurrency_limit=4)
    c["gold_tokens"].select(on_gold_token, c["item"], gold_views, api_visibility="private", trigger_mode="multiple",
                            concurrency_id="db", concurrency_limit=4)
    c["gold_image"].select(on_gold_region, c["item"], gold_views, api_visibility="private", trigger_mode="multiple",
                           concurrency_id="db", concurrency_limit=4)
    return c


