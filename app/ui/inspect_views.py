"""Inspect's row -> display: what a scorer row (docs/formats.md §2) shows on the
tab: the region overlay, the summary under a caption, HICE-S's phrases, the table
of both captions' global scores and the report of a clicked region."""
from __future__ import annotations

import html
import math

from PIL import Image

from capscope.metrics.registry import SPECS, key_note, metric_title
from capscope.pictures import draw as ui_draw
from capscope.ui.caption_shading import token_metrics, wrong_words


def region_boxes(row: dict | None) -> list:
    return [r["box"] for r in (row or {}).get("regions", [])]


def overlay(image: Image.Image | None, row: dict | None, metric: str, selected: int | None = None):
    if image is None:
        return None
    result = (row or {}).get("metrics", {}).get(metric) or {}
    scores = result.get("region_scores") or None
    mentioned = result.get("region_mentioned") or None
    masks = [r.get("mask") for r in (row or {}).get("regions", [])]  # a given region's mask: outlined as it is
    return ui_draw.score_overlay(image, region_boxes(row), scores, mentioned, selected, masks=masks)


def fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_markdown(row: dict | None, metric: str) -> str:
    if not row:
        return ""
    if row.get("error") and not row.get("metrics"):
        return f"**Cannot score:** {row['error']}"
    result = row["metrics"].get(metric) or {}
    parts = []
    wrong = wrong_words(row, metric)
    if metric in token_metrics():
        scaled = SPECS[metric].follows_token_rule and (row.get("model") or {}).get("token_rule") == "relative"
        rule = " (β scaled to the caption's length)" if scaled else ""
        parts.append(f"**Wrong words{rule}:** " + (", ".join(f"~~{w}~~" for w in wrong) if wrong else "none found"))
    mentioned = result.get("region_mentioned") or []
    if mentioned:
        missing = [str(i + 1) for i, m in enumerate(mentioned) if not m]
        parts.append(f"**Regions left out:** {', '.join(missing) if missing else 'none'} of {len(mentioned)}")
    if result.get("null_score") is not None:
        parts.append(f"**Null token:** {result['null_score']:.3f}")
    parts += reading_notes(row["caption"], result)
    return " · ".join(parts)


def reading_notes(caption: str, result: dict) -> list[str]:
    """How the metric read a long caption: in how many windows, or where it stopped."""
    windows = result.get("windows") or []
    notes = []
    if len(windows) > 1:
        notes.append(f"**Read in {len(windows)} windows** (longer than the model reads at once)")
    if result.get("truncated") and windows:
        notes.append(f"**Cut:** words after “{html.escape(caption[max(0, windows[-1][1] - 20):windows[-1][1]])}” "
                     "were not read")
    return notes


def phrases_markdown(row: dict | None) -> str:
    phrases = ((row or {}).get("metrics", {}).get("hice") or {}).get("phrases") or []
    if not phrases:
        return ""
    lines = ["| HICE-S phrase | score | |", "|---|---:|---|"]
    for phrase in phrases:
        mark = "✓" if phrase.get("correct") else "✗"
        lines.append(f"| {html.escape(phrase['text'])} | {phrase['score']:.3f} | {mark} |")
    return "\n".join(lines)


def scores_rows(row_a: dict | None, row_b: dict | None) -> list[list]:
    """Global scores of both captions side by side: [metric, key, A, B, range,
    which way is better, what it is] (the last three as the registry says)."""
    keys: dict[tuple[str, str], None] = {}
    for row in (row_a, row_b):
        for name, result in ((row or {}).get("metrics") or {}).items():
            for key in result.get("scores", {}):
                keys[(name, key)] = None

    def value(row, name, key):
        score = ((row or {}).get("metrics", {}).get(name) or {}).get("scores", {}).get(key)
        return None if score is None else round(float(score), 4)

    def note(name, key):  # what the number is, from the registry: [range, which way is better, meaning]
        found = key_note(name, key)
        return [found.range, f"{found.better} is better", found.meaning] if found else ["", "", ""]

    return [[metric_title(n), k, value(row_a, n, k), value(row_b, n, k), *note(n, k)] for n, k in keys]


def region_report(row: dict | None, metric: str, region: int | None, matches: list[tuple[str, float]]) -> str:
    if row is None or region is None:
        return "Click inside a region to see what in the caption matches it."
    result = row["metrics"].get(metric) or {}
    scores, mentioned = result.get("region_scores") or [], result.get("region_mentioned") or []
    text = f"**Region {region + 1}**"
    if region < len(scores):
        state = "mentioned" if region < len(mentioned) and mentioned[region] else "**not mentioned**"
        text += f" · {metric_title(metric)} score {scores[region]:.3f} ({state})"
    if matches:
        best, cos = matches[0]
        text += f" · best match: **{html.escape(best)}** (cosine {cos:.3f})"
        if len(matches) > 1:
            text += " · then " + ", ".join(f"{html.escape(t)} {c:.2f}" for t, c in matches[1:4])
    return text


def parse_references(text: str | None) -> list[str] | None:
    refs = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return refs or None
