"""The Benchmark tab (`build_benchmark`): each metric against the gold labels
(capscope.ui.benchmark_gold: the `capscope evaluate` figures), the annotators'
agreement, exports, "Agreement with people" (capscope.ui.benchmark_people:
`capscope correlate` on a human-judgement file) and a release's leaderboard
(capscope.ui.benchmark_leaderboard)."""
from __future__ import annotations

import gradio as gr
import pandas as pd

from capscope.annotation import agreement
from capscope.db import Store
from capscope.server.data_roots import DataRoots
from capscope.ui.benchmark_gold import FIGURES, TIE_HEADERS, distribution_plot, evaluation_rows, tie_agreement
from capscope.ui.benchmark_leaderboard import build_release_leaderboard
from capscope.ui.benchmark_people import build_people_agreement
from capscope.ui.shared import DatasetScores, admin_only, build_export, dataset_choices, formatted, rounded


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
