"""Loaders of the rating benchmarks (Flickr8k-Expert, Flickr8k-CF, Composite,
THumB 1.0): one `Rated` row per human judgement, built as PAC-S's
compute_correlations.py builds them (docs/human-judgements.md)."""
from __future__ import annotations

import ast
import csv
import math
from pathlib import Path

from capscope.bench.evaluate import read_gold
from capscope.bench.human_rows import Loaded, Rated, find_file, find_image, normalise, parse_rating, read_json


# ---------------------------------------------------------------- Flickr8k layout (also composite.json)

def _judgement(judgement) -> tuple[str, float] | str | None:
    """(caption, rating) of one human_judgement entry, None for a NaN rating, else the problem."""
    if not isinstance(judgement, dict):
        return "not an object"
    rating = parse_rating(judgement.get("rating"))
    if isinstance(rating, float) and math.isnan(rating):
        return None
    if isinstance(rating, str):
        return rating
    caption = normalise(judgement.get("caption"))
    return (caption, rating) if caption else "caption missing or empty"


def _flickr_rows(path: Path, problems: list[str]) -> tuple[list[Rated], int]:
    """Every judgement as a row, NaN ratings skipped, captions and references
    whitespace-normalised: the Flickr8k dataset of PAC-S's compute_correlations.py.
    References are `ground_truth` as the file has them (the released files already
    leave the judged caption out of them)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: expected an object keyed by image, as flickr8k.json is (docs/human-judgements.md)")
    folders = [path.parent / "images", path.parent]
    rows, n_nan = [], 0
    for key, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("human_judgement"), list):
            raise ValueError(f"{path.name}: entry {key!r} has no human_judgement list: not the Flickr8k layout")
        references = [normalise(ref) for ref in entry.get("ground_truth") or []]
        image = find_image(entry.get("image_path"), folders)
        usable = []
        for index, judgement in enumerate(entry["human_judgement"]):
            parsed = _judgement(judgement)
            if parsed is None:
                n_nan += 1
            elif isinstance(parsed, str):
                problems.append(f"{path.name}: {key} judgement {index}: {parsed}")
            else:
                usable.append(parsed)
        if usable and image is None:
            problems.append(f"{path.name}: {key}: image {entry.get('image_path')!r} not found in "
                            f"{folders[0]} ({len(usable)} judgements skipped)")
            continue
        rows += [Rated(image, caption, rating, list(references), str(key)) for caption, rating in usable]
    return rows, n_nan


def flickr_loader(benchmark: str, file_name: str, variant: str):
    def loader(data: Path, seed: int) -> Loaded:
        path = find_file(data, (file_name,), benchmark)
        problems: list[str] = []
        rows, n_nan = _flickr_rows(path, problems)
        protocol = (f"{benchmark}: one row per judgement of {path.name} ({n_nan} NaN ratings skipped), captions and "
                    f"references whitespace-normalised, references = ground_truth; as PAC-S compute_correlations.py "
                    f"(Kendall tau_{variant})")
        return Loaded(benchmark, "rating", protocol, rows, problems, path.parent, variant, "kendall")
    return loader


# ---------------------------------------------------------------- Composite

COMPOSITE_FILES = ("composite.json", "en_test_composite_da2.csv", "en_test_composite_da.csv", "composite.csv")


def _column(header: list[str], names: tuple[str, ...], path: Path) -> str:
    for name in names:
        if name in header:
            return name
    raise ValueError(f"{path.name}: no {' or '.join(names)} column: "
                     "not the Composite CSV layout (mt, refs, score, imgid)")


def _csv_references(text) -> list[str] | None:
    try:
        value = ast.literal_eval(text) if isinstance(text, str) and text.strip() else []
    except (ValueError, SyntaxError):
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(ref, str) for ref in value):
        return None
    return [normalise(ref) for ref in value]


def _composite_csv_rows(path: Path, problems: list[str]) -> tuple[list[Rated], int]:
    """Polos / capevalkit layout: one row per judgement, `refs` a Python list literal."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        caption_col = _column(header, ("mt", "cand", "caption"), path)
        score_col = _column(header, ("score", "human_score", "rating"), path)
        image_col = _column(header, ("imgid", "image", "image_path"), path)
        folders = [path.parent / "images", path.parent]
        rows, n_nan = [], 0
        for row in reader:
            where = f"{path.name}: line {reader.line_num}"
            rating, caption = parse_rating(row.get(score_col)), normalise(row.get(caption_col))
            references = _csv_references(row.get("refs"))
            if isinstance(rating, float) and math.isnan(rating):
                n_nan += 1
                continue
            image = find_image(row.get(image_col), folders)
            reason = (rating if isinstance(rating, str) else "caption missing or empty" if not caption
                      else "refs is not a list of strings" if references is None
                      else f"image {row.get(image_col)!r} not found in {folders[0]}" if image is None else "")
            if reason:
                problems.append(f"{where}: {reason}")
                continue
            rows.append(Rated(image, caption, rating, references, str(row.get(image_col))))
    return rows, n_nan


def load_composite(data: Path, seed: int) -> Loaded:
    path = find_file(data, COMPOSITE_FILES, "composite")
    problems: list[str] = []
    if path.suffix.lower() == ".json":
        rows, n_nan = _flickr_rows(path, problems)
    elif path.suffix.lower() == ".csv":
        rows, n_nan = _composite_csv_rows(path, problems)
    else:
        raise ValueError(f"composite: {path.name} is neither a .json (Flickr8k layout) "
                         "nor a .csv (mt, refs, score, imgid)")
    protocol = (f"composite: one row per judgement of {path.name} (1-5 correctness, {n_nan} NaN skipped), captions "
                "and references whitespace-normalised; as CLIP-S / PAC-S (Kendall tau_c)")
    return Loaded("composite", "rating", protocol, rows, problems, path.parent, "c", "kendall")


# ---------------------------------------------------------------- THumB 1.0

THUMB_ASPECTS = ("P", "R", "Fl", "Con", "Inc")


def _thumb_references(root: Path) -> dict[str, list[str]] | None:
    path = root / "mscoco_references.json"
    if not path.is_file():
        return None
    return {str(row.get("seg_id")): [normalise(r) for r in row.get("refs", [])] for row in read_gold(path)}


def load_thumb(data: Path, seed: int) -> Loaded:
    path = find_file(data, ("mscoco_THumB-1.0.jsonl",), "thumb", ("mscoco",))
    root = path.parent
    references = _thumb_references(root)
    folders = [root / "images", root]
    rows, problems = [], []
    for number, row in enumerate(read_gold(path), 1):
        if not isinstance(row, dict) or ("hyp" not in row and "human_score" not in row):
            raise ValueError(f"{path.name}:{number}: no hyp / human_score: not the THumB layout")
        caption, rating = normalise(row.get("hyp")), parse_rating(row.get("human_score"))
        image = find_image(row.get("image"), folders)
        reason = (rating if isinstance(rating, str) else "human_score is NaN" if math.isnan(rating)
                  else "caption missing or empty" if not caption
                  else f"image {row.get('image')!r} not found in {folders[0]}" if image is None else "")
        if reason:
            problems.append(f"{path.name}: row {number}: {reason}")
            continue
        aspects = {k: float(row[k]) for k in THUMB_ASPECTS if isinstance(row.get(k), (int, float))}
        refs = (references or {}).get(str(row.get("seg_id")), [])
        rows.append(Rated(image, caption, rating, list(refs), str(row.get("seg_id")), str(row.get("SYS", "")), aspects))
    refs_note = "mscoco_references.json (4 per image, the Human caption left out)" if references else "none found"
    protocol = (f"thumb: one row per caption of {path.name}, rating = human_score ((P+R)/2 + penalties), "
                f"aspects P/R kept, source = system ('Human' rows drop for 'w/o Human'); references {refs_note}; "
                "Pearson (InfoMetIC Table 3)")
    return Loaded("thumb", "rating", protocol, rows, problems, root, None, "pearson")
