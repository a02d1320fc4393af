"""The **Compare** tab (admins only), comparing captioners: several captioners' scored
captions, from files that `capscope score` (or `capscope diagnose`) wrote
inside the server's data roots or from captions datasets in the store by their
`model` field, added up by the function `capscope diagnose` adds them up with
(capscope.diagnose.summary.add_up): the same tables and plots; a click on a word lists
the captions where that model's word was judged wrong, and a click on one of
them opens its image in Inspect with the captioners' captions of it."""
from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

from capscope.annotation.captioners import captioners, stored_rows
from capscope.db import Store
from capscope.diagnose.diagnosis import DiagnosisSummary
from capscope.diagnose.error_types import TYPES
from capscope.diagnose.report import plot_error_types, plot_scores
from capscope.diagnose.run import named_file, scored_rows
from capscope.diagnose.summary import add_up, image_key
from capscope.common.errors import CapscopeError
from capscope.metrics.images import ImageError, read_image
from capscope.server.data_roots import DataRoots
from capscope.ui.shared import SCORING_EVENTS, scratch_copy, scratch_folder

MAX_LISTED = 50   # captions listed for one clicked word
WORD_HEADERS = ["model", "metric", "word", "judged", "wrong", "rate"]
CAPTION_HEADERS = ["model", "id", "image", "caption"]
PICK_SEPARATOR = "\t"


def named_files(text: str, roots: DataRoots) -> list[dict]:
    """NAME=FILE lines (scored rows inside the data roots) as sources; CapscopeError saying what is wrong."""
    files = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        named = named_file(line.strip(), "each line is")
        checked = roots.check(str(named.path), "file")
        if not checked.is_file():
            raise CapscopeError(f"{named.path}: no such file")
        files.append({"name": named.name, "file": str(checked)})
    return files


def store_choices(store: Store | None) -> list[tuple[str, str]]:
    """(label, value) for each captioner in the store."""
    if store is None:
        return []
    return [(f"{model} · {dataset} ({n} captions)", f"{dataset}{PICK_SEPARATOR}{model}")
            for dataset, model, n in captioners(store)]


def picked_captioners(picked: list[str] | None) -> list[dict]:
    """Store captioners picked in the panel as sources, named by their model
    (and dataset, when one model is picked from two datasets)."""
    pairs = [tuple(value.split(PICK_SEPARATOR, 1)) for value in picked or []]
    models = [model for _, model in pairs]
    return [{"name": model if models.count(model) == 1 else f"{model} ({dataset})", "dataset": dataset, "model": model}
            for dataset, model in pairs]


def sources_of(text: str, picked: list[str] | None, roots: DataRoots) -> list[dict]:
    sources = named_files(text, roots) + picked_captioners(picked)
    if not sources:
        raise CapscopeError("name at least one scored file, as NAME=FILE, or pick a captioner in the store")
    if len({s["name"] for s in sources}) != len(sources):
        raise CapscopeError("each captioner needs a name of its own")
    return sources


def source_rows(source: dict, store: Store | None, token_rule: str):
    """A source's score rows, one at a time (a stored captioner's decided by `token_rule`)."""
    if "file" in source:
        return scored_rows(Path(source["file"]))
    if store is None:
        raise CapscopeError("no store to read captioners from")
    return stored_rows(store, source["dataset"], source["model"], token_rule)


def compare(text: str, roots: DataRoots, draws: int = 1000, picked: list[str] | None = None,
            store: Store | None = None, *, token_rule: str) -> tuple:
    """(message, overview rows, comparison rows, word rows, scores plot, kinds plot, the sources)."""
    try:
        sources = sources_of(text, picked, roots)
    except CapscopeError as err:
        return f"**Not run:** {err}", [], [], [], None, None, []
    summary = add_up((s["name"], source_rows(s, store, token_rule)) for s in sources).summary(draws=draws)
    folder = scratch_folder("compare-")
    scores_png, kinds_png = folder / "scores.png", folder / "error_types.png"
    message = (f"{len(sources)} captioners, metrics {', '.join(summary.metrics) or 'none'}; kinds of words by "
               f"{summary.type_source}. " + kinds_line(summary) + cautions(summary))
    return (message, overview_rows(summary), comparison_rows(summary), word_rows(summary),
            str(scores_png) if plot_scores(summary, scores_png) else None,
            str(kinds_png) if plot_error_types(summary, kinds_png) else None, sources)


def overview_rows(summary: DiagnosisSummary) -> list[list]:
    return [[name, m.n_captions, m.n_images, m.n_errors] for name, m in summary.models.items()]


def comparison_rows(summary: DiagnosisSummary) -> list[list]:
    return [[c.a, c.b, c.metric, c.key, c.n_images, round(c.mean_difference, 4), _interval(c.ci95), c.a_wins,
             c.b_wins, c.ties] for c in summary.comparisons]


def word_rows(summary: DiagnosisSummary) -> list[list]:
    """Each model's most often wrong words under each metric (WORD_HEADERS)."""
    return [[name, metric, w.word, w.judged, w.wrong, round(w.wrong_rate, 3)]
            for name, m in summary.models.items() for metric, s in m.metrics.items() for w in s.top_wrong_words]


def cautions(summary: DiagnosisSummary) -> str:
    """What the report says first, said here too: the demo model scored, a metric whose verdicts look like chance."""
    lines = []
    if summary.provenance and summary.provenance.demo:
        lines.append("⚠ **The demo model scored these captions**: it knows coloured shapes, not photos.")
    lines += [f"⚠ {html.escape(warning.text)}" for warning in summary.warnings]
    return "".join(f"\n\n{line}" for line in lines)


def kinds_line(summary: DiagnosisSummary) -> str:
    """Per model and metric, the share of its errors of each kind, in one line each."""
    lines = []
    for name, model in summary.models.items():
        for metric, s in model.metrics.items():
            if s.words.judged:
                shares = ", ".join(f"{t} {s.error_types[t].share_of_errors:.0%}" for t in TYPES)
                lines.append(f"\n- **{html.escape(name)}**, {metric}: wrong rate {s.words.wrong_rate:.3f}; "
                             f"errors: {shares}")
    return "".join(lines)


def _interval(ci) -> str:
    return "" if not ci or ci[0] is None else f"[{ci[0]:.4f}, {ci[1]:.4f}]"


def wrong_captions(sources: list[dict], model: str, metric: str, word: str, store: Store | None = None, *,
                   token_rule: str) -> list[list[str]]:
    """The captions of `model` whose `word` `metric` judged wrong: [model, id, image, caption], at most MAX_LISTED."""
    source = next((s for s in sources if s["name"] == model), None)
    if source is None:
        return []
    out = []
    for row in source_rows(source, store, token_rule):
        correct = (row["metrics"].get(metric) or {}).get("token_correct") or []
        if any(t["text"].lower() == word and c is False for t, c in zip(row["tokens"], correct)):
            out.append([model, str(row.get("id")), image_key(row), row["caption"]])
            if len(out) >= MAX_LISTED:
                break
    return out


def captions_of_image(sources: list[dict], image: str, store: Store | None, token_rule: str) -> list[tuple[str, dict]]:
    """(captioner, its first row of `image`) for each captioner that captioned it, in panel order."""
    found = []
    for source in sources:
        row = next((r for r in source_rows(source, store, token_rule) if image_key(r) == image), None)
        if row is not None:
            found.append((source["name"], row))
    return found


def open_in_inspect(sources: list[dict], model: str, image: str, roots: DataRoots, store: Store | None = None, *,
                    token_rule: str) -> dict:
    """What Inspect is filled with for a clicked caption: its image, the clicked
    captioner's caption as A and the next captioner's caption of the same image
    as B, the row's regions; CapscopeError when the image cannot be opened."""
    found = captions_of_image(sources, image, store, token_rule)
    found.sort(key=lambda item: item[0] != model)  # the clicked captioner first
    if not found:
        raise CapscopeError(f"no captioner has a caption of {image}")
    try:
        checked = roots.check(image, "file")
        read_image(checked)  # readable, within the limits: else one line here, not a broken Inspect
        picture = scratch_copy(checked)
    except (ImageError, OSError) as err:
        raise CapscopeError(f"{image}: {err}") from None
    regions = [{"box": r["box"]} for r in found[0][1].get("regions") or []] or None
    (name_a, row_a), (name_b, row_b) = found[0], (found[1] if len(found) > 1 else (None, None))
    others = [f"**{html.escape(name)}**: {html.escape(row['caption'])}" for name, row in found[2:]]  # for Markdown
    return {"image": picture, "caption_a": row_a["caption"], "name_a": name_a,
            "caption_b": row_b["caption"] if row_b else "", "name_b": name_b, "regions": regions, "others": others}


def build_compare(guard, data_roots: DataRoots | None = None, store: Store | None = None, *,
                  token_rule: str) -> dict:
    """The panel, a stored captioner's verdicts decided by `token_rule` (the server's);
    `guard(fn)` wraps each handler for admins only. `c["load"]`
    fills the store's captioners when the page loads; `link_to_inspect` wires
    the jump to Inspect."""
    roots = data_roots or DataRoots()
    c: dict = {"roots": roots, "store": store, "token_rule": token_rule}
    gr.Markdown("### Compare captioners\nScored captions of several captioners: files that `capscope score` or "
                "`capscope diagnose` wrote (inside the server's data roots, one `NAME=FILE` per line), or captions "
                "datasets in the store by the model that wrote them (`capscope import --model`; their stored "
                "predictions). What each gets wrong, and whether one is better. Click a word to list the captions "
                "where it was judged wrong, then a caption to open its image in Inspect with the captioners' captions.")
    with gr.Row():
        c["files_text"] = gr.Textbox(label="Scored files (NAME=FILE per line)", lines=3, elem_id="cs-compare-files",
                                     scale=3)
        c["picked"] = gr.CheckboxGroup(label="Captioners in the store", choices=[], elem_id="cs-compare-store",
                                       scale=2)
    c["run"] = gr.Button("Compare", elem_id="cs-compare-run")
    c["message"] = gr.Markdown(elem_id="cs-compare-message")
    c["overview"] = gr.Dataframe(headers=["model", "captions", "images", "not scored"], interactive=False)
    # one plot a row: each holds a subplot per metric, unreadable at half the page's width
    c["scores_plot"] = gr.Image(label="Main scores, 95% intervals", interactive=False, buttons=[])
    c["kinds_plot"] = gr.Image(label="Wrong rate by kind of word", interactive=False, buttons=[])
    c["comparisons"] = gr.Dataframe(headers=["a", "b", "metric", "score", "images", "a − b", "95% interval",
                                             "a wins", "b wins", "ties"], interactive=False)
    c["words"] = gr.Dataframe(headers=WORD_HEADERS, interactive=False, elem_id="cs-compare-words")
    c["captions"] = gr.Dataframe(headers=CAPTION_HEADERS, interactive=False, wrap=True, elem_id="cs-compare-captions",
                                 label="Captions where the word was judged wrong (click one to open it in Inspect)")
    c["sources"] = gr.State([])

    def run(text, picked):
        return compare(text, roots, picked=picked, store=store, token_rule=token_rule)

    def on_word(sources, evt: gr.SelectData):
        row = evt.row_value
        if not row:
            return gr.skip()
        model, metric, word = row[:3]
        return wrong_captions(sources, str(model), str(metric), str(word), store, token_rule=token_rule)

    def choices():
        return gr.CheckboxGroup(choices=store_choices(store))

    c["run"].click(guard(run), [c["files_text"], c["picked"]],
                   [c["message"], c["overview"], c["comparisons"], c["words"], c["scores_plot"], c["kinds_plot"],
                    c["sources"]], api_name="compare_captioners")
    c["words"].select(guard(on_word), c["sources"], c["captions"], api_visibility="private")
    c["load"] = [(guard(choices, outputs=1), None, c["picked"])]
    return c


def link_to_inspect(c: dict, inspect: dict, tabs, guard) -> None:
    """A click on a listed caption opens its image in Inspect, the clicked
    captioner's caption as A, the next captioner's as B, both scored."""
    def on_caption(sources, evt: gr.SelectData):
        row = evt.row_value
        if not row:
            return (gr.skip(),) * 7
        try:
            found = open_in_inspect(sources, str(row[0]), str(row[2]), c["roots"], c["store"],
                                    token_rule=c["token_rule"])
        except CapscopeError as err:
            return (gr.skip(),) * 6 + (f"**Not opened:** {err}",)
        names = [html.escape(found["name_a"]), html.escape(found["name_b"] or "no other captioner")]  # as text
        note = f"Opened **{names[0]}** (A) and **{names[1]}** (B) in Inspect."
        if found["others"]:
            note += " Also captioned by " + "; ".join(found["others"])
        return (gr.Tabs(selected="inspect"), found["image"],
                gr.Textbox(value=found["caption_a"], label=f"Caption A · {found['name_a']}"),
                gr.Textbox(value=found["caption_b"], label=f"Caption B · {found['name_b'] or 'none'}"),
                found["regions"], None, note)

    opened = c["captions"].select(
        guard(on_caption), c["sources"],
        [tabs, inspect["image"], inspect["caption_a"], inspect["caption_b"], inspect["regions"], inspect["example"],
         c["message"]], api_visibility="private")
    for fn, inputs, outputs in inspect["scorers"]:
        opened = opened.then(fn, inputs, outputs, api_visibility="private", **SCORING_EVENTS)
