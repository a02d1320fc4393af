"""Loaders of the token benchmarks (HAT, CapTokenEval files): CapTokenEval
items (dicts), HAT's per-word hallucination flags turned into capscope's token
labels (docs/human-judgements.md)."""
from __future__ import annotations

from pathlib import Path

from capscope.bench.evaluate import read_gold
from capscope.bench.human_rows import Loaded, find_file, find_image, normalise, read_json
from capscope.metrics.text import load_spacy, tokenize


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


def load_hat(data: Path, seed: int) -> Loaded:
    path = find_file(data, ("hat-trainval.json", "hat-test.json"), "hat")
    samples = read_json(path)
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
        caption = normalise(sample.get("caption"))
        image = find_image(sample.get("image_path"), folders)
        tokens = _hat_tokens(caption, sample["grounding"], nlp) if caption else "caption missing or empty"
        reason = (tokens if isinstance(tokens, str)
                  else f"image {sample.get('image_path')!r} not found in {folders[0]}" if image is None else "")
        if reason:
            problems.append(f"{path.name}: sample {key}: {reason}")
            continue
        rows.append({"id": str(key), "image": str(image), "caption": caption,
                     "references": [normalise(r) for r in sample.get("references") or []],
                     "tokens": tokens, "regions": [],
                     "contains_hallucination": bool(sample.get("contains_hallucination")),
                     "hallucinated_words": [entry[0] for entry in sample["grounding"] if len(entry) > 1 and entry[1]]})
    protocol = (f"hat: the {len(samples)} captions of {path.name} (ALOHa), each spaCy token labelled from the "
                "per-word hallucination flag of the whitespace word it lies in (punctuation unjudged), the flagged "
                "words kept as hallucinated_words; no regions")
    return Loaded("hat", "token", protocol, rows, problems, root, None, "token")


# ---------------------------------------------------------------- CapTokenEval files

def load_captokeneval(data: Path, seed: int) -> Loaded:
    path = find_file(data, ("captokeneval.jsonl",), "captokeneval")
    root = path.parent
    rows, problems = [], []
    for number, item in enumerate(read_gold(path), 1):
        if not isinstance(item, dict) or not isinstance(item.get("tokens"), list):
            raise ValueError(f"{path.name}: item {number} has no tokens list: not a CapTokenEval file")
        name = item.get("image")
        image = None if not isinstance(name, str) else Path(name) if Path(name).is_absolute() else root / name
        reason = ("caption missing or empty" if not normalise(item.get("caption"))
                  else f"image {name!r} not found" if image is None or not image.is_file() else "")
        if reason:
            problems.append(f"{path.name}: item {item.get('id', number)}: {reason}")
            continue
        item.setdefault("regions", [])
        rows.append(item)
    protocol = f"captokeneval: the items of {path.name} with their own tokens, regions and labels"
    return Loaded("captokeneval", "token", protocol, rows, problems, root, None, "token")
