"""Loaders of the pairwise benchmarks (PASCAL-50S, FOIL, nocaps-FOIL): one
`Pair` per caption pair, built as the papers' reference code builds them
(docs/human-judgements.md)."""
from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import numpy as np

from capscope.bench.human_rows import Loaded, Pair, find_file, find_image, normalise, read_json

PASCAL_CATEGORIES = {1: "HC", 2: "HI", 3: "HM", 4: "MM"}
PASCAL_JUDGEMENTS = 48      # triplets (one reference and one vote each) per caption pair
PASCAL_DRAWS = 5            # PAC-S sec. 4.3: five draws of five references, accuracy averaged
PASCAL_REFS_PER_DRAW = 5
PASCAL_TIE_SEED = 42        # ties broken as the public loader of clipscore issue #4 does


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
        references.append(normalise(_mat_text(reference)))
        chosen = first if float(_mat_unwrap(choice)) == 1 else second
        votes[normalise(_mat_text(chosen))] += 1
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
        a, b = normalise(a), normalise(b)
        coin = tie_break.random()                   # one draw per pair, ties or not, as the reference loader
        # indices, so that a broken pair does not shift the draws of the pairs after it
        picks = [draw.sample(range(PASCAL_JUDGEMENTS), PASCAL_REFS_PER_DRAW) for _ in range(PASCAL_DRAWS)]
        votes = _pascal_votes(triplets, index, a, b)
        draws = [] if isinstance(votes, str) else [[votes[0][i] for i in pick] for pick in picks]
        image = find_image(name.strip(), folders)
        reason = (votes if isinstance(votes, str) else f"image {name!r} not found in {folders[0]}" if image is None
                  else "caption missing or empty" if not (a and b)
                  else f"category {category} is not 1-4" if category not in PASCAL_CATEGORIES else "")
        if reason:
            problems.append(f"pair_pascal.mat: pair {index}: {reason}")
            continue
        preferred = 0 if votes[1] > votes[2] + coin - 0.5 else 1
        out.append(Pair(image, (a, b), preferred, draws, PASCAL_CATEGORIES[category], name.strip()))
    return out


def load_pascal(data: Path, seed: int) -> Loaded:
    root = data.parent if data.is_file() else data
    pairs_path = find_file(root, ("pair_pascal.mat",), "pascal-50s", ("pyCIDErConsensus",))
    consensus_path = find_file(root, ("consensus_pascal.mat",), "pascal-50s", ("pyCIDErConsensus",))
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
            for ann in read_json(path).get("annotations", []):
                references[ann["image_id"]].append(ann["caption"])
            return references
    return None


def _foil_groups(path: Path) -> tuple[dict, dict]:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise ValueError(f"{path.name}: no annotations list: not the FOIL-COCO layout")
    images = {image["id"]: image for image in data.get("images", [])}
    groups: dict = defaultdict(lambda: {"orig": [], "foil": []})
    for ann in data["annotations"]:
        groups[ann.get("id")]["foil" if ann.get("foil") else "orig"].append(ann)
    return images, groups


def load_foil(data: Path, seed: int) -> Loaded:
    path = find_file(data, ("foilv1.0_test_2017.json",), "foil")
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
        clean, image_id = normalise(orig.get("caption")), orig.get("image_id")
        file_name = images.get(image_id, {}).get("file_name")
        image = find_image(file_name, folders)
        references = [[normalise(r) for r in coco.get(image_id, []) if r != orig.get("caption")]] if coco else [[]]
        for foil in group["foil"]:
            foiled = normalise(foil.get("caption"))
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
    baseline, foil = normalise(entry.get("baseline")), normalise(entry.get("foil"))
    replacement = entry.get("replacement")
    image = find_image(entry.get("image_path"), folders)
    if not (baseline and foil):
        return "baseline or foil caption missing or empty"
    if not (isinstance(replacement, list) and len(replacement) == 2 and all(isinstance(w, str) for w in replacement)):
        return "replacement is not [original word, foil word]"
    if replacement[0] == replacement[1]:
        return "replacement names the same word twice: no foil"
    if image is None:
        return f"image {entry.get('image_path')!r} not found in {folders[0]}"
    references = [normalise(r) for r in entry.get("references") or [] if isinstance(r, str)]
    return Pair(image, (baseline, foil), 0, [references], str(entry.get("domain") or ""), str(entry["image_path"]),
                replacement[1], replacement[0])


def load_nocaps_foil(data: Path, seed: int) -> Loaded:
    path = find_file(data, ("nocaps-val-foil.json",), "nocaps-foil")
    entries = read_json(path)
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
