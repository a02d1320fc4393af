"""The Benchmark tab: each metric against the gold labels (`build_benchmark`,
the `capscope evaluate` figures), the annotators' agreement, exports, and
"Agreement with people": `capscope correlate` on a
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

from capscope.annotation import agreement
from capscope.annotation.release import releases_folder
from capscope.bench import human_correlation as C, correlation_report as R
from capscope.bench.human import BENCHMARKS, Loaded, load
from capscope.db import Store, data_dir
from capscope.common.errors import CapscopeError, first_line, with_type
from capscope.common.paths import safe_name
from capscope.metrics.registry import SPECS, metric_names, metric_title
from capscope.server.data_roots import DataRoots
from capscope.server.scoring import Models
from capscope.ui.shared import (
    DatasetScores, admin_only, build_export, dataset_choices, formatted, rounded, scratch_folder,
)

log = logging.getLogger(__name__)

DEFAULT_BENCHMARK = "flickr8k-expert"
DEFAULT_DRAWS = 1000
ROWS_PER_PROGRESS_STEP = 8      # the scorer takes one row at a time; the bar moves every few rows
DEMO_JUDGEMENT_SCENES = 24
DEMO_JUDGEMENT_SEED = 1         # not the seed of the demo dataset's scenes (0)


class SharedScorer:
    """The server's scorer as `bench.correlate` calls it: `score_batch` row by
    row through `Models.score` (its lock: API and Inspect calls get in between
    two rows), limited to the chosen metrics; a row that cannot be scored gets
    its error, as the Scorer's own rows do. An image named by path must lie
    inside the data roots (else the row's error says so)."""

    def __init__(self, models: Models, metrics: list[str], roots: DataRoots | None = None):
        self.models, self.chosen = models, list(metrics)
        self.roots = roots or DataRoots()

    @property
    def demo(self) -> bool:
        return self.models.demo

    @property
    def nlp(self):
        return self.models.scorer.nlp

    def word_threshold_scale(self, metric: str) -> float:
        return self.models.scorer.word_threshold_scale(metric)

    def score_batch(self, rows: list[dict], base_dir: Path | None = None) -> list[dict]:
        return [self._one(row, base_dir) for row in rows]

    def _one(self, row: dict, base_dir: Path | None) -> dict:
        image = row["image"]
        try:
            if isinstance(image, (str, Path)):
                if base_dir is not None and not Path(image).is_absolute():
                    image = Path(base_dir) / image
                image = self.roots.check(image, "image")
            return self.models.score(image, row["caption"], row.get("references"), regions=row.get("regions"),
                                     tokens=row.get("tokens"), metrics=self.chosen)
        except CapscopeError as err:
            return {"id": row.get("id"), "metrics": {}, "tokens": [], "error": str(err)}


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


def check_metrics_and_draws(models: Models, metrics: list[str] | None, draws) -> int:
    """The number of bootstrap draws; ValueError with one line for no metric, one not loaded, or bad draws."""
    if not metrics:
        raise ValueError("pick at least one metric")
    missing = [m for m in metrics if m not in models.available]
    if missing:
        raise ValueError(f"not loaded on this server: {', '.join(missing)} (loaded: {', '.join(models.available)})")
    try:
        draws = int(draws)
    except (TypeError, ValueError):
        raise ValueError(f"bootstrap draws must be a whole number, not {draws!r}") from None
    if draws < 0:
        raise ValueError("bootstrap draws must be 0 or more")
    return draws


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


def demo_folder() -> Path:
    """Where the server writes the demo world's files (capscope.ui.page seeds it too)."""
    return data_dir() / "demo-data"


def tab_roots(data_roots: DataRoots | None) -> DataRoots:
    """The folders the tab reads: the server's data roots and the demo world's
    folder, which holds only files the server wrote itself (so that "Use the
    demo world's judgements" works whatever --data-root says)."""
    return (data_roots or DataRoots()).extended([demo_folder()])


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


# ---------------------------------------------------------------- a release's leaderboard

@dataclass
class LeaderboardView:
    """What the section shows: a one-line message and the three tables (header, rows)."""
    message: str
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)


def release_folders() -> list[str]:
    """The release folders in the data folder's `releases/` (where the Admin tab writes them), by name."""
    folder = releases_folder()
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.iterdir() if p.is_dir() and (p / "metadata.json").is_file())


def release_leaderboard(models: Models, server_path: str | None, metrics: list[str] | None, draws=DEFAULT_DRAWS,
                        roots: DataRoots | None = None, progress: bool = True) -> LeaderboardView:
    """`capscope evaluate --benchmark` for the page, scored by the server's scorer: the folder
    (absolute, or relative to the data folder), every file of the release and every image
    must lie inside the data roots; a bad choice or release gives one line and nothing else."""
    from capscope.bench.leaderboard import WordTyping, difference_table, evaluate_release, table, type_table
    from capscope.bench.release_check import check_release
    from capscope.diagnose.error_types import TYPES, caption_types, type_source

    roots = roots or DataRoots()
    try:
        draws = check_metrics_and_draws(models, metrics, draws)
        text = (server_path or "").strip().strip("'\"")
        if not text:
            raise ValueError("give the path of a release folder on the server")
        folder = Path(text).expanduser()
        folder = roots.check(folder if folder.is_absolute() else data_dir() / folder, "release folder")
        release = check_release(folder, opener=lambda path: roots.open_checked(path, "release file"))
        scorer = SharedScorer(models, metrics, roots)
        nlp = models.scorer.nlp
        typing = WordTyping(lambda caption, tokens: caption_types(caption, tokens, nlp), type_source(nlp), TYPES)
        board = evaluate_release(release, scorer, list(metrics), typing, token_rule=models.token_rule,
                                 beta=models.scorer.beta, draws=draws,
                                 batch_size=ROWS_PER_PROGRESS_STEP, progress=progress)
    except (ValueError, OSError, CapscopeError) as err:
        return LeaderboardView(f"**Not run:** {first_line(err)}")
    except Exception as err:  # the page shows one line; the log keeps the traceback
        log.exception("release leaderboard failed")
        return LeaderboardView(f"**Not run:** {with_type(err)}")
    b, words = board["benchmark"], next(iter(board["metrics"].values()))["words"]
    failed = sum(m["n_errors"] for m in board["metrics"].values())
    message = (f"{b['name']} {b['version']}: {board['n_items']} items on {board['n_images']} images "
               f"({b['controls']} controls, included), {words['n']} labelled words ({words['n_positive']} wrong); "
               f"95% intervals from {board['draws']} bootstrap draws over images; word types from "
               f"{board['type_source']}." + (f" {failed} item scorings failed." if failed else ""))
    return LeaderboardView(message, [table(board), type_table(board), difference_table(board)])


def build_release_leaderboard(models: Models, guard, data_roots: DataRoots | None = None) -> dict:
    """The section: a release folder on the server, metrics, draws; its leaderboard tables."""
    c: dict = {}
    roots = tab_roots(data_roots)
    gr.Markdown("### Leaderboard of a release\nA benchmark release (`capscope release`, the Admin tab's "
                "Releases) checked against its sha256 and scored by this server's models: word and region AUROC, "
                "AP and F1 with 95% bootstrap intervals over images, word AUROC by word type, and paired "
                "differences (`capscope evaluate --benchmark DIR`, docs/formats.md §6.1). The folder must lie "
                "inside the server's data roots; a relative path starts at the data folder.")
    with gr.Row():
        c["path"] = gr.Dropdown(label="Release folder on the server", choices=[], allow_custom_value=True, scale=3,
                                elem_id="cs-release-board-path")
        c["metrics"] = gr.CheckboxGroup(label="Metrics", choices=list(models.wanted or metric_names()), scale=3,
                                        elem_id="cs-release-board-metrics")
        c["draws"] = gr.Number(label="Bootstrap draws", value=DEFAULT_DRAWS, precision=0, minimum=0, scale=1)
        c["run"] = gr.Button("Leaderboard", variant="primary", scale=1, elem_id="cs-release-board-run")
    c["message"] = gr.Markdown(elem_id="cs-release-board-message")
    c["table"] = gr.Dataframe(interactive=False, label="Per metric: value [95% interval]", wrap=True,
                              elem_id="cs-release-board-table")
    c["types"] = gr.Dataframe(interactive=False, label="Word AUROC by word type", wrap=True,
                              elem_id="cs-release-board-types")
    c["differences"] = gr.Dataframe(interactive=False, label="Paired differences (a − b)", wrap=True,
                                    elem_id="cs-release-board-differences")

    def run(path, metrics, draws, progress=gr.Progress(track_tqdm=True)):
        view = release_leaderboard(models, path, metrics, draws, roots=roots)
        frames = [pd.DataFrame(rows, columns=header) for header, rows in view.tables] or \
            [pd.DataFrame(columns=["metric"])] * 3
        return (view.message, *frames)

    c["run"].click(guard(run), [c["path"], c["metrics"], c["draws"]],
                   [c["message"], c["table"], c["types"], c["differences"]], api_name="release_leaderboard",
                   api_visibility="private",
                   concurrency_id="bulk", concurrency_limit=1)

    def choices():
        return gr.update(choices=release_folders()), gr.update(choices=models.available)

    c["load"] = [(guard(choices, 2), None, [c["path"], c["metrics"]])]
    return c


# ---------------------------------------------------------------- against gold labels

FIGURES = ["text_accuracy", "vision_accuracy", "incorrect_token_f1", "incorrect_token_auroc", "region_auroc"]


def evaluation_rows(pairs: list[tuple[dict, dict]]) -> list[list]:
    """One table row per metric, plus the trivial rule, of the `capscope evaluate` figures."""
    from capscope.bench.gold_figures import evaluate

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
        table.append([metric_title(metric), figures["n_items"], *[rounded(figures[f]) for f in FIGURES]])
    if trivial:
        table.append(["trivial rule (all correct / none mentioned)", len(items),
                      *[rounded(trivial[f]) for f in FIGURES]])
    return table


TIE_HEADERS = ["metric", "tied regions", "best word is tied", "a word at random"]


def tie_agreement(models: Models, pairs: list[tuple[dict, dict]]) -> list[list]:
    """Per metric with a CLIP tower: over the regions the team tied words to (a tie a strict
    majority of those who saw the region made), how often the region's best word (Inspect's
    region view: the semantic word whose CLIP text feature is closest to the region's) is one
    of them; beside it, the trivial rule: a semantic word of the caption at random."""
    from capscope.metrics.images import read_image

    tied = [(gold, row, _majority_ties(gold)) for gold, row in pairs]
    tied = [(gold, row, ties) for gold, row, ties in tied if ties]
    metrics = [m for m in dict.fromkeys(m for _, row, _ in tied for m in row["metrics"])
               if hasattr(models.scorer.metrics.get(m), "backbone")]
    table = []
    for metric in metrics:
        hits, chance = [], []
        for gold, row, ties in tied:
            image = read_image(gold["image"])
            semantic = {t["text"]: i for i, t in reversed(list(enumerate(gold["tokens"]))) if t["semantic"]}
            for region, words in ties.items():
                matches = [text for text, _ in models.region_matches(image, row, region, metric) if text in semantic]
                if not matches:
                    continue
                texts = {gold["tokens"][t]["text"] for t in words}
                hits.append(matches[0] in texts)
                chance.append(len(texts & set(semantic)) / len(semantic))
        table.append([metric_title(metric), len(hits), rounded(sum(hits) / len(hits)) if hits else None,
                      rounded(sum(chance) / len(chance)) if chance else None])
    return table


def _majority_ties(gold: dict) -> dict[int, set[int]]:
    """{region: the words tied to it by a strict majority of those who saw it}."""
    ties: dict[int, set[int]] = {}
    for link in gold.get("links") or []:
        if 2 * link["votes"] > link["total"]:
            ties.setdefault(link["region"], set()).add(link["token"])
    return ties


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
        return f"**{kind}**: " + ", ".join(f"{k} {formatted(v)}" for k, v in shown.items())

    summary = f"{report['items_with_judgements']} items with judgements · {line('tokens')} · {line('regions')}"
    annotators = [[a["annotator"], a["judgements"], rounded(a["mean_time_s"]), rounded(a["incorrect_token_rate"]),
                   rounded(a["mentioned_region_rate"]), rounded(a["token_agreement_with_others"]),
                   rounded(a["mean_token_cohen_kappa"]), rounded(a["mean_region_cohen_kappa"])]
                  for a in report["annotators"]]
    pairs = [[p["a"], p["b"], p["token_units"], rounded(p["token_cohen_kappa"]), p["region_units"],
              rounded(p["region_cohen_kappa"])] for p in report["pairs"]]
    return summary, annotators, pairs


ANNOTATOR_HEADERS = ["annotator", "judgements", "mean s", "incorrect-token rate", "mentioned-region rate",
                     "token agreement", "token κ", "region κ"]
PAIR_HEADERS = ["a", "b", "token units", "token κ", "region units", "region κ"]


def agreement_frames(store: Store, dataset: str | None) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """`agreement_tables` as the page shows them: tables that keep their headers when they are empty
    (Gradio numbers the columns 1, 2, 3 of an empty list)."""
    summary, annotators, pairs = agreement_tables(store, dataset)
    return summary, pd.DataFrame(annotators, columns=ANNOTATOR_HEADERS), pd.DataFrame(pairs, columns=PAIR_HEADERS)


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
    c["ties"] = gr.Dataframe(headers=TIE_HEADERS, interactive=False, elem_id="cs-bench-ties",
                             label="Region → best word against the team's ties (words tied to regions in Annotate)")
    people = build_people_agreement(scores.models, lambda fn, outputs=None: admin_only(store, fn, outputs),
                                    data_roots)
    board = build_release_leaderboard(scores.models, lambda fn, outputs=None: admin_only(store, fn, outputs),
                                      data_roots)
    gr.Markdown("### Agreement")
    c["agreement_button"] = gr.Button("Refresh agreement", size="sm")
    c["agreement"] = gr.Markdown()
    c["annotators"] = gr.Dataframe(headers=ANNOTATOR_HEADERS, interactive=False, label="Per annotator")
    c["pairs"] = gr.Dataframe(headers=PAIR_HEADERS, interactive=False, label="Annotator pairs (Cohen's κ)")
    build_export(store, c, c["dataset"])

    def run(dataset, limit, progress=gr.Progress()):
        pairs = scores.score_dataset(dataset or None, int(limit), progress)
        ties = pd.DataFrame(tie_agreement(scores.models, pairs), columns=TIE_HEADERS)
        return evaluation_rows(pairs), distribution_plot(pairs), ties

    # its own queue: it takes the model one item at a time, so inspect calls get in between
    c["run"].click(admin_only(store, run), [c["dataset"], c["limit"]], [c["figures"], c["plot"], c["ties"]],
                   api_name="evaluate",
                   concurrency_id="bulk", concurrency_limit=1)
    c["agreement_button"].click(admin_only(store, lambda d: agreement_frames(store, d)), c["dataset"],
                                [c["agreement"], c["annotators"], c["pairs"]], api_name="agreement")
    c["load"] = [(admin_only(store, lambda: gr.update(choices=dataset_choices(store)), 1), None, c["dataset"]),
                 *people["load"], *board["load"]]
    return c
