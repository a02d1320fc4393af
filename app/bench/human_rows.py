"""The rows the human-judgement loaders (`bench.human`) give, and the small
readers they share: whitespace normalising, finding a benchmark's file and an
image, reading JSON and a rating. A reader that meets a file that is not the
layout raises ValueError with one line."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Rated:
    """One human judgement of one caption (rating benchmarks)."""
    image: Path
    caption: str
    rating: float
    references: list[str]
    group: str                                  # the image's key: the bootstrap resamples groups
    source: str = ""                            # THumB: the captioning system ("Human" for people)
    aspects: dict[str, float] = field(default_factory=dict)  # THumB: P, R, Fl, Con, Inc


@dataclass
class Pair:
    """Which of two captions people prefer (pairwise benchmarks)."""
    image: Path
    captions: tuple[str, str]
    preferred: int                              # 0 or 1 (FOIL: the clean caption, 0)
    reference_draws: list[list[str]]            # one reference set per draw ([[]] when none)
    category: str                               # PASCAL-50S: HC | HI | HM | MM; FOIL: "foil"; nocaps-FOIL: the domain
    group: str
    foil_word: str | None = None                # FOIL, nocaps-FOIL: the word of captions[1] that makes it wrong
    target_word: str | None = None              # FOIL, nocaps-FOIL: the word it replaced


@dataclass
class Loaded:
    benchmark: str
    kind: str                                   # "rating" | "pairwise" | "token"
    protocol: str
    rows: list
    problems: list[str]
    base_dir: Path
    tau_variant: str | None = None              # the papers' Kendall variant: "c" or "b"
    statistic: str = ""                         # the papers' figure: "kendall" | "pearson" | "accuracy" | "token"


def normalise(text) -> str:
    """Whitespace collapsed to single spaces, as PAC-S's `' '.join(s.split())`."""
    return " ".join(text.split()) if isinstance(text, str) else ""


def find_file(data: Path, names: tuple[str, ...], benchmark: str, subfolders: tuple[str, ...] = ()) -> Path:
    if data.is_file():
        return data
    for folder in (data, *(data / sub for sub in subfolders)):
        for name in names:
            if (folder / name).is_file():
                return folder / name
    raise ValueError(f"{benchmark}: no {' or '.join(names)} in {data} (layouts: docs/human-judgements.md)")


def find_image(name, folders: list[Path]) -> Path | None:
    if not isinstance(name, str) or not name.strip():
        return None
    for folder in folders:
        for candidate in (folder / name, folder / Path(name).name):
            if candidate.is_file():
                return candidate.resolve()
    return None


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path.name}: not JSON ({err.msg}, line {err.lineno})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path.name}: not a text file") from None


def parse_rating(value) -> float | str:
    """The rating as a float (NaN kept, to be skipped), or the reason it is unusable."""
    if value is None:
        return "rating missing"
    if isinstance(value, bool):
        return f"bad rating {value!r}"
    try:
        return float(value)
    except (TypeError, ValueError):
        return f"bad rating {value!r}"

