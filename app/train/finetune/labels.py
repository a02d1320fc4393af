"""The labelled items of a fine-tuning: which items are labelled, the split
by image into training and held-out items, the swapped copies that add wrong
words (swapped_items), and the parent's own world replayed beside them
(replay_items)."""
from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capscope.common.jsonl import read_json_lines
from capscope.demo.dataset import write_demo_data
from capscope.metrics.loading import demo_model_path
from capscope.metrics.text import load_spacy, tokenize
from capscope.train.finetune.settings import FinetuneError


@dataclass
class Split:
    train: list[dict]
    held: list[dict]
    held_images: list[str] = field(default_factory=list)


def labelled(item: dict) -> bool:
    tokens = any(t.get("semantic") and t.get("label") in ("correct", "incorrect") for t in item.get("tokens") or [])
    regions = any(r.get("label") in ("mentioned", "unmentioned") for r in item.get("regions") or [])
    return tokens or regions


def split_by_image(items: list[dict], holdout: float, seed: int) -> Split:
    """Labelled items, split so that one image's captions fall on one side."""
    if not 0 <= holdout < 1:
        raise FinetuneError(f"--holdout must be in [0, 1), not {holdout}")
    usable = [item for item in items if labelled(item)]
    images = sorted({str(item["image"]) for item in usable})
    if len(images) < (2 if holdout > 0 else 1):
        raise FinetuneError(f"{len(usable)} labelled items on {len(images)} images: too few to fine-tune "
                            "and hold some out (label more, or --holdout 0)")
    order = np.random.default_rng(seed).permutation(len(images))
    n_held = min(max(int(round(holdout * len(images))), 1 if holdout > 0 else 0), len(images) - 1)
    held = {images[i] for i in order[:n_held]}
    return Split([i for i in usable if str(i["image"]) not in held],
                 [i for i in usable if str(i["image"]) in held], sorted(held))


def label_counts(items: list[dict]) -> dict:
    tokens = [t["label"] for i in items for t in i["tokens"] if t.get("semantic") and t.get("label")]
    regions = [r["label"] for i in items for r in i["regions"] if r.get("label")]
    return {"items": len(items), "tokens": len(tokens), "incorrect_tokens": tokens.count("incorrect"),
            "regions": len(regions), "mentioned_regions": regions.count("mentioned")}


def items_sha256(items: list[dict]) -> str:
    """A digest of the labels themselves (ids, captions, labels), stable across key order."""
    digest = hashlib.sha256()
    for item in sorted(items, key=lambda i: str(i["id"])):
        digest.update(json.dumps([str(item["id"]), item["caption"],
                                  [t.get("label") for t in item["tokens"]],
                                  [r.get("label") for r in item["regions"]]]).encode())
    return digest.hexdigest()


def swapped_items(items: list[dict], rng: np.random.Generator, per_item: int, nlp=None) -> list[dict]:
    """More wrong words than a team labels: copies of the fully-correct items
    with one correct word swapped for another labelled word of the same kind
    (InfoMetIC's own pollution, eq. 9, from the team's vocabulary). The swapped
    word is labelled incorrect, the others keep their labels, regions become
    unknown (the swap may change which one is meant).

    "Of the same kind" is read from the team's own captions: a word that stood
    between the same two neighbours elsewhere ("large ___ star": a colour), as
    in distributional word classes. A word whose slot holds no other word falls
    back to a labelled word of its part of speech (any word without a tagger)."""
    nlp = nlp or load_spacy()
    kinds = WordKinds()
    tags = [kinds.add(item, nlp) for item in items]
    out = []
    for item, item_tags in zip(items, tags):
        labels = [t.get("label") for t in item["tokens"] if t.get("semantic")]
        if "incorrect" in labels or "correct" not in labels:
            continue
        for _ in range(per_item):
            swapped = _swap_one(item, item_tags, kinds, rng, nlp)
            if swapped is not None:
                out.append(swapped)
    return out


class WordKinds:
    """The correct words of labelled captions, grouped by slot (the words on
    either side) and by part of speech."""

    def __init__(self):
        self.by_slot: dict[tuple[str, str], set[str]] = {}
        self.by_tag: dict[str, set[str]] = {}

    def add(self, item: dict, nlp) -> dict[int, str]:
        """Record the item's correct words; returns its parts of speech by character offset."""
        tags = {t.idx: t.pos_ or "X" for t in nlp(item["caption"])}
        for i, token in enumerate(item["tokens"]):
            if token.get("semantic") and token.get("label") == "correct":
                word = token["text"].lower()
                self.by_slot.setdefault(slot(item["tokens"], i), set()).add(word)
                self.by_tag.setdefault(tags.get(token["start"], "X"), set()).add(word)
        return tags

    def alternatives(self, item: dict, index: int, tags: dict[int, str]) -> list[str]:
        token = item["tokens"][index]
        word = token["text"].lower()
        same_slot = self.by_slot.get(slot(item["tokens"], index), set()) - {word}
        if same_slot:
            return sorted(same_slot)
        return sorted(self.by_tag.get(tags.get(token["start"], "X"), set()) - {word})


def slot(tokens: list[dict], index: int) -> tuple[str, str]:
    before = tokens[index - 1]["text"].lower() if index > 0 else "<s>"
    after = tokens[index + 1]["text"].lower() if index + 1 < len(tokens) else "</s>"
    return before, after


def _swap_one(item: dict, tags: dict[int, str], kinds: WordKinds, rng, nlp) -> dict | None:
    choices = [i for i, t in enumerate(item["tokens"]) if t.get("semantic") and t.get("label") == "correct"]
    index = choices[int(rng.integers(len(choices)))]
    token = item["tokens"][index]
    options = kinds.alternatives(item, index, tags)
    if not options:
        return None
    word = options[int(rng.integers(len(options)))]
    caption = item["caption"][: token["start"]] + word + item["caption"][token["end"]:]
    tokens = [t.to_dict() for t in tokenize(caption, nlp)]
    if len(tokens) != len(item["tokens"]):
        return None
    for i, (new, old) in enumerate(zip(tokens, item["tokens"])):
        new["label"] = "incorrect" if i == index else (old.get("label") if new["semantic"] else None)
    return {**item, "id": f"{item['id']}~swap{index}-{word}", "caption": caption, "tokens": tokens,
            "regions": [{**r, "label": None} for r in item["regions"]]}


def resolved_replay(replay: str | None, init: Path) -> str | None:
    """ "auto": the demo world when the parent is the bundled demo model, else nothing."""
    if replay != "auto":
        return None if replay in (None, "", "none") else replay
    return "demo" if Path(init).resolve() == demo_model_path().resolve() else None


def replay_items(source: str | Path | None, n: int, seed: int, scratch: Path | None = None) -> list[dict]:
    """Labelled items of the parent's own world, trained on beside the team's so
    that the child does not forget it: the first `n` items of a CapTokenEval
    file, or `n` fresh demo-world items for "demo", drawn into `scratch` (image
    paths made absolute)."""
    if not source:
        return []
    if str(source) == "demo":
        folder = Path(scratch) if scratch is not None else Path(tempfile.mkdtemp(prefix="capscope-replay-"))
        write_demo_data(folder, (n + 1) // 2, seed=seed + 7919, progress=False)
        path = folder / "captokeneval.jsonl"
    else:
        path = Path(source)
        if not path.is_file():
            raise FinetuneError(f"--replay: no file at {path}")
    items = [item for item in read_json_lines(path) if labelled(item)][:n]
    for item in items:
        image = Path(str(item["image"]))
        item["image"] = str(image if image.is_absolute() else path.parent / image)
    return items
