"""Figures of `capscope bench` (where the milliseconds of one re-score go) and of
`capscope correlate` (each metric's score against the human judgement)."""
from __future__ import annotations

import numpy as np


def rescore_plot(result: dict, path: str) -> None:
    import matplotlib  # not at the top: the backend is chosen only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    breakdown = result["details"]["rescore_breakdown_ms"]
    labels = sorted({step for steps in breakdown.values() for step in steps})
    metrics = list(breakdown)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.9 * len(metrics)))
    left = [0.0] * len(metrics)
    colours = plt.get_cmap("tab10")
    for k, step in enumerate(labels):
        widths = [breakdown[m].get(step, 0.0) for m in metrics]
        ax.barh(metrics, widths, left=left, label=step, color=colours(k % 10))
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("milliseconds per re-score (mean)")
    ax.set_title(f"One re-score, cached image: {result['device']}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.15), ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def correlation_plot(result: dict, points: dict, path) -> None:
    """One panel per score key: the metric's score against the human judgement
    (rating benchmarks: jittered ratings with each rating's mean score;
    pairwise ones: the preferred caption's score against the other's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(points)
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False, layout="constrained")
    for ax, key in zip(axes.flat, keys):
        first, second = (np.asarray(v, float) for v in points[key])
        figures = result["metrics"][key]
        if result["kind"] == "rating":
            _rating_panel(ax, first, second, np.random.default_rng(0))
            title = f"{key}\n" + ", ".join(f"{s} {figures[s]:.3f}" for s in ("tau_b", "tau_c", "pearson")
                                             if figures.get(s) is not None)
        else:
            _pair_panel(ax, first, second)
            title = f"{key}\naccuracy {figures['accuracy']:.3f}"
        ax.set_title(title, fontsize=8)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    if axes.flat[0].get_legend_handles_labels()[0]:
        axes.flat[0].legend(fontsize=7, loc="best", frameon=False)
    fig.suptitle(f"{result['benchmark']}: {result['n']} {'judgements' if result['kind'] == 'rating' else 'pairs'}",
                 fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rating_panel(ax, human, scores, rng) -> None:
    levels = np.unique(human)
    spread = 0.3 * (np.min(np.diff(levels)) if len(levels) > 1 else 1.0)
    jitter = rng.uniform(-spread, spread, len(human)) if len(levels) <= 12 else 0.0
    ax.scatter(human + jitter, scores, s=6, alpha=0.35, color="tab:blue", linewidths=0)
    if len(levels) <= 12:
        means = [scores[human == level].mean() for level in levels]
        ax.plot(levels, means, "o-", color="tab:red", markersize=4, label="mean score per rating")
    ax.set_xlabel("human rating", fontsize=8)
    ax.set_ylabel("metric score", fontsize=8)
    ax.tick_params(labelsize=7)


def _pair_panel(ax, preferred, other) -> None:
    ax.scatter(other, preferred, s=6, alpha=0.4, color="tab:blue", linewidths=0)
    low, high = min(other.min(), preferred.min()), max(other.max(), preferred.max())
    ax.plot([low, high], [low, high], "--", color="grey", linewidth=0.8)
    ax.set_xlabel("score of the other caption", fontsize=8)
    ax.set_ylabel("score of the caption people prefer", fontsize=8)
    ax.tick_params(labelsize=7)
