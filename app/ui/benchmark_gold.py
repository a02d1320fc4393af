"""The Benchmark tab against the gold labels: each metric's `capscope evaluate`
figures on the items' own tokens and regions (with the trivial rule beside), the
region → best word check against the team's ties, and the score distributions."""
from __future__ import annotations

from capscope.metrics.registry import SPECS, metric_title
from capscope.server.scoring import Models
from capscope.ui.shared import rounded


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
