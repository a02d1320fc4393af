"""The printed report of `capscope correlate`: the table of every score key
with its interval and the papers' value beside it, and the sources cited."""
from __future__ import annotations

from capscope.bench.evaluate import format_figures
from capscope.bench.pair_agreement import CATEGORIES


def format_result(result: dict) -> str:
    if result["kind"] == "token":
        lines = [format_tokens(result)]
    else:
        lines = [header(result), *(rating_lines(result) if result["kind"] == "rating" else pair_lines(result))]
    for metric, figures in result.get("foil_word", {}).items():
        lines.append(f"  {metric}: lowest-scored word is the foil word in {100 * figures['lowest_word_is_foil']:.1f}% "
                     f"of {figures['n']} foil captions")
    if result.get("dense"):
        lines += dense_lines(result)
    if result["kind"] != "token" or result.get("dense"):
        lines += source_lines(result)
    return "\n".join(lines)


def header(result: dict) -> str:
    boot = result["bootstrap"]
    unit = "judgements" if result["kind"] == "rating" else "pairs"
    chosen = {"tau_b": "Kendall tau_b", "tau_c": "Kendall tau_c", "pearson": "Pearson"}.get(result.get("statistic"),
                                                                                           "accuracy")
    return (f"{result['benchmark']}: {result['n']} {unit}; the papers' statistic: {chosen} (*); x100; "
            f"95% interval: percentile bootstrap over images, {boot['draws']} draws, seed {boot['seed']}\n"
            f"  protocol: {result['protocol']}")


def pct(value, width: int = 6) -> str:
    return f"{'-':>{width}}" if value is None else f"{100 * value:{width}.1f}"


def interval_text(ci) -> str:
    return f"{'-':>14}" if not ci else f"[{100 * ci[0]:5.1f}, {100 * ci[1]:5.1f}]"


def verdict(figures: dict) -> str:
    if figures.get("baseline"):
        return "trivial baseline"
    if figures.get("published") is None:
        return ""
    if figures.get("reproduced"):
        return "reproduced"
    diff = figures.get("difference")
    return "" if diff is None else f"{100 * diff:+.1f}"


def published_text(figures: dict, numbers: dict) -> str:
    if figures.get("published") is None:
        return f"{'-':>10}"
    return f"{pct(figures['published'])} [{numbers[figures['published_source']]}]".rjust(10)


def source_numbers(result: dict) -> dict:
    return {cite: i + 1 for i, cite in enumerate(result.get("sources", []))}


_RATING_LAYOUT = [("", "<", 26), ("", ">", 7), ("  ", ">", 8), ("  ", ">", 8), ("  ", ">", 8),
                  ("  ", ">", 14), ("  ", ">", 10), ("  ", "<", 0)]


_PAIR_LAYOUT = [("", "<", 26), ("", ">", 7), ("  ", ">", 6), ("  ", ">", 14), ("  ", ">", 10), ("  ", "<", 0)]


_CATEGORY_COLUMN = ("", ">", 7)


def table(result: dict) -> tuple[list[str], list[list[str]]]:
    """The correlation table of a rating or pairwise result, cell by cell (x100,
    the papers' statistic starred, published value with its source number, the
    verdict): the CLI pads the cells into columns, the web UI shows them as they are."""
    return rating_table(result) if result["kind"] == "rating" else pair_table(result)


def rating_table(result: dict) -> tuple[list[str], list[list[str]]]:
    numbers = source_numbers(result)
    names = ("tau_b", "tau_c", "pearson")
    header = ["score", "n", *(s + ("*" if s == result["statistic"] else "") for s in names), "95% CI", "published",
              "verdict"]
    rows = [[key, str(f["n"]), *(pct(f.get(s)).strip() for s in names), interval_text(f["ci95"]).strip(),
             published_text(f, numbers).strip(), verdict(f)] for key, f in result["metrics"].items()]
    return header, rows


def pair_table(result: dict) -> tuple[list[str], list[list[str]]]:
    numbers = source_numbers(result)
    categories = CATEGORIES if result["benchmark"] == "pascal-50s" else ()
    header = ["score", "n", *categories, "acc*", "95% CI", "published", "verdict"]
    rows = [[key, str(f["n"]), *(pct(f.get("categories", {}).get(c, {}).get("accuracy")).strip() for c in categories),
             pct(f["accuracy"]).strip(), interval_text(f["ci95"]).strip(), published_text(f, numbers).strip(),
             verdict(f)] for key, f in result["metrics"].items()]
    return header, rows


def padded(cells: list[str], layout: list[tuple[str, str, int]]) -> str:
    return "  " + "".join(f"{prefix}{cell:{align}{width}}" for cell, (prefix, align, width) in zip(cells, layout))


def rating_lines(result: dict) -> list[str]:
    header, rows = rating_table(result)
    return [padded(cells, _RATING_LAYOUT) for cells in (header, *rows)]


def pair_lines(result: dict) -> list[str]:
    header, rows = pair_table(result)
    layout = _PAIR_LAYOUT[:2] + [_CATEGORY_COLUMN] * (len(header) - len(_PAIR_LAYOUT)) + _PAIR_LAYOUT[2:]
    lines = [padded(cells, layout) for cells in (header, *rows)]
    settings = {f["setting"] for f in result["metrics"].values() if f.get("setting")}
    if settings:
        lines.insert(0, f"  published column: accuracy with {', '.join(sorted(settings))} (references per pair)")
    return lines


_DENSE_LAYOUT = [("", "<", 34), ("", ">", 5), ("  ", ">", 6), ("  ", ">", 14), ("  ", ">", 6), ("  ", ">", 14)]


def dense_lines(result: dict) -> list[str]:
    """The dense-misalignment table: each key's LA and AP with their intervals,
    the published rows under it (a verdict only where the paper's CLIP is the
    one scored here), then nocaps-FOIL's domains."""
    dense, numbers = result["dense"], source_numbers(result)
    epsilon = "" if dense["epsilon"] is None else f", epsilon {dense['epsilon']:g}"
    lines = [f"  dense misalignment (CLIP4DM), {dense['reading'].replace('_', '-')} reading: {dense['n']} captions, "
             f"{dense['n_misaligned']} misaligned; CLIP {dense['clip'] or 'unknown'}{epsilon}; x100",
             f"    protocol: {dense['protocol']}",
             padded(["score / published row", "n", "LA", "95% CI", "AP", "95% CI"], _DENSE_LAYOUT)]
    for key, figures in dense["metrics"].items():
        lines.append(padded(dense_cells(key, figures), _DENSE_LAYOUT))
        for row in figures["published"]:
            label = f"  {row['row']} [{numbers[row['source']]}]"
            lines.append(padded([label, "", pct(row["LA"]).strip(), dense_verdict(row, "LA"), pct(row["AP"]).strip(),
                                 dense_verdict(row, "AP")], _DENSE_LAYOUT))
    for domain, keys in dense["domains"].items():
        lines += [padded(dense_cells(f"{domain}: {key}", figures), _DENSE_LAYOUT) for key, figures in keys.items()]
    lines.append("  published rows: the verdict ('reproduced' inside the 95% interval, else measured - published) "
                 "only where the paper's backbone is the CLIP scored here")
    return lines


def dense_cells(label: str, figures: dict) -> list[str]:
    return [label, str(figures["n"]), pct(figures["LA"]).strip(), interval_text(figures["LA_ci95"]).strip(),
            pct(figures["AP"]).strip(), interval_text(figures["AP_ci95"]).strip()]


def dense_verdict(row: dict, statistic: str) -> str:
    if statistic not in row["difference"]:
        return ""
    return "reproduced" if row["reproduced"].get(statistic) else f"{100 * row['difference'][statistic]:+.1f}"


def source_lines(result: dict) -> list[str]:
    if not result.get("sources"):
        return ["  published: none of these keys has a published value on this benchmark"]
    lines = ["  published values (verdict: 'reproduced' when inside the 95% interval, else measured - published):"]
    if result.get("demo"):
        lines.insert(0, "  DEMO MODEL: the published values are the papers' released models on the real benchmark; "
                        "beside demo scores they compare nothing")
    return lines + [f"  [{i + 1}] {cite}" for i, cite in enumerate(result["sources"])]


def format_tokens(result: dict) -> str:
    lines = [f"{result['benchmark']}: {result['n']} items\n  protocol: {result['protocol']}"]
    for metric, figures in result["metrics"].items():
        lines.append(format_figures(figures))
        ap, ci = figures.get("average_precision"), figures.get("average_precision_ci95")
        interval = f" (95% interval {ci[0]:.3f} to {ci[1]:.3f})" if ci else ""
        lines.append(f"  average precision of incorrect words {'n/a' if ap is None else f'{ap:.3f}'}{interval}")
        if figures.get("pos") is None:
            lines.append(f"  {figures['pos_note']}")
            continue
        for tag, row in figures["pos"].items():
            ap = "n/a" if row["average_precision"] is None else f"{row['average_precision']:.3f}"
            lines.append(f"    {tag:<6} n {row['n']:>5}  incorrect {row['incorrect']:>4}  "
                         f"accuracy {row['accuracy']:.3f}  AP {ap}")
    return "\n".join(lines)
