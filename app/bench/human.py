"""Loaders for the public human-judgement benchmarks that `capscope correlate`
compares metrics with. Each turns one public layout (docs/human-judgements.md) into
plain rows, built the way the reference code of the papers builds them:

- rating benchmarks (Flickr8k-Expert, Flickr8k-CF, Composite, THumB 1.0): one
  `Rated` row per human judgement;
- pairwise benchmarks (PASCAL-50S, FOIL, nocaps-FOIL): one `Pair` per caption pair;
- token benchmarks (HAT, CapTokenEval files): CapTokenEval items (dicts).

A row that cannot be used (image or caption missing, bad rating) is skipped and
named in `Loaded.problems`; loading goes on. A file that is not the layout at
all raises ValueError with one line.
"""
from __future__ import annotations

import ast
import csv
import json
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capscope.bench.evaluate import read_gold
from capscope.metrics.text import load_spacy, tokenize

BENCHMARKS = ("flickr8k-expert", "flickr8k-cf", "composite", "pascal-50s", "foil", "nocaps-foil", "thumb", "hat",
              "captokeneval")

PASCAL_CATEGORIES = {1: "HC", 2: "HI", 3: "HM", 4: "MM"}
PASCAL_JUDGEMENTS = 48      # triplets (one reference and one vote each) per caption pair
PASCAL_DRAWS = 5            # PAC-S sec. 4.3: five draws of five references, accuracy averaged
PASCAL_REFS_PER_DRAW = 5
PASCAL_TIE_SEED = 42        # ties broken as the public loader of clipscore issue #4 does


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


def load(benchmark: str, data: Path, *, seed: int = 0) -> Loaded:
    """Rows of `benchmark` read from `data` (its folder, or its main file)."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}: choose one of {', '.join(BENCHMARKS)}")
    data = Path(data).expanduser()
    if not data.exists():
        raise ValueError(f"{benchmark}: {data} does not exist. {missing_data_hint(benchmark)}")
    return _LOADERS[benchmark](data.resolve(), seed)


def missing_data_hint(benchmark: str) -> str:
    """One line: what to download and where to put it."""
    if benchmark not in _HINTS:
        raise ValueError(f"unknown benchmark {benchmark!r}: choose one of {', '.join(BENCHMARKS)}")
    return _HINTS[benchmark]


_PACS_FLICKR = ("the Flickr8k folder linked from github.com/aimagelab/pacscore "
                "(https://drive.google.com/drive/folders/1oQY8zVCmf0ZGUfsJQ_OnqP2_kw1jGIXp), or build it with "
                "flickr8k_example/download.py of github.com/jmhessel/clipscore")
_HINTS = {
    "flickr8k-expert": f"Flickr8k-Expert: get flickr8k.json and the images from {_PACS_FLICKR}; "
                       "put flickr8k.json beside an images/ folder and pass --data FOLDER",
    "flickr8k-cf": f"Flickr8k-CF: get crowdflower_flickr8k.json and the images from {_PACS_FLICKR}; "
                   "put crowdflower_flickr8k.json beside an images/ folder and pass --data FOLDER",
    "composite": "Composite: get it from https://imagesdg.wordpress.com/image-to-scene-description-graph/ "
                 "(or the Hugging Face copy yuwd/Composite), as a CSV with columns mt, refs, score, imgid "
                 "or a composite.json in the Flickr8k layout, beside an images/ folder; pass --data FOLDER",
    "pascal-50s": "PASCAL-50S: get pyCIDErConsensus.zip (pair_pascal.mat, consensus_pascal.mat) from "
                  "https://vrama91.github.io/cider/ and the VOC2010 JPEGImages; put the two .mat files "
                  "beside an images/ folder and pass --data FOLDER",
    "foil": "FOIL: get foilv1.0_test_2017.json from https://foilunitn.github.io/, the COCO val2014 images "
            "(and captions_val2014.json for references) from https://cocodataset.org; put them in one "
            "folder with the images in images/ and pass --data FOLDER",
    "nocaps-foil": "nocaps-FOIL: get data/nocaps-val-foil.json from https://github.com/DavidMChan/aloha and the "
                   "nocaps validation images it names (their URLs are in "
                   "https://nocaps.s3.amazonaws.com/nocaps_val_4500_captions.json); put the images in images/ "
                   "beside the file and pass --data FOLDER",
    "thumb": "THumB 1.0: get mscoco/mscoco_THumB-1.0.jsonl and mscoco/mscoco_references.json from "
             "https://github.com/jungokasai/THumB and the Karpathy test images it links; put the images "
             "in images/ beside the two files and pass --data FOLDER",
    "hat": "HAT: get data/hat-trainval.json from https://github.com/DavidMChan/aloha and the COCO val2014 "
           "images from https://cocodataset.org; put the images in images/ beside the file and pass --data FOLDER",
    "captokeneval": "CapTokenEval: pass --data FILE.jsonl written by `capscope export --format captokeneval` "
                    "or `capscope demo-data`; images resolve relative to the file's folder",
}


# ---------------------------------------------------------------- shared helpers

def _normalise(text) -> str:
    """Whitespace collapsed to single spaces, as PAC-S's `' '.join(s.split())`."""
    return " ".join(text.split()) if isinstance(text, str) else ""


def _find_file(data: Path, names: tuple[str, ...], benchmark: str, subfolders: tuple[str, ...] = ()) -> Path:
    if data.is_file():
        return data
    for folder in (data, *(data / sub for sub in subfolders)):
        for name in names:
            if (folder / name).is_file():
                return folder / name
    raise ValueError(f"{benchmark}: no {' or '.join(names)} in {data} (layouts: docs/human-judgements.md)")


def _find_image(name, folders: list[Path]) -> Path | None:
    if not isinstance(name, str) or not name.strip():
        return None
    for folder in folders:
        for candidate in (folder / name, folder / Path(name).name):
            if candidate.is_file():
                return candidate.resolve()
    return None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path.name}: not JSON ({err.msg}, line {err.lineno})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path.name}: not a text file") from None


def _rating(value) -> float | str:
    """The rating as a float (NaN kept, to be skipped), or the reason it is unusable."""
    if value is None:
        return "rating missing"
    if isinstance(value, bool):
        return f"bad rating {value!r}"
    try:
        return float(value)
    except (TypeError, ValueError):
        return f"bad rating {value!r}"


# ---------------------------------------------------------------- Flickr8k layout (also composite.json)

def _judgement(judgement) -> tuple[str, float] | str | None:
    """(caption, rating) of one human_judgement entry, None for a NaN rating, else the problem."""
    if not isinstance(judgement, dict):
        return "not an object"
    rating = _rating(judgement.get("rating"))
    if isinstance(rating, float) and math.isnan(rating):
        return None
    if isinstance(rating, str):
        return rating
    caption = _normalise(judgement.get("caption"))
    return (caption, rating) if caption else "caption missing or empty"


def _flickr_rows(path: Path, problems: list[str]) -> tuple[list[Rated], int]:
    """Every judgement as a row, NaN ratings skipped, captions and references
    whitespace-normalised: the Flickr8k dataset of PAC-S's compute_correlations.py.
    References are `ground_truth` as the file has them (the released files already
    leave the judged caption out of them)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: expected an object keyed by image, as flickr8k.json is (docs/human-judgements.md)")
    folders = [path.parent / "images", path.parent]
    rows, n_nan = [], 0
    for key, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("human_judgement"), list):
            raise ValueError(f"{path.name}: entry {key!r} has no human_judgement list: not the Flickr8k layout")
        references = [_normalise(ref) for ref in entry.get("ground_truth") or []]
        image = _find_image(entry.get("image_path"), folders)
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


def _load_flickr(benchmark: str, file_name: str, variant: str):
    def loader(data: Path, seed: int) -> Loaded:
        path = _find_file(data, (file_name,), benchmark)
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
    return [_normalise(ref) for ref in value]


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
            rating, caption = _rating(row.get(score_col)), _normalise(row.get(caption_col))
            references = _csv_references(row.get("refs"))
            if isinstance(rating, float) and math.isnan(rating):
                n_nan += 1
                continue
            image = _find_image(row.get(image_col), folders)
            reason = (rating if isinstance(rating, str) else "caption missing or empty" if not caption
                      else "refs is not a list of strings" if references is None
                      else f"image {row.get(image_col)!r} not found in {folders[0]}" if image is None else "")
            if reason:
                problems.append(f"{where}: {reason}")
                continue
            rows.append(Rated(image, caption, rating, references, str(row.get(image_col))))
    return rows, n_nan


def _load_composite(data: Path, seed: int) -> Loaded:
    path = _find_file(data, COMPOSITE_FILES, "composite")
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


# ---------------------------------------------------------------- PASCAL-50S

def _mat_unwrap(value):
    """The one element inside the 1x1 arrays scipy wraps MATLAB cells in."""
    while isinstance(value, np.ndarray) and value.dtype.names is None and value.size == 1:
        value = value.flat[0]
    return value


def _mat_text(value) -> str:
    value = _mat_unwrap(value)
    if isinstance(value, np.ndarray):
        return "" if value.size == 0 else _mat_text(value.flat[0])
    return str(value)


def _mat_fields(value) -> list:
    """The fields of a MATLAB struct or the cells of a cell array, however scipy nested them."""
    value = _mat_unwrap(value)
    if isinstance(value, np.ndarray) and value.dtype.names and value.size == 1:
        value = value.flat[0]
    if isinstance(value, np.void) and value.dtype.names:
        return [value[name] for name in value.dtype.names]
    if isinstance(value, np.ndarray) and value.dtype == object:
        return list(value.flat)
    raise ValueError("PASCAL-50S .mat: a record is neither a struct nor a cell array")


def _read_mat(path: Path) -> dict:
    try:
        from scipy.io import loadmat  # scipy.io costs 0.15 s: only PASCAL-50S needs it

        return loadmat(path)
    except Exception as err:  # scipy raises several kinds for a file that is not MATLAB
        raise ValueError(f"{path.name}: not a MATLAB file scipy can read ({err})") from None


def _pascal_votes(triplets: list, pair: int, a: str, b: str) -> tuple[list[str], int, int] | str:
    """The 48 references of one pair and the votes for caption a and caption b."""
    references, votes = [], defaultdict(int)
    for record in triplets[pair * PASCAL_JUDGEMENTS:(pair + 1) * PASCAL_JUDGEMENTS]:
        reference, first, second, choice = _mat_fields(record)[:4]
        references.append(_normalise(_mat_text(reference)))
        chosen = first if float(_mat_unwrap(choice)) == 1 else second
        votes[_normalise(_mat_text(chosen))] += 1
    if set(votes) - {a, b}:
        return "its consensus rows vote for other captions than the pair's"
    return references, votes[a], votes[b]


def _pascal_pairs(root: Path, pairs_mat: dict, consensus: dict, seed: int, problems: list[str]) -> list[Pair]:
    try:
        records = list(np.asarray(pairs_mat["new_input"]).ravel())
        categories = [int(c) for c in np.asarray(pairs_mat["category"]).ravel()]
        triplets = list(np.asarray(consensus["triplets"]).ravel())
    except KeyError as err:
        raise ValueError(f"PASCAL-50S: {err.args[0]} missing from the .mat files: not pyCIDErConsensus") from None
    if len(categories) != len(records) or len(triplets) != PASCAL_JUDGEMENTS * len(records):
        raise ValueError(f"PASCAL-50S: {len(records)} pairs, {len(categories)} categories and {len(triplets)} "
                         f"consensus rows (expected {PASCAL_JUDGEMENTS} per pair)")
    folders = [base / sub for base in (root, root.parent)
               for sub in ("images", "JPEGImages", "VOCdevkit/VOC2010/JPEGImages")]
    tie_break, draw = random.Random(PASCAL_TIE_SEED), random.Random(seed)
    out = []
    for index, (record, category) in enumerate(zip(records, categories)):
        name, a, b = (_mat_text(cell) for cell in _mat_fields(record)[:3])
        a, b = _normalise(a), _normalise(b)
        coin = tie_break.random()                   # one draw per pair, ties or not, as the reference loader
        # indices, so that a broken pair does not shift the draws of the pairs after it
        picks = [draw.sample(range(PASCAL_JUDGEMENTS), PASCAL_REFS_PER_DRAW) for _ in range(PASCAL_DRAWS)]
        votes = _pascal_votes(triplets, index, a, b)
        draws = [] if isinstance(votes, str) else [[votes[0][i] for i in pick] for pick in picks]
        image = _find_image(name.strip(), folders)
        reason = (votes if isinstance(votes, str) else f"image {name!r} not found in {folders[0]}" if image is None
                  else "caption missing or empty" if not (a and b)
                  else f"category {category} is not 1-4" if category not in PASCAL_CATEGORIES else "")
        if reason:
            problems.append(f"pair_pascal.mat: pair {index}: {reason}")
            continue
        preferred = 0 if votes[1] > votes[2] + coin - 0.5 else 1
        out.append(Pair(image, (a, b), preferred, draws, PASCAL_CATEGORIES[category], name.strip()))
    return out


def _load_pascal(data: Path, seed: int) -> Loaded:
    root = data.parent if data.is_file() else data
    pairs_path = _find_file(root, ("pair_pascal.mat",), "pascal-50s", ("pyCIDErConsensus",))
    consensus_path = _find_file(root, ("consensus_pascal.mat",), "pascal-50s", ("pyCIDErConsensus",))
    problems: list[str] = []
    rows = _pascal_pairs(root, _read_mat(pairs_path), _read_mat(consensus_path), seed, problems)
    protocol = (f"pascal-50s: the pairs of pair_pascal.mat, preferred = majority of the 48 consensus votes "
                f"(ties broken with Python random seeded {PASCAL_TIE_SEED}, one draw per pair, as the loader of "
                f"clipscore issue #4); references: {PASCAL_DRAWS} draws of {PASCAL_REFS_PER_DRAW} of the 48 "
                f"(random.Random({seed}).sample, pair by pair), accuracy averaged over draws (PAC-S sec. 4.3)")
    return Loaded("pascal-50s", "pairwise", protocol, rows, problems, root, None, "accuracy")


# ---------------------------------------------------------------- FOIL

def _coco_references(data: Path) -> dict[int, list[str]] | None:
    for path in (data / "captions_val2014.json", data / "annotations" / "captions_val2014.json"):
        if path.is_file():
            references = defaultdict(list)
            for ann in _read_json(path).get("annotations", []):
                references[ann["image_id"]].append(ann["caption"])
            return references
    return None


def _foil_groups(path: Path) -> tuple[dict, dict]:
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise ValueError(f"{path.name}: no annotations list: not the FOIL-COCO layout")
    images = {image["id"]: image for image in data.get("images", [])}
    groups: dict = defaultdict(lambda: {"orig": [], "foil": []})
    for ann in data["annotations"]:
        groups[ann.get("id")]["foil" if ann.get("foil") else "orig"].append(ann)
    return images, groups


def _load_foil(data: Path, seed: int) -> Loaded:
    path = _find_file(data, ("foilv1.0_test_2017.json",), "foil")
    root = path.parent
    images, groups = _foil_groups(path)
    coco = _coco_references(root)
    folders = [root / "images", root / "val2014", root]
    rows, problems = [], []
    for caption_id, group in groups.items():
        if len(group["orig"]) != 1:
            problems.append(f"{path.name}: caption id {caption_id}: {len(group['orig'])} clean captions (expected 1)")
            continue
        orig = group["orig"][0]
        clean, image_id = _normalise(orig.get("caption")), orig.get("image_id")
        file_name = images.get(image_id, {}).get("file_name")
        image = _find_image(file_name, folders)
        references = [[_normalise(r) for r in coco.get(image_id, []) if r != orig.get("caption")]] if coco else [[]]
        for foil in group["foil"]:
            foiled = _normalise(foil.get("caption"))
            reason = ("caption missing or empty" if not (clean and foiled)
                      else f"image {file_name!r} not found in {folders[0]}" if image is None else "")
            if reason:
                problems.append(f"{path.name}: foil id {foil.get('foil_id')}: {reason}")
                continue
            rows.append(Pair(image, (clean, foiled), 0, [list(r) for r in references], "foil", str(image_id),
                             foil.get("foil_word"), foil.get("target_word")))
    refs = "COCO captions of the image less the clean one" if coco else "none (no captions_val2014.json)"
    protocol = (f"foil: every (clean, foil) pair of {path.name} (clean caption preferred; references: {refs}), "
                "as Polos compute_foil.py; CLIP-S's one-pair-per-image sample was never released")
    return Loaded("foil", "pairwise", protocol, rows, problems, root, None, "accuracy")


# ---------------------------------------------------------------- nocaps-FOIL

def _nocaps_pair(entry, folders: list[Path]) -> Pair | str:
    """One entry of ALOHa's nocaps-FOIL file as a (baseline, foil) pair, or why it cannot be one."""
    if not isinstance(entry, dict):
        return "not an object"
    baseline, foil = _normalise(entry.get("baseline")), _normalise(entry.get("foil"))
    replacement = entry.get("replacement")
    image = _find_image(entry.get("image_path"), folders)
    if not (baseline and foil):
        return "baseline or foil caption missing or empty"
    if not (isinstance(replacement, list) and len(replacement) == 2 and all(isinstance(w, str) for w in replacement)):
        return "replacement is not [original word, foil word]"
    if replacement[0] == replacement[1]:
        return "replacement names the same word twice: no foil"
    if image is None:
        return f"image {entry.get('image_path')!r} not found in {folders[0]}"
    references = [_normalise(r) for r in entry.get("references") or [] if isinstance(r, str)]
    return Pair(image, (baseline, foil), 0, [references], str(entry.get("domain") or ""), str(entry["image_path"]),
                replacement[1], replacement[0])


def _load_nocaps_foil(data: Path, seed: int) -> Loaded:
    path = _find_file(data, ("nocaps-val-foil.json",), "nocaps-foil")
    entries = _read_json(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path.name}: expected a list of entries with baseline, foil and replacement, "
                         "as ALOHa's nocaps-FOIL file")
    root = path.parent
    folders = [root / "images", root / "nocaps", root]
    rows, problems = [], []
    for index, entry in enumerate(entries):
        pair = _nocaps_pair(entry, folders)
        if isinstance(pair, str):
            problems.append(f"{path.name}: entry {index}: {pair}")
        else:
            rows.append(pair)
    protocol = (f"nocaps-foil: every entry of {path.name} (ALOHa) as a (baseline, foil) pair, the baseline "
                "preferred; foil word = replacement[1]; references: the entry's nocaps captions; category = "
                "domain (in-, near-, out-domain); the captions of CLIP4DM's NoCapsDataset")
    return Loaded("nocaps-foil", "pairwise", protocol, rows, problems, root, None, "accuracy")


# ---------------------------------------------------------------- THumB 1.0

THUMB_ASPECTS = ("P", "R", "Fl", "Con", "Inc")


def _thumb_references(root: Path) -> dict[str, list[str]] | None:
    path = root / "mscoco_references.json"
    if not path.is_file():
        return None
    return {str(row.get("seg_id")): [_normalise(r) for r in row.get("refs", [])] for row in read_gold(path)}


def _load_thumb(data: Path, seed: int) -> Loaded:
    path = _find_file(data, ("mscoco_THumB-1.0.jsonl",), "thumb", ("mscoco",))
    root = path.parent
    references = _thumb_references(root)
    folders = [root / "images", root]
    rows, problems = [], []
    for number, row in enumerate(read_gold(path), 1):
        if not isinstance(row, dict) or ("hyp" not in row and "human_score" not in row):
            raise ValueError(f"{path.name}:{number}: no hyp / human_score: not the THumB layout")
        caption, rating = _normalise(row.get("hyp")), _rating(row.get("human_score"))
        image = _find_image(row.get("image"), folders)
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


# ---------------------------------------------------------------- HAT (token level)

def _word_spans(caption: str) -> list[tuple[int, int]]:
    spans, cursor = [], 0
    for word in caption.split():
        start = caption.index(word, cursor)
        spans.append((start, start + len(word)))
        cursor = start + len(word)
    return spans


def _hat_tokens(caption: str, grounding: list, nlp) -> list[dict] | str:
    """capscope's spaCy tokens labelled from HAT's per-word flags: a token takes the
    flag of the whitespace word it lies in (True = hallucinated = "incorrect");
    tokens without a letter or digit (punctuation) stay unjudged (null)."""
    words = [entry[0] if isinstance(entry, (list, tuple)) and entry else None for entry in grounding]
    if words != caption.split():
        return "grounding words differ from the caption's words"
    flags = [bool(entry[1]) if len(entry) > 1 else False for entry in grounding]
    spans = _word_spans(caption)
    tokens = []
    for token in tokenize(caption, nlp):
        word = next(i for i, (start, end) in enumerate(spans) if start <= token.start < end)
        judged = any(ch.isalnum() for ch in token.text)
        label = ("incorrect" if flags[word] else "correct") if judged else None
        tokens.append(dict(token.to_dict(), label=label))
    return tokens


def _load_hat(data: Path, seed: int) -> Loaded:
    path = _find_file(data, ("hat-trainval.json", "hat-test.json"), "hat")
    samples = _read_json(path)
    if isinstance(samples, dict):
        samples = samples.get("samples")
    if not isinstance(samples, list):
        raise ValueError(f"{path.name}: expected a list of samples with caption and grounding, as ALOHa's HAT file")
    root, nlp = path.parent, load_spacy()
    folders = [root / "images", root / "val2014", root]
    rows, problems = [], []
    for index, sample in enumerate(samples):
        key = sample.get("sample_id", index) if isinstance(sample, dict) else index
        if not isinstance(sample, dict) or not isinstance(sample.get("grounding"), list):
            problems.append(f"{path.name}: sample {key}: no grounding list")
            continue
        caption = _normalise(sample.get("caption"))
        image = _find_image(sample.get("image_path"), folders)
        tokens = _hat_tokens(caption, sample["grounding"], nlp) if caption else "caption missing or empty"
        reason = (tokens if isinstance(tokens, str)
                  else f"image {sample.get('image_path')!r} not found in {folders[0]}" if image is None else "")
        if reason:
            problems.append(f"{path.name}: sample {key}: {reason}")
            continue
        rows.append({"id": str(key), "image": str(image), "caption": caption,
                     "references": [_normalise(r) for r in sample.get("references") or []],
                     "tokens": tokens, "regions": [],
                     "contains_hallucination": bool(sample.get("contains_hallucination")),
                     "hallucinated_words": [entry[0] for entry in sample["grounding"] if len(entry) > 1 and entry[1]]})
    protocol = (f"hat: the {len(samples)} captions of {path.name} (ALOHa), each spaCy token labelled from the "
                "per-word hallucination flag of the whitespace word it lies in (punctuation unjudged), the flagged "
                "words kept as hallucinated_words; no regions")
    return Loaded("hat", "token", protocol, rows, problems, root, None, "token")


# ---------------------------------------------------------------- CapTokenEval files

def _load_captokeneval(data: Path, seed: int) -> Loaded:
    path = _find_file(data, ("captokeneval.jsonl",), "captokeneval")
    root = path.parent
    rows, problems = [], []
    for number, item in enumerate(read_gold(path), 1):
        if not isinstance(item, dict) or not isinstance(item.get("tokens"), list):
            raise ValueError(f"{path.name}: item {number} has no tokens list: not a CapTokenEval file")
        name = item.get("image")
        image = None if not isinstance(name, str) else Path(name) if Path(name).is_absolute() else root / name
        reason = ("caption missing or empty" if not _normalise(item.get("caption"))
                  else f"image {name!r} not found" if image is None or not image.is_file() else "")
        if reason:
            problems.append(f"{path.name}: item {item.get('id', number)}: {reason}")
            continue
        item.setdefault("regions", [])
        rows.append(item)
    protocol = f"captokeneval: the items of {path.name} with their own tokens, regions and labels"
    return Loaded("captokeneval", "token", protocol, rows, problems, root, None, "token")


_LOADERS = {
    "flickr8k-expert": _load_flickr("flickr8k-expert", "flickr8k.json", "c"),
    "flickr8k-cf": _load_flickr("flickr8k-cf", "crowdflower_flickr8k.json", "b"),
    "composite": _load_composite,
    "pascal-50s": _load_pascal,
    "foil": _load_foil,
    "nocaps-foil": _load_nocaps_foil,
    "thumb": _load_thumb,
    "hat": _load_hat,
    "captokeneval": _load_captokeneval,
}
