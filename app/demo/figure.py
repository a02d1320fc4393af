"""A scored caption drawn over its image: regions outlined by their mention
score, words coloured by correctness (the README's example)."""
from __future__ import annotations


def scored_figure(image, row: dict, metric: str, path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    out = row["metrics"][metric]
    fig = plt.figure(figsize=(4.6, 5.2))
    ax = fig.add_axes([0.02, 0.22, 0.96, 0.72])
    ax.imshow(image)
    ax.set_axis_off()
    for region, score, mentioned in zip(row["regions"], out["region_scores"], out["region_mentioned"]):
        x0, y0, x1, y1 = region["box"]
        colour = "#1f77b4" if mentioned else "#999999"
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, lw=2 if mentioned else 1,
                               ls="-" if mentioned else "--", ec=colour))
        ax.text(x0 + 2, y0 + 9, f"{score:.2f}", fontsize=7, color=colour)
    if title:
        ax.set_title(title, fontsize=8)
    _caption_line(fig, row, out)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _caption_line(fig, row: dict, out: dict) -> None:
    """Each word in its own colour: red = judged wrong, green = judged correct, grey = not judged."""
    renderer = fig.canvas.get_renderer()
    x, y = 0.03, 0.15
    for token, score, correct in zip(row["tokens"], out["token_scores"], out["token_correct"]):
        colour = "#999999" if correct is None else ("#2ca02c" if correct else "#d62728")
        label = token["text"] if score is None or correct is None else f"{token['text']}"
        text = fig.text(x, y, label, fontsize=9, color=colour, weight="bold" if correct is False else "normal")
        width = text.get_window_extent(renderer).width / fig.bbox.width
        if x + width > 0.97:
            text.remove()
            x, y = 0.03, y - 0.05
            text = fig.text(x, y, label, fontsize=9, color=colour, weight="bold" if correct is False else "normal")
        x += width + 0.012
    scores = out["scores"]
    fig.text(0.03, y - 0.06, "precision {precision:.2f}  recall {recall:.2f}  overall {overall:.2f}".format(**scores),
             fontsize=8, color="#333333")
