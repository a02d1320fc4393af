"""The Admin tab's **Compare captioners** panel: rows that `capscope score` (or
`capscope diagnose`) wrote for several captioners, named inside the server's
data roots, added up as `capscope diagnose` adds them (capscope.diagnose.summary):
the same tables and plots, and a click on a word lists the captions where that
model's word was judged wrong."""
from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr

from capscope.diagnose.error_types import TYPES, type_source
from capscope.diagnose.report import plot_error_types, plot_scores
from capscope.diagnose.run import scored_rows
from capscope.diagnose.summary import Diagnosis
from capscope.metrics.errors import CapscopeError
from capscope.server.data_roots import DataRoots

MAX_LISTED = 50   # captions listed for one clicked word
WORD_HEADERS = ["model", "metric", "word", "judged", "wrong", "rate"]


def named_files(text: str, roots: DataRoots) -> list[tuple[str, Path]]:
    """NAME=FILE lines (scored rows inside the data roots); CapscopeError saying what is wrong."""
    files = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        name, sep, path = line.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise CapscopeError(f"each line is NAME=FILE, not {line.strip()!r}")
        checked = roots.check(path.strip(), "file")
        if not checked.is_file():
            raise CapscopeError(f"{path.strip()}: no such file")
        files.append((name.strip(), checked))
    if not files:
        raise CapscopeError("name at least one scored file, as NAME=FILE")
    if len({n for n, _ in files}) != len(files):
        raise CapscopeError("each captioner needs a name of its own")
    return files


def compare(text: str, roots: DataRoots, draws: int = 1000) -> tuple:
    """(message, overview rows, comparison rows, word rows, scores plot, kinds plot, the files)."""
    from capscope.metrics.text import load_spacy

    try:
        files = named_files(text, roots)
    except CapscopeError as err:
        return f"**Not run:** {err}", [], [], [], None, None, []
    nlp = load_spacy()
    diagnosis = Diagnosis(None, nlp, type_source(nlp))
    for name, path in files:
        diagnosis.add_rows(name, scored_rows(path))
    summary = diagnosis.summary(draws=draws)
    folder = Path(tempfile.mkdtemp(prefix="capscope-compare-"))
    scores_png, kinds_png = folder / "scores.png", folder / "error_types.png"
    overview = [[name, m["n_captions"], m["n_images"], m["n_errors"]] for name, m in summary["models"].items()]
    compared = [[c["a"], c["b"], c["metric"], c["key"], c["n_images"], round(c["mean_difference"], 4),
                 _interval(c["ci95"]), c["a_wins"], c["b_wins"], c["ties"]] for c in summary["comparisons"]]
    words = [[name, metric, w["word"], w["judged"], w["wrong"], round(w["wrong_rate"], 3)]
             for name, m in summary["models"].items() for metric, s in m["metrics"].items()
             for w in s["top_wrong_words"]]
    message = (f"{len(files)} captioners, metrics {', '.join(summary['metrics']) or 'none'}; kinds of words by "
               f"{summary['type_source']}. " + kinds_line(summary))
    return (message, overview, compared, words, str(scores_png) if plot_scores(summary, scores_png) else None,
            str(kinds_png) if plot_error_types(summary, kinds_png) else None, [[n, str(p)] for n, p in files])


def kinds_line(summary: dict) -> str:
    """Per model and metric, the share of its errors of each kind, in one line each."""
    lines = []
    for name, model in summary["models"].items():
        for metric, s in model["metrics"].items():
            if s["words"]["judged"]:
                shares = ", ".join(f"{t} {s['error_types'][t]['share_of_errors']:.0%}" for t in TYPES)
                lines.append(f"\n- **{name}**, {metric}: wrong rate {s['words']['wrong_rate']:.3f}; errors: {shares}")
    return "".join(lines)


def _interval(ci) -> str:
    return "" if not ci or ci[0] is None else f"[{ci[0]:.4f}, {ci[1]:.4f}]"


def wrong_captions(files: list[list[str]], model: str, metric: str, word: str) -> list[list[str]]:
    """The captions of `model` whose `word` `metric` judged wrong: [id, caption], at most MAX_LISTED."""
    path = next((Path(p) for n, p in files if n == model), None)
    if path is None:
        return []
    out = []
    for row in scored_rows(path):
        correct = (row["metrics"].get(metric) or {}).get("token_correct") or []
        if any(t["text"].lower() == word and c is False for t, c in zip(row["tokens"], correct)):
            out.append([str(row.get("id")), row["caption"]])
            if len(out) >= MAX_LISTED:
                break
    return out


def build_compare(guard, data_roots: DataRoots | None = None) -> dict:
    """The panel; `guard(fn)` wraps each handler for admins only."""
    roots = data_roots or DataRoots()
    c: dict = {}
    gr.Markdown("### Compare captioners\nScored rows of several captioners (`capscope score` or `capscope diagnose` "
                "output, inside the server's data roots), one `NAME=FILE` per line: what each gets wrong, and whether "
                "one is better. Click a word to list the captions where it was judged wrong.")
    c["files_text"] = gr.Textbox(label="Scored files (NAME=FILE per line)", lines=3, elem_id="cs-compare-files")
    c["run"] = gr.Button("Compare", elem_id="cs-compare-run")
    c["message"] = gr.Markdown(elem_id="cs-compare-message")
    c["overview"] = gr.Dataframe(headers=["model", "captions", "images", "not scored"], interactive=False)
    with gr.Row():
        c["scores_plot"] = gr.Image(label="Main scores, 95% intervals", interactive=False, buttons=[])
        c["kinds_plot"] = gr.Image(label="Wrong rate by kind of word", interactive=False, buttons=[])
    c["comparisons"] = gr.Dataframe(headers=["a", "b", "metric", "score", "images", "a − b", "95% interval",
                                             "a wins", "b wins", "ties"], interactive=False)
    c["words"] = gr.Dataframe(headers=WORD_HEADERS, interactive=False, elem_id="cs-compare-words")
    c["captions"] = gr.Dataframe(headers=["id", "caption"], interactive=False, wrap=True, elem_id="cs-compare-captions")
    files = gr.State([])

    def run(text):
        return compare(text, roots)

    def on_word(named, evt: gr.SelectData):
        row = evt.row_value
        if not row:
            return gr.skip()
        model, metric, word = row[:3]
        return wrong_captions(named, str(model), str(metric), str(word))

    c["run"].click(guard(run), c["files_text"], [c["message"], c["overview"], c["comparisons"], c["words"],
                                                  c["scores_plot"], c["kinds_plot"], files],
                   api_name="compare_captioners")
    c["words"].select(guard(on_word), files, c["captions"], api_visibility="private")
    return c
