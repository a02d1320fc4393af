"""A stacked bar per metric: where the milliseconds of one re-score go."""
from __future__ import annotations


def rescore_plot(result: dict, path: str) -> None:
    import matplotlib

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
