"""DIR/index.html: the diagnosis as one self-contained page (its pictures
inlined, so it opens from disk with no server), and its figures as PNG files
beside it."""
from __future__ import annotations

import base64
import html
from pathlib import Path

from capscope.common.paths import safe_name
from capscope.metrics.registry import SPECS, metric_title

from .diagnosis import Comparison, DiagnosisSummary, Estimate, MetricSummary, NgramScores
from .error_types import TYPES

PICTURE_SIDE = 600  # worst-caption pictures: shown 300 px wide

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}
img{max-width:100%;height:auto}.scroll{overflow-x:auto}details{margin:.5em 0 1.5em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.ci{color:#777;font-size:.85em}
.caption{line-height:1.9;max-width:60em}.w{padding:1px 2px;border-radius:3px}.wrong{background:#f4a3a3;font-weight:600}
.right{background:#d6ecd6}.card{display:flex;gap:1em;margin:1em 0;align-items:flex-start}.card img{width:300px}
.note{color:#555}.banner{background:#fff4d6;border:1px solid #e0b84c;border-radius:6px;padding:.6em 1em}
"""


# The report is text, pictures (data: URLs) and its own styles: it runs no script and loads nothing, whatever a
# captioner's file held, wherever it is opened (a colleague's browser, from disk or from a web server).
REPORT_POLICY = ("<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
                 "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">")


def write_report(summary: DiagnosisSummary, out: Path, worst: dict[tuple[str, str], list[dict]],
                 image_loader) -> Path:
    """Writes the figures and index.html into `out`; `worst[(model, metric)]`
    the captions to show, `image_loader(path)` a PIL image or None."""
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    parts = [f"<!doctype html><meta charset='utf-8'>{REPORT_POLICY}<title>capscope diagnose</title>"
             f"<style>{STYLE}</style>",
             "<h1>What do these captioners get wrong?</h1>", _provenance(summary), _verdicts(summary),
             _overview(summary), _failed(summary)]
    score_plot = figures / "scores.png"
    if plot_scores(summary, score_plot):
        parts.append(_img(score_plot, "Each metric's main score per model, with its 95% interval over images and "
                                      "the number of images it rests on"))
    type_plot = figures / "error_types.png"
    if plot_error_types(summary, type_plot):
        parts.append(_img(type_plot, "Wrong-word rate by kind of word, per model and metric; the number on a "
                                     "bar is how many words of that kind were judged (a rate on few words is noise)"))
    for metric in summary.metrics:
        parts.append(_metric_section(summary, metric))
    parts.append(_comparisons(summary))
    parts.append(_ngrams(summary.ngram_scores))
    parts.append(_worst_section(worst, figures, image_loader))
    page = out / "index.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page


def _num(value, fmt: str = ".3f") -> str:
    return "–" if value is None else format(value, fmt)


def _ci(ci) -> str:
    return "" if not ci or ci[0] is None else f" <span class='ci'>[{ci[0]:.3f}, {ci[1]:.3f}]</span>"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div class='scroll'><table><tr>{head}</tr>{body}</table></div>"


def _provenance(summary: DiagnosisSummary) -> str:
    """Who scored: capscope's version and each scorer the rows name, with a banner when it was the demo model."""
    made = summary.provenance
    banner = ("<p class='banner'>⚠ <b>The demo model scored these captions.</b> It knows coloured shapes on plain "
              "backgrounds, not photos: these figures say nothing about a captioner on real images. Score with "
              "released weights (<code>capscope models download</code>) for a report to share.</p>"
              if made and made.demo else "")
    described = "; ".join(_scorer_text(s) for s in (made.scorers if made else ())) or "not recorded in the rows"
    warned = "".join(f"<p class='banner'>⚠ {html.escape(w.text)}</p>" for w in summary.warnings)
    return (banner + warned + f"<p class='note'>capscope {html.escape(made.capscope if made else '?')}. "
            f"Scored by: {described}.</p>")


SHOWN_MODEL_FIELDS = ("clip", "regions", "text", "precision", "device", "token_rule", "region_rule", "long_captions",
                      "torch", "open_clip")


def _scorer_text(scorer: dict) -> str:
    """A row's `model` description in one line: its main fields, and each checkpoint by file and digest."""
    parts = [f"{field} {html.escape(str(scorer[field]))}" for field in SHOWN_MODEL_FIELDS if scorer.get(field)]
    parts += [f"{html.escape(str(role))} checkpoint {html.escape(str(entry.get('file')))} "
              f"(sha256 {html.escape(str(entry.get('sha256', ''))[:12])})"
              for role, entry in (scorer.get("checkpoints") or {}).items() if isinstance(entry, dict)]
    return ("demo model: " if scorer.get("demo") else "") + ", ".join(parts)


def _failed(summary: DiagnosisSummary) -> str:
    rows = [[html.escape(name), html.escape(str(f.id)), html.escape(f.error)]
            for name, model in summary.models.items() for f in model.failed]
    if not rows:
        return ""
    return "<h2>Rows that could not be scored</h2>" + _table(["model", "id", "why"], rows)


def _overview(summary: DiagnosisSummary) -> str:
    rows = [[html.escape(name), str(m.n_captions), str(m.n_images), str(m.n_errors)]
            for name, m in summary.models.items()]
    metrics = ", ".join(metric_title(m) for m in summary.metrics)
    return (f"<p class='note'>Metrics: {metrics}. Kinds of words decided by {html.escape(summary.type_source)}."
            " Intervals are 95% bootstrap intervals over images.</p>"
            + _table(["model", "captions", "images", "rows that could not be scored"], rows))


def results_of(summary: DiagnosisSummary, metric: str) -> dict[str, MetricSummary]:
    """Each model's results under `metric`, for the models that have any."""
    return {name: m.metrics[metric] for name, m in summary.models.items() if metric in m.metrics}


def _metric_section(summary: DiagnosisSummary, metric: str) -> str:
    parts = [f"<h2>{metric_title(metric)}</h2>"]
    parts += [f"<p class='banner'>⚠ {html.escape(w.text)}</p>" for w in summary.warnings if w.metric == metric]
    models = results_of(summary, metric)
    parts.append(_scores_table(models))
    if any(m.words.judged for m in models.values()):
        parts.append(_words_table(models))
        parts.append("<h3>Errors by kind of word</h3>" + _table(
            ["model", *[f"{t}: wrong / judged (share of errors)" for t in TYPES]],
            [[html.escape(n), *[f"{e.wrong} / {e.judged} ({e.share_of_errors:.0%})"
                                for e in (m.error_types[t] for t in TYPES)]] for n, m in models.items()]))
        for n, m in models.items():
            parts.append(f"<h3>Words {html.escape(n)} gets wrong most often</h3>" + _table(
                ["word", "judged", "wrong", "rate", "examples"],
                [[html.escape(w.word), str(w.judged), str(w.wrong), _num(w.wrong_rate),
                  html.escape(", ".join(w.examples))] for w in m.top_wrong_words]))
    for entry in summary.word_differences:
        if entry.metric == metric and entry.words:
            a, b = html.escape(entry.a), html.escape(entry.b)
            parts.append(f"<h3>Words whose wrong rates differ most: {a} against {b}</h3>" + _table(
                ["word", f"{a} rate (judged)", f"{b} rate (judged)", "difference"],
                [[html.escape(w.word), f"{w.a_wrong_rate:.3f} ({w.a_judged})",
                  f"{w.b_wrong_rate:.3f} ({w.b_judged})", f"{w.difference:+.3f}"] for w in entry.words]))
    return "\n".join(parts)


def _scores_table(models: dict[str, MetricSummary]) -> str:
    keys = sorted({k for m in models.values() for k in m.scores})
    return _table(["model", *keys], [[html.escape(n), *[_estimate(m.scores.get(k)) for k in keys]]
                                     for n, m in models.items()])


def _estimate(estimate: Estimate | None) -> str:
    return "–" if estimate is None else _num(estimate.mean) + _ci(estimate.ci95)


def _words_table(models: dict[str, MetricSummary]) -> str:
    return _table(["model", "words judged", "wrong", "wrong rate", "captions with a wrong word", "regions left out"],
                  [[html.escape(n), str(m.words.judged), str(m.words.wrong),
                    _num(m.words.wrong_rate) + _ci(m.words.ci95), _num(m.captions_with_wrong_word),
                    "–" if m.regions is None else f"{m.regions.unmentioned} of {m.regions.judged}"]
                   for n, m in models.items()])


def _comparisons(summary: DiagnosisSummary) -> str:
    compared = summary.comparisons
    if not compared:
        return ""
    rows = [[html.escape(c.a), html.escape(c.b), metric_title(c.metric), c.key, str(c.n_images),
             f"{c.mean_difference:+.4f}" + _ci(c.ci95), str(c.a_wins), str(c.b_wins), str(c.ties)]
            for c in compared]
    note = (f"<p class='note'>{len(compared)} comparisons, each at 95%: even with no real difference about "
            f"{len(compared) * 0.05:.1f} of them would leave zero out by chance. Trust a difference that the "
            "main scores of several metrics show together, not one interval among many (with Bonferroni's "
            f"correction each interval would need {100 - 5 / len(compared):.2f}%).</p>")
    return ("<h2 id='compared'>Is one better than the other?</h2><p class='note'>On the images both captioned: "
            "each metric's main score, the mean difference a − b with its paired bootstrap interval, and whether "
            "it leaves zero out (the verdicts at the top of the page come from these).</p>" + note
            + "<details><summary>Every score of every metric</summary>"
            + _table(["a", "b", "metric", "score", "images", "a − b", "a wins", "b wins", "ties"], rows)
            + "</details>")


def _verdicts(summary: DiagnosisSummary) -> str:
    """The page's answer first: which captioner is better (per pair, as the metrics' main scores say) and
    what each gets wrong, in a few lines; the tables and figures below show how."""
    lines = []
    for name, model in summary.models.items():
        for metric in summary.metrics:
            found = model.metrics.get(metric)
            if found is None or not found.words.judged:
                continue
            kind = found.dominant_error_type
            top = ", ".join(f"“{html.escape(w.word)}”" for w in found.top_wrong_words[:3] if w.wrong)
            lines.append(f"<li><b>{html.escape(name)}</b>: {metric_title(metric)} finds "
                         f"{found.words.wrong_rate:.1%}{_ci(found.words.ci95)} of its {found.words.judged} judged "
                         f"words wrong" + (f", mostly {html.escape(kind)} words" if kind else "")
                         + (f" ({top})" if top else "") + "</li>")
            break  # one metric's words per captioner: the first that judges words
    headlines = _headlines(summary)
    if not headlines and not lines:
        return ""
    more = " (how sure: <a href='#compared'>Is one better than the other?</a>)" if headlines else ""
    return ("<section id='verdict'><h2>Verdict</h2>" + headlines
            + (f"<h3>What each gets wrong</h3><ul>{''.join(lines)}</ul>" if lines else "")
            + f"<p class='note'>Higher scores are better; a difference counts when its 95% interval leaves zero "
              f"out{more}.</p></section>")


def _headlines(summary: DiagnosisSummary) -> str:
    """Per pair of models: each metric's primary score compared, and whether the metrics agree on who is better."""
    pairs: dict[tuple[str, str], list[Comparison]] = {}
    for c in summary.comparisons:
        if c.metric in SPECS and c.key == SPECS[c.metric].primary_key:
            pairs.setdefault((c.a, c.b), []).append(c)
    parts = []
    for (a, b), found in pairs.items():
        verdicts = {_better(c) for c in found}
        agree = ("the metrics agree: " + (html.escape(a) if verdicts == {"a"} else html.escape(b)) + " is better"
                 if verdicts in ({"a"}, {"b"}) else "the metrics do not agree" if {"a", "b"} <= verdicts
                 else "no metric finds a difference" if verdicts == {None} else "only some metrics find a difference")
        items = "".join(f"<li>{metric_title(c.metric)} {c.key}: a − b {c.mean_difference:+.4f}"
                        f"{_ci(c.ci95)}, {html.escape({'a': a, 'b': b}.get(_better(c), 'no difference'))}"
                        f"{' better' if _better(c) else ''} ({c.n_images} images)</li>" for c in found)
        parts.append(f"<h3>{html.escape(a)} against {html.escape(b)}: {agree}</h3><ul>{items}</ul>")
    return "".join(parts)


def _better(comparison: Comparison) -> str | None:
    """"a" or "b" when the interval of a − b leaves zero out, else None."""
    if not comparison.decided:
        return None
    return "a" if comparison.ci95[0] > 0 else "b"


def _ngrams(ngrams: dict[str, NgramScores]) -> str:
    if not ngrams:
        return ""
    names = ["BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE"]
    rows = [[html.escape(model), str(result.n_captions), *[_num(result.scores.get(n)) for n in names]]
            for model, result in ngrams.items()]
    missing = {f"{n}: {why}" for result in ngrams.values() for n, why in result.unavailable.items()}
    note = "".join(f"<li>{html.escape(m)}</li>" for m in sorted(missing))
    return ("<h2>N-gram scores against the references</h2>" + _table(["model", "captions", *names], rows)
            + (f"<p class='note'>Could not run:</p><ul class='note'>{note}</ul>" if note else ""))


def _worst_section(worst, figures: Path, image_loader) -> str:
    from capscope.pictures import draw

    parts = ["<h2>Worst captions</h2><p class='note'>Regions are outlined around their boxes, coloured by the "
             "metric's region score (blue low, yellow, red high); a dashed magenta outline marks a region the metric "
             "finds the caption leaves out; a grey one, a metric that judges no regions. Words: red judged wrong, "
             "green judged right, plain not judged (hover for the score).</p>"]
    for (model, metric), rows in worst.items():
        if not rows:
            continue
        primary = SPECS[metric].primary_key if metric in SPECS else ""
        parts.append(f"<h3>{html.escape(model)}, by {metric_title(metric)} {primary}</h3>")
        for k, row in enumerate(rows):
            result = row["result"]
            picture = ""
            image = image_loader(row["image"]) if row.get("image") else None
            if image is not None:
                boxes = [r["box"] for r in row["regions"]]
                overlay = draw.score_overlay(image, boxes, result.get("region_scores") or None,
                                             result.get("region_mentioned") or None)
                path = figures / f"worst-{_safe(model)}-{_safe(metric)}-{k + 1}.jpg"
                overlay.thumbnail((PICTURE_SIDE, PICTURE_SIDE))  # the size the page shows (twice, for sharp screens)
                overlay.save(path, quality=85)  # a 600 px PNG was ~450 KB; this is ~30 KB
                picture = f"<img src='data:image/jpeg;base64,{_b64(path)}' alt='regions'>"
            score = result["scores"].get(primary)
            parts.append(f"<div class='card'>{picture}<div><p><b>{html.escape(str(row['id']))}</b> "
                         f"{primary} {_num(score)}</p><p class='caption'>{shaded_caption(row, result)}</p></div></div>")
    return "\n".join(parts)


def shaded_caption(row: dict, result: dict) -> str:
    """The caption as HTML, each judged word shaded as Inspect shades it: red wrong, green right."""
    caption, out, end = row["caption"], [], 0
    correct = result.get("token_correct") or [None] * len(row["tokens"])
    scores = result.get("token_scores") or [None] * len(row["tokens"])
    for token, verdict, score in zip(row["tokens"], correct, scores):
        out.append(html.escape(caption[end : token["start"]]))
        text = html.escape(caption[token["start"] : token["end"]])
        if verdict is None:
            out.append(text)
        else:
            title = "" if score is None else f" title='{score:.4g}'"
            out.append(f"<span class='w {'right' if verdict else 'wrong'}'{title}>{text}</span>")
        end = token["end"]
    out.append(html.escape(caption[end:]))
    return "".join(out)


def _safe(name: str) -> str:
    return safe_name(name, max_chars=60)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _img(path: Path, caption: str) -> str:
    return f"<figure><img src='data:image/png;base64,{_b64(path)}' alt=''><figcaption class='note'>{caption}</figcaption></figure>"


def plot_scores(summary: DiagnosisSummary, path: Path) -> bool:
    """Each metric's primary score per model with its interval; False when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in summary.metrics if m in SPECS]
    models = list(summary.models)
    if not metrics or not models:
        return False
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 2.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        key = SPECS[metric].primary_key
        results = results_of(summary, metric)
        for i, name in enumerate(models):
            entry = results[name].scores.get(key) if name in results else None
            if entry is None or entry.mean is None:
                continue
            low, high = entry.ci95
            err = [[entry.mean - low], [high - entry.mean]] if low is not None else None
            ax.errorbar([i], [entry.mean], yerr=err, fmt="o", capsize=4)
            ax.annotate(f"{summary.models[name].n_images} images", (i, entry.mean), fontsize=6,
                        xytext=(6, 0), textcoords="offset points", va="center")
        ax.set_xticks(range(len(models)), models, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{metric_title(metric)} {key}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_error_types(summary: DiagnosisSummary, path: Path) -> bool:
    """Wrong rate per kind of word, one panel per word-level metric; False when none judged words."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    metrics = [m for m in summary.metrics if any(r.words.judged for r in results_of(summary, m).values())]
    if not metrics:
        return False
    models = list(summary.models)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.0), squeeze=False)
    width = 0.8 / max(len(models), 1)
    for ax, metric in zip(axes[0], metrics):
        results = results_of(summary, metric)
        for i, name in enumerate(models):
            types = results[name].error_types if name in results else {}
            rates = [(types[t].wrong_rate or 0.0) if t in types else 0.0 for t in TYPES]
            bars = ax.bar(np.arange(len(TYPES)) + i * width, rates, width, label=name)
            ax.bar_label(bars, labels=[str(types[t].judged if t in types else 0) for t in TYPES], fontsize=6)
        ax.set_xticks(np.arange(len(TYPES)) + width * (len(models) - 1) / 2, TYPES, rotation=30, fontsize=8)
        ax.set_title(metric_title(metric), fontsize=9)
        ax.set_ylabel("wrong rate", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
