"""What a fine-tuning reports: the figures of the parent and the child on the
held-out items and the check set (evaluate_gold's, through the Scorer), where
they are saved (figures_path), and the table `capscope train infometic`
prints (format_report)."""
from __future__ import annotations

import math
from pathlib import Path

from capscope.train.finetune.checkpoints import checkpoint_scorer
from capscope.train.finetune.settings import FinetuneConfig
from capscope.train.finetune.threshold import threshold_lines

FIGURE_KEYS = ("text_accuracy", "incorrect_token_f1", "incorrect_token_auroc", "vision_accuracy", "region_auroc")
FIGURE_NAMES = {"text_accuracy": "text accuracy", "incorrect_token_f1": "wrong-word F1",
                "incorrect_token_auroc": "wrong-word AUROC", "vision_accuracy": "vision accuracy",
                "region_auroc": "region AUROC", "trivial_text_accuracy": "text accuracy, all words correct"}


def figures_path(checkpoint: Path) -> Path:
    """Where the before/after figures of a fine-tuned checkpoint are saved: beside it."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.stem + ".figures.json")


def held_figures(config: FinetuneConfig, checkpoint: Path, items: list[dict], evaluate_gold) -> dict | None:
    if not items:
        return None
    return _figures(config, checkpoint, items, config.base_dir, evaluate_gold)


def check_figures(config: FinetuneConfig, checkpoint: Path, evaluate_gold) -> dict:
    return _figures(config, checkpoint, config.check.items, config.check.base_dir, evaluate_gold)


def _figures(config: FinetuneConfig, checkpoint: Path, items: list[dict], base_dir: Path, evaluate_gold) -> dict:
    scorer = checkpoint_scorer(config, checkpoint)
    figures = evaluate_gold(scorer, "infometic", items, base_dir, token_rule=config.token_rule, beta=scorer.beta)
    out = {k: _round(figures.get(k)) for k in FIGURE_KEYS}
    out["trivial_text_accuracy"] = _round(figures["trivial"]["text_accuracy"])
    out["n_items"] = len(items)
    return out


def _round(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)


def format_report(report: dict, out: Path) -> str:
    """The before/after table `capscope train infometic --labels ...` prints."""
    train, held = report["labels"]["train"], report["labels"]["held_out"]
    lines = [f"fine-tuned {report['parent']['file']} (sha256 {report['parent']['sha256'][:12]}...) "
             f"on {train['items']} items ({train['tokens']} labelled words, {train['regions']} labelled regions); "
             f"{report['training']['steps']} steps in {report['training']['minutes']} min",
             f"held out: {held['items']} items on {report['holdout']['images']} images "
             f"(token rule {report['token_rule']})", *threshold_lines(report.get("word_threshold"), train), ""]
    for title, before, after in _tables(report):
        lines += _table_lines(title, before, after)
    lines.append(f"saved {out} and {figures_path(out).name}")
    return "\n".join(lines)


def _tables(report: dict) -> list[tuple[str, dict | None, dict | None]]:
    """(title, figures before, figures after): the held-out items', then the check set's."""
    tables = [("held-out", report.get("before"), report.get("after"))]
    if "check_gold" in report:
        check = report["check_gold"]
        title = check.get("file") or f"dataset {check.get('dataset')}"
        tables.append((title, check["before"], check["after"]))
    return tables


def _table_lines(title: str, before: dict | None, after: dict | None) -> list[str]:
    if not before:
        return [f"{title}: nothing held out (--holdout 0)"]
    show = lambda v: "-" if v is None else f"{v:.3f}"
    lines = [f"{title:<34} {'before':>8} {'after':>8}"]
    for key, name in FIGURE_NAMES.items():
        lines.append(f"  {name:<32} {show(before.get(key)):>8} {show(after.get(key)):>8}")
    return lines + [""]
