"""A measured figure beside the papers' published value (`bench.published`):
whether the value lies in the figure's 95% interval, the signed difference,
and the sources a result cites."""
from __future__ import annotations

import math

from capscope.bench import published as pub


def with_published(figures: dict, benchmark: str, statistic: str, key: str, setting: str = "") -> dict:
    """The paper's value beside the measured one: "reproduced" when it lies in the
    95% interval, else the signed difference (measured - published)."""
    entries = pub.lookup(benchmark, statistic, key, setting)
    others = [p for s in ("tau_b", "tau_c", "pearson") if s != statistic for p in pub.lookup(benchmark, s, key)]
    figures["published"] = entries[0].value if entries else None
    figures["published_source"] = entries[0].source.cite() if entries else None
    figures["published_all"] = [{"statistic": p.statistic, "value": p.value, "row": p.row, "source": p.source.cite(),
                                 **({"setting": p.setting} if p.setting else {})} for p in entries + others]
    measured, interval = figures.get(statistic), figures.get("ci95")
    figures["reproduced"] = None
    figures["difference"] = None
    if entries and measured is not None and math.isfinite(measured):
        figures["difference"] = measured - entries[0].value
        if interval:
            figures["reproduced"] = interval[0] <= entries[0].value <= interval[1]
    return figures


def cited_sources(result: dict) -> list[pub.Source]:
    cited = {entry["source"] for figures in result.get("metrics", {}).values()
             for entry in figures.get("published_all", [])}
    cited |= {row["source"] for figures in (result.get("dense") or {}).get("metrics", {}).values()
              for row in figures["published"]}
    return [s for s in pub.sources(pub.PUBLISHED) if s.cite() in cited]


def first_value(entries) -> float | None:
    return entries[0].value if entries else None
