"""The Benchmark tab's "Agreement with people": `capscope correlate` on a
human-judgement file (a path on the server, or an uploaded file whose images it
names by absolute path), scored by the server's one scorer. The table has the
command line's rows (bench.report.table) and the figure is its `--plot`.

The server path and every image the file names must lie inside the server's
data roots (`capscope serve --data-root`, capscope.server.data_roots): else the run
is refused with one line."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import pandas as pd

from capscope.bench import human_correlation as C, correlation_report as R
from capscope.bench.human import BENCHMARKS, Loaded, load
from capscope.common.errors import CapscopeError, first_line, with_type
from capscope.common.paths import safe_name
from capscope.metrics.registry import metric_names
from capscope.server.data_roots import DataRoots
from capscope.server.scoring import Models
from capscope.ui.benchmark_runs import (DEFAULT_DRAWS, ROWS_PER_PROGRESS_STEP, SharedScorer, check_metrics_and_draws,
                                        demo_folder, tab_roots)
from capscope.ui.shared import scratch_folder

log = logging.getLogger(__name__)

DEFAULT_BENCHMARK = "flickr8k-expert"
DEMO_JUDGEMENT_SCENES = 24
DEMO_JUDGEMENT_SEED = 1         # not the seed of the demo dataset's scenes (0)


@dataclass
class AgreementView:
    """What the section shows: a one-line message, the table (header and rows),
    notes (statistic, protocol, sources), the command line's text and the figure."""
    message: str
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    notes: str = ""
    text: str = ""
    figure: str | None = None


def chosen_data(server_path: str | None, upload: str | None, roots: DataRoots | None = None) -> Path:
    """The judgement file or folder: the upload when there is one, else the
    server path, which must lie inside the data roots (OutsideDataRoots)."""
    if upload:
        return Path(upload)
    text = (server_path or "").strip().strip("'\"")
    if not text:
        raise ValueError("give the path of a judgement file or folder on the server, or upload a file")
    return (roots or DataRoots()).check(text, "path")


def check_images(loaded: Loaded, roots: DataRoots, source: str) -> None:
    """Every image the judgement file names lies inside the data roots; else
    OutsideDataRoots names the first that does not (before anything is read)."""
    for row in loaded.rows:
        image = row.get("image") if isinstance(row, dict) else getattr(row, "image", None)
        if isinstance(image, (str, Path)):
            path = Path(image) if Path(image).is_absolute() else Path(loaded.base_dir) / image
            roots.check(path, f"image named in {source}:")


def check_choices(models: Models, benchmark: str | None, metrics: list[str] | None, draws) -> int:
    """The number of bootstrap draws; ValueError with one line for a bad choice."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"pick a benchmark: one of {', '.join(BENCHMARKS)}")
    return check_metrics_and_draws(models, metrics, draws)


def load_judgements(benchmark: str, data: Path, uploaded: bool, seed: int):
    loaded = load(benchmark, data, seed=seed)
    if not loaded.rows:
        first = loaded.problems[0] if loaded.problems else "empty file"
        hint = (" (an uploaded file finds its images only by absolute path: give its path on the server instead)"
                if uploaded else "")
        raise ValueError(f"no usable rows in {data.name} ({len(loaded.problems)} problems, e.g. {first}){hint}")
    return loaded


def agreement_with_people(models: Models, benchmark: str | None, server_path: str | None, upload: str | None,
                          metrics: list[str] | None, draws=DEFAULT_DRAWS, seed: int = 0,
                          roots: DataRoots | None = None) -> AgreementView:
    """`capscope correlate` for the page; a bad choice, file or layout, or a
    path outside the data roots (`roots`, default the data folder), gives a
    one-line message and nothing else."""
    started = time.perf_counter()
    roots = roots or DataRoots()
    try:
        draws = check_choices(models, benchmark, metrics, draws)
        data = chosen_data(server_path, upload, roots)
        loaded = load_judgements(benchmark, data, bool(upload), seed)
        check_images(loaded, roots, "the upload" if upload else data.name if data.is_file() else f"{data.name}/")
        outcome = C.correlate(loaded, SharedScorer(models, metrics, roots), list(metrics),
                              batch_size=ROWS_PER_PROGRESS_STEP, bootstrap=draws, seed=seed,
                              token_rule=models.token_rule, beta=models.scorer.beta, progress=True)
    except (ValueError, OSError, CapscopeError) as err:
        return AgreementView(f"**Not run:** {first_line(err)}")
    except Exception as err:  # the page shows one line; the log keeps the traceback
        log.exception("agreement with people failed")
        return AgreementView(f"**Not run:** {with_type(err)}")
    return view_of(outcome, time.perf_counter() - started)


def view_of(outcome: C.Outcome, seconds: float) -> AgreementView:
    result = outcome.result
    unit = {"rating": "judgements", "pairwise": "pairs"}.get(result["kind"], "items")
    skipped = f"; {result['n_problems']} rows skipped (first: {outcome.problems[0]})" if outcome.problems else ""
    message = f"{result['benchmark']}: {result['n']} {unit} scored in {seconds:.1f} s{skipped}."
    text = R.format_result(result)
    if result["kind"] == "token":
        return AgreementView(message, notes=f"```\n{text}\n```", text=text)
    header, rows = R.table(result)
    notes = "  \n".join(line.strip() for line in [*R.header(result).splitlines(), *R.source_lines(result)])
    return AgreementView(message, header, rows, notes, text, figure_file(result, outcome.points))


def figure_file(result: dict, points: dict) -> str | None:
    if not points:
        return None
    from capscope.bench.plot import correlation_plot

    path = scratch_folder("correlate-") / f"{safe_name(result['benchmark'])}.png"
    correlation_plot(result, points, path)
    return str(path)


def demo_judgements(folder: Path | None = None) -> str:
    """The demo world's judgement file (Flickr8k-Expert layout), written on first use."""
    from capscope.demo.judgements import JUDGEMENTS_FILE, write_judgements

    folder = folder or demo_folder()
    path = folder / JUDGEMENTS_FILE
    if not path.is_file():
        write_judgements(folder, DEMO_JUDGEMENT_SCENES, DEMO_JUDGEMENT_SEED, progress=False)
    return str(path)


# ---------------------------------------------------------------- Gradio wiring

def outputs_of(view: AgreementView) -> tuple:
    table = pd.DataFrame(view.rows, columns=view.header or ["score"])    # empty: a cleared table, not 1 2 3
    return view.message, table, view.notes, view.text, view.figure


def build_people_agreement(models: Models, guard, data_roots: DataRoots | None = None) -> dict:
    """The section's components and events; `guard(fn, outputs=None)` lets
    admins only call `fn` (see shared.admin_only). Paths and images must
    lie inside `data_roots` (default the data folder)."""
    c: dict = {}
    roots = tab_roots(data_roots)
    gr.Markdown("### Agreement with people\nHow each metric's scores agree with human judgements on a public "
                "benchmark (`capscope correlate`: Kendall τ, Pearson or accuracy with a bootstrap 95% interval, "
                "the papers' published values beside). The file's layouts are in docs/human-judgements.md; images are "
                "looked up beside the file, so give its path on the server (an uploaded file must name its "
                "images by absolute path). The file and its images must lie inside the server's data roots "
                "(`capscope serve --data-root DIR`).")
    with gr.Row():
        c["benchmark"] = gr.Dropdown(list(BENCHMARKS), value=DEFAULT_BENCHMARK, label="Benchmark", scale=1,
                                     elem_id="cs-people-benchmark")
        c["path"] = gr.Textbox(label="Judgement file or folder on the server", scale=3, elem_id="cs-people-path",
                               placeholder="e.g. a folder with flickr8k.json and images/")
        c["upload"] = gr.File(label="…or upload a file (used instead of the path)", type="filepath", scale=2,
                              file_types=[".json", ".jsonl", ".csv"], height=130)
    with gr.Row():
        # every candidate until the page loads (API callers are checked against these), then those that loaded
        c["metrics"] = gr.CheckboxGroup(label="Metrics", choices=list(models.wanted or metric_names()), scale=3,
                                        elem_id="cs-people-metrics")
        c["draws"] = gr.Number(label="Bootstrap draws (0: none)", value=DEFAULT_DRAWS, precision=0, minimum=0,
                               scale=1)
        with gr.Column(scale=1):
            c["run"] = gr.Button("Correlate", variant="primary", elem_id="cs-people-run")
            c["demo"] = gr.Button("Use the demo world's judgements", size="sm", elem_id="cs-people-demo")
    c["message"] = gr.Markdown(elem_id="cs-people-message")
    c["table"] = gr.Dataframe(interactive=False, label="Agreement with people (x100; * the papers' statistic)",
                              elem_id="cs-people-table", wrap=True)
    c["notes"] = gr.Markdown(elem_id="cs-people-notes")
    c["figure"] = gr.Image(label="Score against the human judgement", interactive=False, buttons=[],
                           elem_id="cs-people-figure", type="filepath")
    with gr.Accordion("As the command line prints it", open=False):
        c["text"] = gr.Code(language=None, interactive=False, elem_id="cs-people-text")

    def run(benchmark, path, upload, metrics, draws, progress=gr.Progress(track_tqdm=True)):
        return outputs_of(agreement_with_people(models, benchmark, path, upload, metrics, draws, roots=roots))

    # the "bulk" queue of the tab's other scoring run: one at a time, Inspect calls get in between rows
    c["run"].click(guard(run), [c["benchmark"], c["path"], c["upload"], c["metrics"], c["draws"]],
                   [c["message"], c["table"], c["notes"], c["text"], c["figure"]], api_name="correlate",
                   concurrency_id="bulk", concurrency_limit=1)
    c["demo"].click(guard(lambda: (DEFAULT_BENCHMARK, demo_judgements())), None, [c["benchmark"], c["path"]],
                    api_visibility="private")

    def metric_choices():
        return gr.update(choices=models.available, value=models.available)

    c["load"] = [(guard(metric_choices, 1), None, c["metrics"])]
    return c
