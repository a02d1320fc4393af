"""`capscope evaluate` (docs/formats.md §6): score every gold item with its own
tokens and regions through the public `Scorer`, then compare with the gold
labels (`bench.gold`), under both token rules, with FOIL pairing where the
file has clean/polluted twins."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from capscope.bench.gold_figures import accuracy, collect_tokens, evaluate, f1, foil_accuracy
from capscope.metrics.constants import TOKEN_RULES
from capscope.common.jsonl import read_json_lines
from capscope.metrics.registry import SPECS
from capscope.metrics.verdict import Verdict

CONTRACT_KEYS = ("metric", "n_items", "text_accuracy", "vision_accuracy",
                 "incorrect_token_f1", "incorrect_token_auroc", "region_auroc")
RULES = TOKEN_RULES
REGIONS_TEXT = {  # figures["regions_from"] -> the printed line
    "masks": "the gold masks",
    "boxes": "the gold boxes",
    "masks and boxes": "the gold masks where the gold file has them, boxes otherwise",
    None: "nothing (the metric reads no regions, or the items have none)",
}


def read_gold(path) -> list[dict]:
    """The items of a CapTokenEval file; JsonlError (a ValueError) at its first bad line."""
    return read_json_lines(path)


def scorer_row(item: dict) -> dict:
    """The item as a scoring row: its own tokens and regions, nothing re-derived.
    A region keeps its mask where the gold file has one (metrics that read
    masks, HICE-S, use it; the others, and box-only regions, use the box)."""
    return {
        "id": item["id"], "image": item["image"], "caption": item["caption"],
        "references": item.get("references"),
        "tokens": [{k: t[k] for k in ("text", "start", "end", "semantic")} for t in item["tokens"]],
        "regions": [{"box": r["box"], **({"mask": r["mask"]} if r.get("mask") is not None else {})}
                    for r in item["regions"]],
    }


def regions_from(items: list[dict], metric: str) -> str | None:
    """What the metric's region scores were computed on: "masks", "boxes" or
    "masks and boxes" (some gold regions have a mask, some not); None when it
    reads no regions or the items have none."""
    spec = SPECS.get(metric)
    has_mask = [r.get("mask") is not None for item in items for r in item.get("regions") or []]
    if spec is None or not spec.needs.regions or not has_mask:
        return None
    if not spec.needs.masks or not any(has_mask):
        return "boxes"
    return "masks" if all(has_mask) else "masks and boxes"


def predict(scorer, metric: str, items: list[dict], base_dir: Path, batch_size: int = 32,
            progress: bool = False) -> tuple[list[dict], list[str]]:
    """Per item the metric's output (empty dict when the row failed) and the errors met."""
    return predict_many(scorer, [metric], items, base_dir, batch_size, progress)[metric]


def predict_many(scorer, metrics: list[str], items: list[dict], base_dir: Path, batch_size: int = 32,
                 progress: bool = False) -> dict[str, tuple[list[dict], list[str]]]:
    """`predict` for several metrics from one scoring pass over the items."""
    from tqdm import tqdm  # not at the top: `capscope --help` imports this module

    out: dict[str, tuple[list[dict], list[str]]] = {metric: ([], []) for metric in metrics}
    bar = tqdm(total=len(items), desc=f"evaluate {', '.join(metrics)}", unit="item", disable=not progress,
               mininterval=5.0)
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        for item, row in zip(chunk, scorer.score_batch([scorer_row(i) for i in chunk], base_dir=base_dir)):
            for metric, (predictions, errors) in out.items():
                result = row["metrics"].get(metric)
                if result is None:
                    errors.append(f"{item['id']}: {row.get('error')}")
                predictions.append(result or {})
        bar.update(len(chunk))
    bar.close()
    return out


def overall_key(metric: str) -> str | None:
    """The score that ranks captions (FOIL pairing): the metric's primary key."""
    spec = SPECS.get(metric)
    return spec.primary_key if spec else None


def decisions_under(verdict: Verdict, item: dict, prediction: dict, metric: str) -> list:
    """token_correct recomputed from the reported word scores under `verdict`
    (metrics that follow the token rule only; others keep their own decisions)."""
    spec = SPECS.get(metric)
    if spec is None or not spec.follows_token_rule or prediction.get("token_scores") is None:
        return prediction.get("token_correct") or [None] * len(item["tokens"])
    return verdict.decide([bool(t.get("semantic")) for t in item["tokens"]], prediction["token_scores"])


def redecided(items: list[dict], predictions: list[dict], verdict: Verdict, metric: str) -> list[dict]:
    """The predictions with token_correct decided again (`decisions_under`); a
    failed row's empty prediction stays as it is."""
    return [dict(p, token_correct=decisions_under(verdict, item, p, metric)) if p else p
            for item, p in zip(items, predictions)]


def rule_figures(items: list[dict], predictions: list[dict], verdict: Verdict, metric: str) -> dict:
    """Text accuracy and wrong-word F1 under each token rule, at the verdict's β and word scale."""
    out = {}
    for rule in RULES:
        judged = collect_tokens(items, redecided(items, predictions, replace(verdict, token_rule=rule), metric))
        out[rule] = {"text_accuracy": accuracy(judged.gold, judged.decided),
                     "incorrect_token_f1": f1(judged.gold, judged.decided)}
    return out


def evaluate_gold(scorer, metric: str, items: list[dict], base_dir: Path, *, token_rule: str,
                  beta: float, batch_size: int = 32, progress: bool = False) -> dict:
    predictions, errors = predict(scorer, metric, items, base_dir, batch_size, progress)
    return figures_of(items, predictions, errors, metric, token_rule=token_rule, beta=beta,
                      word_scale=word_scale_of(scorer, metric))


def word_scale_of(scorer, metric: str) -> float:
    """The scorer's word threshold scale for `metric`; 1 for a scorer that has none."""
    scale = getattr(scorer, "word_threshold_scale", None)
    return scale(metric) if scale is not None else 1.0


WORD_SCALES = tuple(round(0.3 + 0.05 * i, 2) for i in range(15))  # 0.3 ... 1.0


def fit_word_scale(scorer, items: list[dict], base_dir: Path, *, token_rule: str, beta: float,
                   scales=WORD_SCALES) -> dict:
    """The word threshold scale with the best wrong-word F1 on `items` (scored
    once under the scorer's own scale, which should be 1; a tie goes to the
    scale nearest 1), and the F1 at every scale tried."""
    predictions, _ = predict(scorer, "infometic", items, base_dir)
    scored = [(item, p) for item, p in zip(items, predictions) if p]   # rows that failed are left out
    items, predictions = [item for item, _ in scored], [p for _, p in scored]
    found = {}
    for scale in scales:
        judged = collect_tokens(items, redecided(items, predictions, Verdict(token_rule, beta, scale), "infometic"))
        found[scale] = f1(judged.gold, judged.decided) or 0.0
    best = max(found, key=lambda scale: (round(found[scale], 6), scale))
    return {"scale": best, "f1": {f"{scale:g}": round(value, 4) for scale, value in found.items()}}


def figures_of(items: list[dict], predictions: list[dict], errors: list[str], metric: str, *,
               token_rule: str, beta: float, word_scale: float) -> dict:
    """`evaluate_gold`'s figures from predictions already made (see `predict`),
    the words decided again under `token_rule`, `beta` and `word_scale`."""
    verdict = Verdict(token_rule, beta, word_scale)
    predictions = redecided(items, predictions, verdict, metric)
    figures = evaluate(items, predictions, metric)
    figures["token_rule"], figures["beta"], figures["word_threshold_scale"] = token_rule, beta, word_scale
    figures["token_rules"] = rule_figures(items, predictions, verdict, metric)
    key = overall_key(metric)
    overall = {item["id"]: p["scores"][key] for item, p in zip(items, predictions)
               if p and key in p.get("scores", {})}
    figures["foil"] = foil_accuracy(items, overall)
    figures["regions_from"] = regions_from(items, metric)
    figures["n_errors"] = len(errors)
    if errors:
        figures["first_error"] = errors[0]
    return figures


def _scale_note(scale: float) -> str:
    return "" if scale == 1.0 else f" (words: times {scale:g}, the checkpoint's fitted word_threshold_scale)"


def format_figures(figures: dict) -> str:
    """Human-readable figures with the trivial rule beside each."""
    trivial = figures["trivial"]
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"
    lines = [f"{figures['metric']}: {figures['n_items']} items, {figures['n_tokens']} labelled semantic tokens "
             f"({figures['n_incorrect_tokens']} incorrect), {figures['n_regions']} labelled regions "
             f"({figures['n_mentioned_regions']} mentioned); token rule {figures['token_rule']}, beta {figures['beta']}"
             + _scale_note(figures.get("word_threshold_scale", 1.0))]
    lines.append(f"  regions scored on {REGIONS_TEXT[figures.get('regions_from')]}")
    for key in CONTRACT_KEYS[2:]:
        lines.append(f"  {key:24s} {fmt(figures[key]):>7s}   (trivial {fmt(trivial.get(key))})")
    for rule, values in figures["token_rules"].items():
        lines.append(f"  rule {rule:8s} text_accuracy {fmt(values['text_accuracy'])}, "
                     f"incorrect_token_f1 {fmt(values['incorrect_token_f1'])}")
    foil = figures["foil"]
    lines.append(f"  FOIL (clean above polluted twin) {fmt(foil['foil_accuracy'])} over {foil['n_pairs']} pairs (chance 0.500)")
    if figures.get("n_errors"):
        lines.append(f"  {figures['n_errors']} items failed, e.g. {figures['first_error']}")
    return "\n".join(lines)
