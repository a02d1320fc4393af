"""Explore (dataset table, item view: model against gold), Benchmark (metrics
against gold labels, score distributions, agreement, exports) and Admin
(import, users). Plain functions first, Gradio wiring last."""
from __future__ import annotations

import inspect
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import gradio as gr

from capscope.ui import draw as ui_draw
from capscope.annotation import agreement, browse, export, importer, queue
from capscope.annotation.errors import AnnotationError
from capscope.annotation.gold import gold_history
from capscope.annotation.users import add_user, get_user, list_users
from capscope.annotation.votes import iter_items, load_item
from capscope.server.data_roots import DataRoots
from capscope.db import Store, data_dir
from capscope.metrics.constants import DEFAULT_TOKEN_RULE
from capscope.metrics.images import read_image
from capscope.metrics.registry import SPECS, metric_title
from capscope.ui.benchmark import build_people_agreement
from capscope.ui.inspect import shaded_tokens, token_metrics, token_segments
from capscope.server.scorer import Models

log = logging.getLogger(__name__)

PAGE_SIZE = 25
TABLE_COLUMNS = ["item", "id", "dataset", "caption", "submitted", "needed", "in progress", "disagreement",
                 "uncertainty", "flags", "gold"]
FIGURES = ["text_accuracy", "vision_accuracy", "incorrect_token_f1", "incorrect_token_auroc", "region_auroc"]


# ---------------------------------------------------------------- scoring whole datasets

class DatasetScores:
    """Model rows for dataset items (scored on the items' own tokens and
    regions), kept in memory and stored as predictions in the database."""

    def __init__(self, store: Store, models: Models):
        self.store, self.models = store, models
        self.rows: dict[int, dict] = {}

    def score_item(self, item) -> dict:
        """`item` is a votes.ItemData."""
        if item.caption_id not in self.rows:
            image = read_image(item.image_path)
            self.rows[item.caption_id] = self.models.score(
                image, item.text, item.references or None,
                regions=[{"box": r["box"], "mask": r.get("mask")} for r in item.regions],  # as `capscope evaluate`
                tokens=[{k: t[k] for k in ("text", "start", "end", "semantic")} for t in item.tokens])
        return self.rows[item.caption_id]

    def score_dataset(self, dataset: str | None, limit: int, progress=None) -> list[tuple[dict, dict]]:
        """[(CapTokenEval item, model row)] for up to `limit` items; predictions stored."""
        pairs = []
        for item in iter_items(self.store, dataset):
            if len(pairs) >= limit:
                break
            try:
                row = self.score_item(item)
            except Exception as err:  # one unreadable image must not stop the run
                log.warning("item %s not scored: %s", item.external_id, err)
                continue
            pairs.append((export.captokeneval_row(item), row))
            if progress is not None:
                progress(len(pairs) / max(limit, 1), desc=f"scored {len(pairs)} items")
        self.store_predictions(pairs)
        return pairs

    def store_predictions(self, pairs: list[tuple[dict, dict]]) -> None:
        by_dataset: dict[str, list[dict]] = {}
        for gold, row in pairs:
            by_dataset.setdefault(gold["dataset"], []).append({**row, "id": gold["id"], "error": None})
        for dataset, rows in by_dataset.items():
            with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as handle:
                for row in rows:
                    handle.write(json.dumps(row) + "\n")
            try:
                importer.import_predictions(self.store, Path(handle.name), dataset)
            finally:
                Path(handle.name).unlink(missing_ok=True)


def evaluation_rows(pairs: list[tuple[dict, dict]]) -> list[list]:
    """One table row per metric, plus the trivial rule, of the `capscope evaluate` figures."""
    from capscope.bench.gold import evaluate

    if not pairs:
        return []
    items = [gold for gold, _ in pairs]
    metrics = [m for m in dict.fromkeys(m for _, row in pairs for m in row["metrics"])
               if any(_judges_units(row["metrics"].get(m)) for _, row in pairs)]
    table, trivial = [], None
    for metric in metrics:
        predictions = [_aligned_prediction(gold, row["metrics"].get(metric)) for gold, row in pairs]
        figures = evaluate(items, predictions, metric)
        trivial = figures["trivial"]
        table.append([metric_title(metric), figures["n_items"], *[_round(figures[f]) for f in FIGURES]])
    if trivial:
        table.append(["trivial rule (all correct / none mentioned)", len(items),
                      *[_round(trivial[f]) for f in FIGURES]])
    return table


def _judges_units(result: dict | None) -> bool:
    """Whether a metric says anything per token or region (CLIP-S, PAC-S do not)."""
    result = result or {}
    return any(v is not None for v in result.get("token_scores") or []) or bool(result.get("region_scores"))


def _aligned_prediction(gold: dict, result: dict | None) -> dict:
    """The metric's per-unit verdicts, with None where it gave none, one per gold token and region."""
    result = result or {}
    out = {}
    for kind, keys in (("tokens", ("token_scores", "token_correct")),
                       ("regions", ("region_scores", "region_mentioned"))):
        size = len(gold[kind])
        for key in keys:
            values = result.get(key) or []
            out[key] = list(values) if len(values) == size else [None] * size
    return out


def _round(value):
    return None if value is None else round(float(value), 3)


def distribution_plot(pairs: list[tuple[dict, dict]]):
    """Histograms of each metric's main score, clean and polluted captions apart when ids tell them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(dict.fromkeys(m for _, row in pairs for m in row["metrics"]))
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(3.2 * max(1, len(metrics)), 2.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        key = SPECS[metric].primary_key if metric in SPECS else None
        groups: dict[str, list[float]] = {}
        for gold, row in pairs:
            scores = (row["metrics"].get(metric) or {}).get("scores", {})
            value = scores.get(key) if key in scores else next(iter(scores.values()), None)
            if value is None:
                continue
            group = "polluted" if "pollut" in gold["id"] else "clean" if "clean" in gold["id"] else "all"
            groups.setdefault(group, []).append(float(value))
        for group, values in sorted(groups.items()):
            ax.hist(values, bins=12, alpha=0.6, label=f"{group} ({len(values)})")
        ax.set_title(f"{metric_title(metric)} {key or ''}", fontsize=9)
        ax.tick_params(labelsize=7)
        if groups:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def agreement_tables(store: Store, dataset: str | None) -> tuple[str, list[list], list[list]]:
    report = agreement.agreement_report(store, dataset or None)

    def line(kind: str) -> str:
        figures = report[kind]
        shown = {k: v for k, v in figures.items() if isinstance(v, (int, float)) or v is None}
        return f"**{kind}**: " + ", ".join(f"{k} {_fmt(v)}" for k, v in shown.items())

    summary = f"{report['items_with_judgements']} items with judgements · {line('tokens')} · {line('regions')}"
    annotators = [[a["annotator"], a["judgements"], _round(a["mean_time_s"]), _round(a["incorrect_token_rate"]),
                   _round(a["mentioned_region_rate"]), _round(a["token_agreement_with_others"]),
                   _round(a["mean_token_cohen_kappa"]), _round(a["mean_region_cohen_kappa"])]
                  for a in report["annotators"]]
    pairs = [[p["a"], p["b"], p["token_units"], _round(p["token_cohen_kappa"]), p["region_units"],
              _round(p["region_cohen_kappa"])] for p in report["pairs"]]
    return summary, annotators, pairs


def _fmt(value) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def export_file(store: Store, fmt: str, dataset: str | None = None) -> str:
    """Write an export to a fresh temporary file and return its path."""
    folder = Path(tempfile.mkdtemp(prefix="capscope-export-"))
    path = folder / f"{export.export_stem(dataset)}.{export.EXTENSIONS[fmt]}"
    with path.open("w", encoding="utf-8", newline="") as handle:
        export.export_to_file(store, fmt, handle, dataset or None)
    return str(path)


def benchmark_zip(store: Store, dataset: str | None = None) -> str:
    """A zip of the CapTokenEval file with its images (`export_benchmark`): a
    benchmark to hand to others; `capscope evaluate --gold` reads it unzipped."""
    folder = Path(tempfile.mkdtemp(prefix="capscope-benchmark-"))
    return str(export.export_benchmark_zip(store, folder, export.export_stem(dataset), dataset or None))


# ---------------------------------------------------------------- explore

def table_rows(page: dict) -> list[list]:
    rows = []
    for item in page["items"]:
        row = [item["item_id"], item["id"], item["dataset"], item["caption"], item["submitted"], item["needed"],
               item["in_progress"], item["disagreement"], _round(item["uncertainty"]), item["flags"],
               "✓" if item["has_gold"] else ""]
        if "score" in item:
            row.append(_round(item["score"]))
        rows.append(row)
    return rows


def _bound(value) -> float | None:
    """A typed score bound; empty or not a number means none."""
    try:
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None


def dataset_choices(store: Store) -> list[tuple[str, str]]:
    return [("all datasets", "")] + [(name, name) for name in browse.dataset_names(store)]


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
    boxes = [r["box"] for r in item.regions]
    model_overlay = ui_draw.score_overlay(image, boxes, (row["metrics"].get(metric) or {}).get("region_scores"),
                                          (row["metrics"].get(metric) or {}).get("region_mentioned"))
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
    return ui_draw.labels_overlay(image, [r["box"] for r in item.regions], mentioned), tokens, image


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
        index = ui_draw.clicked_region([r["box"] for r in item.regions], (item.width, item.height), point)
        if index is None:
            overlay, words, _ = _gold_views(item)
            return overlay, words, _gold_note(store, item) + " · no region under that point"
        regions[index] = "unmentioned" if regions[index] == "mentioned" else "mentioned"
    agreement.adjudicate(store, admin, item_id, tokens, regions)
    item = load_item(store, item_id)
    overlay, words, _ = _gold_views(item)
    return overlay, words, _gold_note(store, item) + " · saved"


# ---------------------------------------------------------------- admin

def import_files(store: Store, files: list[str], kind: str, dataset: str, per_item: int) -> str:
    """Copy uploaded files into the data folder and import the one JSONL among them."""
    files = [Path(f) for f in files or []]
    listing = [f for f in files if f.suffix == ".jsonl"]
    if len(listing) != 1:
        return "Upload exactly one .jsonl file (plus its images)."
    folder = data_dir() / "imports" / f"{time.strftime('%Y%m%d-%H%M%S')}-{dataset}"
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for f in files:
        if f.suffix != ".jsonl":
            shutil.copy(f, folder / "images" / f.name)
    target = folder / listing[0].name
    shutil.copy(listing[0], target)
    _point_images_at(target, folder / "images")
    options = importer.ImportOptions(dataset=dataset or "default", annotators_per_item=int(per_item), progress=False,
                                     regions="classic")
    try:
        if kind == "captokeneval":
            report = importer.import_captokeneval(store, target, options, folder / "images")
        else:
            report = importer.import_captions(store, target, folder / "images", options)
    except AnnotationError as err:
        return f"**Import failed:** {err}"
    errors = "".join(f"\n- {e}" for e in report.errors[:20])
    return report.summary() + errors


def _point_images_at(listing: Path, images: Path) -> None:
    """Uploaded images arrive flat: make each row's `image` its bare file name."""
    lines = []
    for line in listing.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                row = json.loads(line)
                if isinstance(row, dict) and isinstance(row.get("image"), str):
                    row["image"] = Path(row["image"]).name
                line = json.dumps(row, ensure_ascii=False)
            except json.JSONDecodeError:
                pass  # the importer reports it with its line number
        lines.append(line)
    listing.write_text("\n".join(lines) + "\n", encoding="utf-8")


def users_rows(store: Store) -> list[list]:
    return [[u.name, u.role] for u in list_users(store)]


def add_user_action(store: Store, name: str, password: str, role: str) -> tuple[str, list[list]]:
    try:
        user = add_user(store, (name or "").strip(), password or "", role)
    except AnnotationError as err:
        return f"**Not added:** {err}", users_rows(store)
    return f"User **{user.name}** ({user.role}) added.", users_rows(store)


def queue_text(view: dict) -> str:
    upcoming = ", ".join(str(i) for i in view["next"]) or "nothing left"
    return (f"Dataset **{view['dataset']}**: order **{view['order']}**, seed {view['seed']}, "
            f"{view['ranked']} items ranked. Next items: {upcoming}.")


def show_queue(store: Store, dataset: str):
    """(order, seed, text) of the dataset's queue; nothing changed without a dataset."""
    if not dataset:
        return gr.skip(), gr.skip(), ""
    try:
        view = queue.queue_view(store, dataset)
    except AnnotationError as err:
        return gr.skip(), gr.skip(), f"**Not found:** {err}"
    return view["order"], view["seed"], queue_text(view)


def apply_queue_order(store: Store, dataset: str, order: str, seed, token_rule: str = DEFAULT_TOKEN_RULE) -> str:
    """The Apply order button: `queue.set_queue_order`, its result as text."""
    if not dataset:
        return "**Not applied:** choose a dataset."
    try:
        seed = int(seed or 0)
        return queue_text(queue.set_queue_order(store, dataset, order, seed, token_rule=token_rule))
    except (AnnotationError, ValueError) as err:
        return f"**Not applied:** {err}"


# ---------------------------------------------------------------- Gradio wiring

def is_admin(store: Store, request) -> bool:
    name = getattr(request, "username", None)
    try:
        return bool(name) and get_user(store, name).is_admin
    except AnnotationError:
        return False


def admin_only(store: Store, fn, outputs: int | None = None):
    """`fn` for admins only: the hidden tabs' endpoints stay reachable through
    the API, so every call checks the caller's role in the store. Others get
    an error, or with `outputs` (page loads) nothing changed."""
    signature = inspect.signature(fn)
    request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                annotation=gr.Request)

    def guarded(*args):
        if not is_admin(store, args[-1] if args else None):
            if outputs is not None:
                return gr.skip() if outputs == 1 else tuple(gr.skip() for _ in range(outputs))
            raise gr.Error("This needs the admin role.")
        return fn(*args[:-1])

    guarded.__signature__ = signature.replace(parameters=[*signature.parameters.values(), request])
    # Gradio finds event data, progress and request through type hints, not the signature
    guarded.__annotations__ = {**getattr(fn, "__annotations__", {}), "request": gr.Request}
    guarded.__name__ = getattr(fn, "__name__", "admin_call")
    return guarded


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
                              column_widths=["5%", "14%", "6%", "35%", "6%", "6%", "6%", "6%", "6%", "5%", "5%"],
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

    gold_views = [c["gold_image"], c["gold_tokens"], c["note"]]
    c["gold_tokens"].select(on_gold_token, c["item"], gold_views, api_visibility="private", trigger_mode="multiple",
                            concurrency_id="db", concurrency_limit=4)
    c["gold_image"].select(on_gold_region, c["item"], gold_views, api_visibility="private", trigger_mode="multiple",
                           concurrency_id="db", concurrency_limit=4)
    return c


def build_benchmark(store: Store, scores: DatasetScores, data_roots: DataRoots | None = None) -> dict:
    c: dict = {}
    gr.Markdown("Each metric against the gold labels (the `capscope evaluate` figures, on the items' own tokens "
                "and regions), with the trivial rule beside it. Scoring stores the model's predictions, so that "
                "Explore can sort by score and uncertainty and Annotate can show them as suggestions.")
    with gr.Row():
        c["dataset"] = gr.Dropdown(label="Dataset", choices=[("all datasets", "")], value="", allow_custom_value=True)
        c["limit"] = gr.Slider(4, 500, value=48, step=4, label="Items to score", elem_id="cs-bench-limit")
        c["run"] = gr.Button("Score and evaluate", variant="primary", elem_id="cs-bench-run")
    c["figures"] = gr.Dataframe(headers=["metric", "items", *FIGURES], interactive=False, label="Against gold",
                                 elem_id="cs-bench-figures")
    c["plot"] = gr.Plot(label="Score distributions")
    people = build_people_agreement(scores.models, lambda fn, outputs=None: admin_only(store, fn, outputs),
                                    data_roots)
    gr.Markdown("### Agreement")
    c["agreement_button"] = gr.Button("Refresh agreement", size="sm")
    c["agreement"] = gr.Markdown()
    c["annotators"] = gr.Dataframe(headers=["annotator", "judgements", "mean s", "incorrect-token rate",
                                            "mentioned-region rate", "token agreement", "token κ", "region κ"],
                                   interactive=False, label="Per annotator")
    c["pairs"] = gr.Dataframe(headers=["a", "b", "token units", "token κ", "region units", "region κ"],
                              interactive=False, label="Annotator pairs (Cohen's κ)")
    build_export(store, c, c["dataset"])

    def run(dataset, limit, progress=gr.Progress()):
        pairs = scores.score_dataset(dataset or None, int(limit), progress)
        return evaluation_rows(pairs), distribution_plot(pairs)

    # its own queue: it takes the model one item at a time, so inspect calls get in between
    c["run"].click(admin_only(store, run), [c["dataset"], c["limit"]], [c["figures"], c["plot"]], api_name="evaluate",
                   concurrency_id="bulk", concurrency_limit=1)
    c["agreement_button"].click(admin_only(store, lambda d: agreement_tables(store, d)), c["dataset"],
                                [c["agreement"], c["annotators"], c["pairs"]], api_name="agreement")
    c["load"] = [(admin_only(store, lambda: gr.update(choices=dataset_choices(store)), 1), None, c["dataset"]),
                 *people["load"]]
    return c


def _exporter(store: Store, fmt: str):
    def export_(dataset: str | None = None) -> str:
        return export_file(store, fmt, dataset or None)
    return export_


def build_export(store: Store, c: dict, dataset=None, api: bool = True) -> None:
    """Export buttons: each writes the file and offers it for download."""
    gr.Markdown("### Export")
    with gr.Row():
        buttons = {fmt: gr.Button(f"Export {fmt}", size="sm") for fmt in export.FORMATS}
        bundle = gr.Button("Benchmark with images (.zip)", size="sm")
    c["export_file"] = gr.File(label="Export", interactive=False, height=90)
    for fmt, button in buttons.items():
        visibility = {"api_name": f"export_{fmt}"} if api else {"api_visibility": "private"}
        button.click(admin_only(store, _exporter(store, fmt)), dataset, c["export_file"],
                     **visibility)
    bundle.click(admin_only(store, lambda d=None: benchmark_zip(store, d or None)), dataset, c["export_file"],
                 **({"api_name": "export_benchmark_zip"} if api else {"api_visibility": "private"}))


def build_admin(store: Store, token_rule: str = DEFAULT_TOKEN_RULE) -> dict:
    c: dict = {}
    with gr.Row():
        with gr.Column():
            gr.Markdown("### Users")
            c["name"] = gr.Textbox(label="Name", elem_id="cs-admin-name")
            c["password"] = gr.Textbox(label="Password", type="password", elem_id="cs-admin-password")
            c["role"] = gr.Radio(["annotator", "admin"], value="annotator", label="Role")
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
                "the model's least certain first, or the items annotators disagree on first.")
    with gr.Row():
        c["queue_dataset"] = gr.Dropdown(label="Dataset", choices=[], allow_custom_value=True,
                                         elem_id="cs-admin-queue-dataset")
        c["queue_order"] = gr.Radio(list(queue.ORDERS), value="sequential", label="Order",
                                    elem_id="cs-admin-queue-order")
        c["queue_seed"] = gr.Number(label="Seed", value=0, precision=0, minimum=0, elem_id="cs-admin-queue-seed")
        c["queue_apply"] = gr.Button("Apply order", elem_id="cs-admin-queue-apply")
    c["queue_result"] = gr.Markdown(elem_id="cs-admin-queue-result")
    build_export(store, c, None, api=False)
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
                 (admin_only(store, lambda: gr.update(choices=browse.dataset_names(store)), 1), None,
                  c["queue_dataset"])]
    return c
