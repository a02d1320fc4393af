"""The Benchmark tab's "Leaderboard of a release": `capscope evaluate --benchmark`
on a release folder on the server, checked against its sha256 and scored by the
server's one scorer; the folder, every file of the release and every image must
lie inside the server's data roots."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import pandas as pd

from capscope.annotation.release import releases_folder
from capscope.common.errors import CapscopeError, first_line, with_type
from capscope.db import data_dir
from capscope.metrics.registry import metric_names
from capscope.server.data_roots import DataRoots
from capscope.server.scoring import Models
from capscope.ui.benchmark_runs import (DEFAULT_DRAWS, ROWS_PER_PROGRESS_STEP, SharedScorer, check_metrics_and_draws,
                                        tab_roots)

log = logging.getLogger(__name__)


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
