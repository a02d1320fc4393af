"""The papers' published agreement with people, to print beside what capscope
measures. Every number below was read from the paper's table named with it;
nothing is derived. Values are kept as printed (x100 for Kendall tau and
accuracy, a fraction for THumB's Pearson) and given back on the scale
capscope reports (tau and accuracy in [-1, 1] / [0, 1]).

Statistics: "tau_b", "tau_c" and "pearson" (rating benchmarks); "accuracy"
(PASCAL-50S mean of HC/HI/HM/MM, FOIL) and "HC", "HI", "HM", "MM" (PASCAL-50S
categories). FOIL numbers carry a setting, "1 ref" or "4 refs" (references
given to the reference-based metrics; reference-free ones print the same).
"LA" and "AP" are the CLIP4DM protocols' figures on FOIL, nocaps-FOIL and HAT
(`bench.correlate`'s dense-misalignment section); those values carry the CLIP
backbone they were measured with, printed as fractions.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    tag: str
    paper: str
    table: str

    def cite(self) -> str:
        return f"{self.paper}, {self.table}"


@dataclass(frozen=True)
class Published:
    benchmark: str
    statistic: str
    metric_key: str          # capscope's "<metric>.<key>"
    printed: float           # as the paper prints it
    scale: float             # printed / scale = capscope's scale
    row: str                 # the paper's row label
    source: Source
    setting: str = ""
    backbone: str = ""       # the paper's CLIP, as it prints it ("ViT-B/32"), where the value depends on it

    @property
    def value(self) -> float:
        return round(self.printed / self.scale, 6)


INFOMETIC_PAPER = "Hu et al., InfoMetIC: An Informative Metric for Reference-free Image Caption Evaluation (ACL 2023)"
PACS_PAPER = "Sarto et al., Positive-Augmented Contrastive Learning for Image and Video Captioning Evaluation (CVPR 2023)"
HICE_PAPER = "Zeng et al., HICEScore: A Hierarchical Metric for Image Captioning Evaluation (ACM MM 2024)"
CLIP4DM_PAPER = "Nam et al., Extract Free Dense Misalignment from CLIP (AAAI 2025)"

INFOMETIC_T1 = Source("InfoMetIC T1", INFOMETIC_PAPER, "Table 1")
INFOMETIC_T3 = Source("InfoMetIC T3", INFOMETIC_PAPER, "Table 3 (THumB 1.0, w/ Human, Total)")
PACS_T1 = Source("PAC-S T1", PACS_PAPER, "Table 1")
PACS_T2 = Source("PAC-S T2", PACS_PAPER, "Table 2")
PACS_T4 = Source("PAC-S T4", PACS_PAPER, "Table 4")
PACS_T6 = Source("PAC-S T6", PACS_PAPER, "Table 6")
HICE_T1 = Source("HICE-S T1", HICE_PAPER, "Table 1")
HICE_T2 = Source("HICE-S T2", HICE_PAPER, "Table 2")
HICE_T4 = Source("HICE-S T4", HICE_PAPER, "Table 4")
# read from the authors' AAAI poster (misc/CLIP4DM_poster.pdf of naver-ai/clip4dm), which reprints the
# paper's FOIL / nocaps-FOIL and HAT tables without their table numbers; the paper could not be checked here
CLIP4DM_FOIL = Source("CLIP4DM FOIL", CLIP4DM_PAPER,
                      "FOIL / nocaps-FOIL table (as reprinted on the AAAI 2025 poster)")
CLIP4DM_HAT = Source("CLIP4DM HAT", CLIP4DM_PAPER, "HAT table (as reprinted on the AAAI 2025 poster)")

# the open_clip models (a row's model.clip, "name/weights") behind a paper's backbone label: CLIP4DM's
# src/clip4dm.py loads OpenAI's ViT-B-32 and ViT-H-14 laion2b_s32b_b79k
BACKBONES = {
    "ViT-B/32": ("ViT-B-32/openai", "ViT-B-32-quickgelu/openai"),
    "ViT-H/14": ("ViT-H-14/laion2b_s32b_b79k",),
}

# the papers' row names -> capscope's score keys
ROWS = {
    "CLIP-S": "clip-s.clip_s",
    "RefCLIP-S": "clip-s.ref_clip_s",
    "PAC-S": "pac-s.pac_s",
    "RefPAC-S": "pac-s.ref_pac_s",
    "InfoCLIP": "infoclip.overall",
    "InfoCLIP^P": "infoclip.precision",
    "InfoCLIP^R": "infoclip.recall",
    "InfoMetIC": "infometic.overall",
    "InfoMetIC+": "infometic.overall_plus",
    "InfoMetIC^P": "infometic.precision",
    "InfoMetIC^R": "infometic.recall",
    "HICE-S": "hice.hice",
    "RefHICE-S": "hice.ref_hice",
}

# when several papers print a number for one key, the first of these is shown
# beside the result (the metric's own paper first); all are listed as sources
PREFERENCE = {
    "clip-s": ("InfoMetIC", "PAC-S", "HICE-S"),
    "pac-s": ("PAC-S", "HICE-S"),
    "infoclip": ("InfoMetIC",),
    "infometic": ("InfoMetIC", "HICE-S"),
    "hice": ("HICE-S",),
}

PASCAL = ("HC", "HI", "HM", "MM", "accuracy")


def _table(source: Source, columns: tuple, rows: dict, scale: float = 100.0) -> list[Published]:
    """One paper table: `columns` are (benchmark, statistic, setting) per value."""
    out = []
    for row, values in rows.items():
        for (benchmark, statistic, setting), printed in zip(columns, values, strict=True):
            if printed is not None:
                out.append(Published(benchmark, statistic, ROWS[row], printed, scale, row, source, setting))
    return out


def _backbone_table(source: Source, columns: tuple, rows: dict) -> list[Published]:
    """A table whose rows name their CLIP: `rows` maps (paper row label, capscope key,
    backbone) to the values, printed as fractions."""
    return [Published(benchmark, statistic, key, printed, 1.0, label, source, setting, backbone)
            for (label, key, backbone), values in rows.items()
            for (benchmark, statistic, setting), printed in zip(columns, values, strict=True) if printed is not None]


def _entries() -> list[Published]:
    pascal = tuple(("pascal-50s", s, "") for s in PASCAL)
    foil = (("foil", "accuracy", "1 ref"), ("foil", "accuracy", "4 refs"))
    flickr_both = (("flickr8k-expert", "tau_b", ""), ("flickr8k-expert", "tau_c", ""),
                   ("flickr8k-cf", "tau_b", ""), ("flickr8k-cf", "tau_c", ""))
    composite_both = (("composite", "tau_b", ""), ("composite", "tau_c", ""))
    return [
        # InfoMetIC Table 1: F-Ex tau_c, F-CF tau_b, Com tau_c, Pascal-50S HC HI HM MM Mean
        *_table(INFOMETIC_T1, (("flickr8k-expert", "tau_c", ""), ("flickr8k-cf", "tau_b", ""),
                               ("composite", "tau_c", ""), *pascal), {
            "RefCLIP-S": (53.0, 36.4, 55.4, 57.9, 99.5, 96.1, 80.8, 83.6),
            "CLIP-S": (51.5, 34.4, 53.8, 60.4, 99.4, 97.8, 77.1, 83.7),
            "InfoCLIP": (32.6, 23.5, 15.3, 37.3, 87.3, 58.9, 72.9, 64.1),
            "InfoMetIC": (54.2, 36.3, 59.2, 69.0, 99.8, 94.0, 78.3, 85.3),
            "InfoMetIC+": (55.5, 36.6, 59.3, 69.9, 99.7, 96.8, 79.6, 86.5),
        }),
        # InfoMetIC Table 3: THumB 1.0 Pearson with the Total score, "w/ Human" columns
        *_table(INFOMETIC_T3, (("thumb", "pearson", ""),), {
            "RefCLIP-S": (0.41,), "InfoCLIP^R": (0.17,), "InfoCLIP^P": (-0.08,), "InfoCLIP": (0.03,),
            "CLIP-S": (0.32,), "InfoMetIC^R": (0.36,), "InfoMetIC^P": (0.33,), "InfoMetIC": (0.38,),
            "InfoMetIC+": (0.39,),
        }, scale=1.0),
        # PAC-S Table 1: Flickr8k-Expert tau_b tau_c, Flickr8k-CF tau_b tau_c (ViT-B/32)
        *_table(PACS_T1, flickr_both, {
            "CLIP-S": (51.1, 51.2, 34.4, 17.7), "PAC-S": (53.9, 54.3, 36.0, 18.6),
            "RefCLIP-S": (52.6, 53.0, 36.4, 18.8), "RefPAC-S": (55.5, 55.9, 37.6, 19.5),
        }),
        # PAC-S Table 2: Composite tau_b tau_c
        *_table(PACS_T2, composite_both, {
            "CLIP-S": (49.8, 53.8), "PAC-S": (51.5, 55.7), "RefCLIP-S": (51.2, 55.4), "RefPAC-S": (53.0, 57.3),
        }),
        # PAC-S Table 4: Pascal-50S, mean over five draws of five references
        *_table(PACS_T4, pascal, {
            "CLIP-S": (55.9, 99.3, 96.5, 72.0, 80.9), "PAC-S": (60.6, 99.3, 96.9, 72.9, 82.4),
            "RefCLIP-S": (64.9, 99.5, 95.5, 73.3, 83.3), "RefPAC-S": (67.7, 99.6, 96.0, 75.6, 84.7),
        }),
        # PAC-S Table 6: FOIL accuracy with 1 and 4 references
        *_table(PACS_T6, foil, {
            "CLIP-S": (87.2, 87.2), "PAC-S": (89.9, 89.9), "RefCLIP-S": (91.0, 92.6), "RefPAC-S": (93.7, 94.9),
        }),
        # HICE-S Table 1: F-Ex tau_b tau_c, F-CF tau_b tau_c, Composite tau_b tau_c (own rows only;
        # its CLIP-S, PAC-S and InfoMetIC rows repeat the tables above)
        *_table(HICE_T1, (*flickr_both, *composite_both), {
            "HICE-S": (55.9, 56.4, 37.2, 19.2, 53.1, 57.9), "RefHICE-S": (57.2, 57.7, 38.2, 19.8, 53.9, 58.7),
        }),
        # HICE-S Table 2: Pascal-50S
        *_table(HICE_T2, pascal, {
            "HICE-S": (68.6, 99.7, 96.5, 79.5, 86.1), "RefHICE-S": (71.4, 99.7, 97.7, 79.7, 87.3),
        }),
        # HICE-S Table 4: FOIL with 1 and 4 references
        *_table(HICE_T4, foil, {"HICE-S": (93.1, 93.1), "RefHICE-S": (96.4, 97.0)}),
        # CLIP4DM, FOIL and nocaps-FOIL: LA and AP ("Ours" = clip4dm's word reading and F-CLIPScore).
        # Its Table 14 (backbones, also on the poster) prints other nocaps-FOIL values for ViT-B/32 openai
        # (LA 0.602, AP 0.723) and ViT-H/14 (0.716, 0.806); the results table's are kept here.
        *_backbone_table(CLIP4DM_FOIL, (("foil", "LA", ""), ("foil", "AP", ""), ("nocaps-foil", "LA", ""),
                                        ("nocaps-foil", "AP", "")), {
            ("CLIPScore (ViT-B/32)", "clip-s.clip_s", "ViT-B/32"): (None, 0.71, None, 0.69),
            ("CLIPScore (ViT-H/14)", "clip-s.clip_s", "ViT-H/14"): (None, 0.76, None, 0.72),
            ("Ours (ViT-B/32)", "clip4dm.f_clip_s", "ViT-B/32"): (0.73, 0.71, 0.60, 0.69),
            ("Ours (ViT-H/14)", "clip4dm.f_clip_s", "ViT-H/14"): (0.84, 0.81, 0.72, 0.80),
        }),
        # CLIP4DM, HAT: its CLIPScore row names no backbone
        *_backbone_table(CLIP4DM_HAT, (("hat", "LA", ""), ("hat", "AP", "")), {
            ("CLIPScore", "clip-s.clip_s", ""): (None, 0.39),
            ("Ours (ViT-B/32)", "clip4dm.f_clip_s", "ViT-B/32"): (0.19, 0.36),
            ("Ours (ViT-H/14)", "clip4dm.f_clip_s", "ViT-H/14"): (0.35, 0.36),
        }),
    ]


PUBLISHED: tuple[Published, ...] = tuple(_entries())


def lookup(benchmark: str, statistic: str, metric_key: str, setting: str = "") -> list[Published]:
    """Every published value for one capscope key, the preferred paper first."""
    found = [p for p in PUBLISHED if (p.benchmark, p.statistic, p.metric_key) == (benchmark, statistic, metric_key)
             and (not setting or not p.setting or p.setting == setting)]
    order = PREFERENCE.get(metric_key.split(".")[0], ())
    rank = lambda p: next((i for i, name in enumerate(order) if p.source.tag.startswith(name + " ")), len(order))
    return sorted(found, key=rank)


def same_backbone(entry: Published, clip: str) -> bool:
    """Whether `clip` (a row's model.clip) is the CLIP the published value was measured with."""
    return clip in BACKBONES.get(entry.backbone, ())


def sources(entries) -> list[Source]:
    """The distinct sources of some entries, in first-seen order."""
    seen: dict[str, Source] = {}
    for entry in entries:
        seen.setdefault(entry.source.tag, entry.source)
    return list(seen.values())
