"""Fine-tuning an InfoMetIC-family checkpoint on a team's own token and region
labels (`capscope train infometic --labels FILE | --dataset NAME --init ...`).

The labels are CapTokenEval items (docs/formats.md §3): a token labelled
"correct"/"incorrect" supervises the text side, a region labelled
"mentioned"/"unmentioned" the vision side; a null label is unknown and
supervises nothing. CLIP's text tower stays frozen, so every caption is
encoded once; with `train="visual"` the top `visual_blocks` blocks of the image
tower train (VisualTop: the frozen stem runs once per crop), else the head alone.

Losses on the labelled items:
- each labelled word's share of the text attention against the token rule's
  threshold (share_loss: what decides the verdict), every word weighing the same;
- the token verifier's per-piece logits, class-balanced BCE (capscope
  checkpoints), or eq. 9 of the paper for a checkpoint without a verifier;
- eq. 10 on the region attention (the mass on mentioned regions) and a
  BCE pushing labelled-unmentioned regions below the null slot;
- not forgetting: an L2 pull of every trained weight towards the parent's
  (L2-SP, Li et al. 2018), `anchor` times the squared distance; the parent's
  own world replayed (replay_items), where the child is also pulled towards
  the parent's own attention (parent_loss, `keep_parent`).
docs/fine-tuning.md says what was measured with other choices.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from capscope.common.errors import CapscopeError
from capscope.train.finetune_defaults import HOLDOUT, MINUTES

log = logging.getLogger(__name__)

UNKNOWN = 3        # a piece of a semantic word nobody labelled: counts as a word, supervises nothing
FIGURE_KEYS = ("text_accuracy", "incorrect_token_f1", "incorrect_token_auroc", "vision_accuracy", "region_auroc")


class FinetuneError(CapscopeError, ValueError):
    """Labels or a checkpoint that cannot be fine-tuned on; says why."""


class Cancelled(Exception):
    """Raised inside the loop when `should_stop` says so; nothing is written."""


@dataclass
class FinetuneConfig:
    out: Path
    init: Path                              # the parent checkpoint file
    items: list[dict]                       # CapTokenEval items
    base_dir: Path                          # where the items' relative image paths start
    labels: dict                            # what the labels are, recorded in the checkpoint
    holdout: float = HOLDOUT                # share of images held out for the figures
    minutes: float | None = MINUTES
    steps: int | None = None
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    batch_size: int = 32
    lr: float = 5e-4
    anchor: float = 0.05                    # L2-SP weight
    swaps: int = 2                          # swapped copies per fully-correct item (swapped_items)
    train: str = "visual"                   # "head": the head alone; "visual": also the top of CLIP's image tower
    visual_blocks: int = 4                  # blocks of the image tower that train with "visual" (all of the demo CLIP's)
    token_rule: str = "relative"
    check: CheckSet | None = None           # other gold items scored before and after (the parent's world)
    replay: str | None = "auto"             # the parent's own world mixed in: a file, "demo", None, or "auto"
                                            # ("demo" when the parent is the bundled demo model, else None)
    replay_items: int = 400
    keep_parent: float = 1.0                # weight of parent_loss on the replayed items (0: labels alone)
    balanced_shares: bool = False           # share_loss with wrong and correct words as equal halves
    augment: bool = False                   # with "visual": new brightness, contrast and mirroring each step
    progress: bool = True
    on_progress: Callable[[dict], None] | None = None
    should_stop: Callable[[], bool] | None = None


@dataclass
class CheckSet:
    """Gold items scored before and after fine-tuning, to see what the child forgets:
    a CapTokenEval file's (`from_file`) or a store dataset's."""
    source: dict            # {"file": name} or {"dataset": name}, as the report names it
    items: list[dict]
    base_dir: Path          # where the items' relative image paths start

    @classmethod
    def from_file(cls, path: Path) -> "CheckSet":
        from capscope.common.jsonl import read_json_lines

        path = Path(path)
        return cls({"file": path.name}, read_json_lines(path), path.parent)


@dataclass
class Split:
    train: list[dict]
    held: list[dict]
    held_images: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- labels

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
    from capscope.metrics.text import load_spacy, tokenize

    nlp = nlp or load_spacy()
    kinds = WordKinds()
    tags = [kinds.add(item, nlp) for item in items]
    out = []
    for item, item_tags in zip(items, tags):
        labels = [t.get("label") for t in item["tokens"] if t.get("semantic")]
        if "incorrect" in labels or "correct" not in labels:
            continue
        for _ in range(per_item):
            swapped = _swap_one(item, item_tags, kinds, rng, nlp, tokenize)
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


def _swap_one(item: dict, tags: dict[int, str], kinds: WordKinds, rng, nlp, tokenize) -> dict | None:
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
    from capscope.metrics.loading import demo_model_path

    if replay != "auto":
        return None if replay in (None, "", "none") else replay
    return "demo" if Path(init).resolve() == demo_model_path().resolve() else None


def replay_items(source: str | Path | None, n: int, seed: int, scratch: Path | None = None) -> list[dict]:
    """Labelled items of the parent's own world, trained on beside the team's so
    that the child does not forget it: the first `n` items of a CapTokenEval
    file, or `n` fresh demo-world items for "demo", drawn into `scratch` (image
    paths made absolute)."""
    from capscope.common.jsonl import read_json_lines

    if not source:
        return []
    if str(source) == "demo":
        from capscope.demo.dataset import write_demo_data

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


# ---------------------------------------------------------------- tensors

@dataclass
class LabelledSet:
    """Every training item as head inputs with its labels (the image features
    are computed afresh each step when the image tower trains)."""

    inputs: list[list[torch.Tensor]]        # per item: v_g, regions, boxes, size, t_g, tokens, mask
    piece_labels: list[torch.Tensor]        # per item: L (1 correct, 0 wrong, 2 other, -1 unknown/none)
    region_labels: list[torch.Tensor]       # per item: n (1 mentioned, 0 unmentioned, -1 unknown)
    image_of: list[int] = field(default_factory=list)           # per item: its (image, regions) index
    stems: list[torch.Tensor] = field(default_factory=list)     # per (image, regions): (1 + n) x T x W, fp16
    pixels: list[torch.Tensor] = field(default_factory=list)    # instead of stems with augment: (1 + n) x 3 x S x S
    teacher: list[tuple[torch.Tensor, torch.Tensor] | None] = field(default_factory=list)
    # per item: the parent's text and region log-attention, kept for the replayed items (keep_parent)

    def buckets(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i, labels in enumerate(self.region_labels):
            out.setdefault(len(labels), []).append(i)
        return out

    def batch(self, index: list[int], device, visual=None, augment: Augment | None = None,
              rng: np.random.Generator | None = None) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Head inputs of the items; with `visual` (the trained top of CLIP's
        image tower, a VisualTop) the image features are computed afresh from
        the kept stem activations, or with `augment` from the kept pixels
        changed anew (a mirrored image's boxes mirrored too)."""
        inputs = [torch.stack([self.inputs[i][k] for i in index]).to(device) for k in range(7)]
        if visual is not None and augment is not None:
            inputs[0], inputs[1], mirrored = self._augmented_features(index, device, visual, augment, rng)
            inputs[2] = torch.where(mirrored[:, None, None], mirror_boxes(inputs[2], inputs[3]), inputs[2])
        elif visual is not None:
            inputs[0], inputs[1] = self._image_features(index, device, visual)
        return (inputs, torch.stack([self.piece_labels[i] for i in index]).to(device),
                torch.stack([self.region_labels[i] for i in index]).to(device))

    def parent_targets(self, index: list[int], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(the batch rows of the items with the parent's outputs kept, their text
        and region log-attention), or None when no item of the batch has them."""
        rows = [k for k, i in enumerate(index) if self.teacher and self.teacher[i] is not None]
        if not rows:
            return None
        return (torch.tensor(rows, device=device),
                torch.stack([self.teacher[index[k]][0] for k in rows]).to(device),
                torch.stack([self.teacher[index[k]][1] for k in rows]).to(device))

    def _image_features(self, index: list[int], device, visual) -> tuple[torch.Tensor, torch.Tensor]:
        keys = sorted({self.image_of[i] for i in index})
        feats = visual.top(torch.cat([self.stems[k] for k in keys]).to(device).float()).float()
        return self._rows(index, keys, feats, [len(self.stems[k]) for k in keys])

    def _augmented_features(self, index, device, visual, augment,
                            rng) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        keys = sorted({self.image_of[i] for i in index})
        changed = [augment(self.pixels[k].to(device).float(), rng) for k in keys]
        feats = visual.top(visual.stem(torch.cat([pixels for pixels, _ in changed]))).float()
        v_g, regions = self._rows(index, keys, feats, [len(self.pixels[k]) for k in keys])
        flipped = {k: m for k, (_, m) in zip(keys, changed)}
        return v_g, regions, torch.tensor([flipped[self.image_of[i]] for i in index], device=device)

    def _rows(self, index, keys, feats, sizes) -> tuple[torch.Tensor, torch.Tensor]:
        by_key = dict(zip(keys, feats.split(sizes)))
        rows = [by_key[self.image_of[i]] for i in index]
        return torch.stack([r[0] for r in rows]), torch.stack([r[1:] for r in rows])


class Augment:
    """A new appearance for an image and its region crops, the same for all of
    them: brightness and contrast scaled by up to `strength` either way, and a
    mirror image half of the time when `mirror`. Hue stays: colours are what
    captions name. Works on preprocessed pixels (normalized with `mean`, `std`)."""

    def __init__(self, mean, std, strength: float = 0.4, mirror: bool = True):
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
        self.strength, self.mirror = strength, mirror

    def __call__(self, pixels: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, bool]:
        mean, std = self.mean.to(pixels.device), self.std.to(pixels.device)
        raw = pixels * std + mean
        brightness, contrast = rng.uniform(1 - self.strength, 1 + self.strength, size=2)
        gray = raw.mean(dim=(1, 2, 3), keepdim=True)
        raw = ((raw - gray) * float(contrast) + gray) * float(brightness)
        mirrored = bool(self.mirror and rng.random() < 0.5)
        if mirrored:
            raw = raw.flip(-1)
        return (raw.clamp(0, 1) - mean) / std, mirrored


SIDE_WORDS = frozenset({"left", "right", "leftmost", "rightmost"})


def names_a_side(items: list[dict]) -> bool:
    """Whether a caption says left or right: a mirror image would make it wrong."""
    return any(word.strip(".,;:!?") in SIDE_WORDS for item in items for word in item["caption"].lower().split())


def mirror_boxes(boxes: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Boxes (B x n x 4, x1 y1 x2 y2 in pixels) of images (sizes B x 2, W H) mirrored left to right."""
    width = sizes[:, 0, None]
    return torch.stack([width - boxes[..., 2], boxes[..., 1], width - boxes[..., 0], boxes[..., 3]], dim=-1)


def preprocess_normalization(preprocess) -> tuple[list[float], list[float]]:
    """The (mean, std) of the Normalize step of a torchvision preprocess."""
    for step in getattr(preprocess, "transforms", []):
        if hasattr(step, "mean") and hasattr(step, "std"):
            return list(step.mean), list(step.std)
    raise FinetuneError("--augment needs the CLIP preprocess's Normalize step")


def encode_items(backbone, metric, items: list[dict], base_dir: Path, progress: bool,
                 visual: VisualTop | None = None, keep_pixels: bool = False) -> LabelledSet:
    """Image features once per distinct (image, regions), caption features once
    per item; with `visual`, also the frozen stem's activations of the image
    and its region crops, for training the top of the image tower (their
    preprocessed pixels instead with `keep_pixels`, to be changed each step)."""
    from capscope.metrics.images import read_image
    from capscope.metrics.pairs import PreparedPair
    from capscope.metrics.regions import given_regions
    from capscope.metrics.text import Token
    from capscope.train.infometic_data import IGNORE, OTHER, encode_bank

    keys, where = {}, []
    for item in items:
        key = (str(item["image"]), tuple(tuple(float(v) for v in r["box"]) for r in item["regions"]))
        where.append(keys.setdefault(key, len(keys)))

    def images():
        for (image, boxes) in keys:
            path = Path(image) if Path(image).is_absolute() else Path(base_dir) / image
            try:
                picture = read_image(path)
            except Exception as err:  # noqa: BLE001 - any unreadable image is the same error to the user
                raise FinetuneError(f"cannot read image {image}: {err}") from None
            yield picture, given_regions([{"box": list(b)} for b in boxes], *picture.size)

    if any(not item["regions"] for item in items):
        raise FinetuneError("every item needs its regions (InfoMetIC judges a caption against regions)")
    stems, pixels = [], []

    def images_keeping_stems():   # each image is read once, for its features and its stem
        for picture, regions in images():
            if visual is not None and keep_pixels:
                pixels.append(clip_inputs(backbone, picture, regions).half())
            elif visual is not None:
                stems.append(visual.stem(clip_inputs(backbone, picture, regions)).half())
            yield picture, regions

    bank = encode_bank(backbone, images_keeping_stems(), len(keys), progress)
    inputs, piece_labels, region_labels = [], [], []
    for start in range(0, len(items), 64):
        chunk = items[start : start + 64]
        pairs = [PreparedPair(i["caption"], [Token(t["text"], t["start"], t["end"], bool(t["semantic"]))
                                             for t in i["tokens"]]) for i in chunk]
        pieces, t_g, tokens, masks = metric.text_inputs(pairs)
        for b, item in enumerate(chunk):
            bank_index = where[start + b]
            v_g, regions, boxes, size = bank.batch([bank_index])
            inputs.append([v_g[0], regions[0], boxes[0], size[0], t_g[b].clone(), tokens[b].clone(), masks[b]])
            labels = torch.full((tokens.shape[1],), IGNORE, dtype=torch.long)
            for k, piece in enumerate(pieces[b]):
                labels[k + 1] = OTHER
                token = None if piece.token is None else item["tokens"][piece.token]
                if token is not None and token.get("semantic"):
                    labels[k + 1] = {"correct": 1, "incorrect": 0}.get(token.get("label"), UNKNOWN)
            piece_labels.append(labels)
            region_labels.append(torch.tensor([{"mentioned": 1, "unmentioned": 0}.get(r.get("label"), IGNORE)
                                               for r in item["regions"]], dtype=torch.long))
    return LabelledSet(inputs, piece_labels, region_labels, where, stems, pixels)


def clip_inputs(backbone, picture, regions) -> torch.Tensor:
    """What `ClipBackbone.image_features` feeds CLIP for one image: the image,
    then each region's crop, preprocessed: (1 + n) x 3 x S x S."""
    from capscope.metrics.encoder import crop_region

    crops = [picture] + [crop_region(picture, region, backbone.crop) for region in regions]
    return torch.stack([backbone.preprocess(c.convert("RGB")) for c in crops]).to(backbone.device)


class _StemDone(Exception):
    pass


class VisualTop:
    """An open_clip ViT image tower cut in two: a frozen stem (patch
    embedding and the first blocks), run once per crop with its output kept,
    and a trained top (the last `blocks` blocks, the pooling, its norm and the
    projection), run every step. `top(stem(x))` equals `visual(x)`.

    The stem's output is caught with a forward pre-hook on the first trained
    block while the whole tower runs, so the stem is open_clip's own code;
    the top re-implements only the pooling (class token or mean, norm before
    or after), and refuses towers it does not know (attention pooling)."""

    def __init__(self, visual, blocks: int):
        known = all(hasattr(visual, a) for a in ("transformer", "ln_post", "proj", "pool_type"))
        if not known or getattr(visual, "attn_pool", None) is not None or visual.pool_type not in ("tok", "avg"):
            raise FinetuneError("--train visual needs an open_clip ViT image tower with class-token or mean "
                                "pooling (use --train head)")
        if blocks < 1:
            raise FinetuneError(f"--visual-blocks must be at least 1, not {blocks}")
        self.visual = visual
        self.cut = max(len(visual.transformer.resblocks) - blocks, 0)
        self.batch_first = getattr(visual.transformer, "batch_first", True)

    @torch.no_grad()
    def stem(self, pixels):
        caught = []

        def catch(_module, args):
            caught.append(args[0])
            raise _StemDone   # the blocks above the cut need not run

        hook = self.visual.transformer.resblocks[self.cut].register_forward_pre_hook(catch)
        try:
            self.visual(pixels)
        except _StemDone:
            pass
        finally:
            hook.remove()
        return caught[0] if self.batch_first else caught[0].transpose(0, 1)

    def top(self, x):
        x = x if self.batch_first else x.transpose(0, 1)
        for block in self.visual.transformer.resblocks[self.cut :]:
            x = block(x)
        x = x if self.batch_first else x.transpose(0, 1)
        pool = (lambda t: t[:, 0]) if self.visual.pool_type == "tok" else (lambda t: t[:, 1:].mean(dim=1))
        if getattr(self.visual, "final_ln_after_pool", False):
            pooled = self.visual.ln_post(pool(x))
        else:
            pooled = pool(self.visual.ln_post(x))
        return pooled if self.visual.proj is None else pooled @ self.visual.proj

    def parameters(self) -> list:
        trained = [p for block in self.visual.transformer.resblocks[self.cut :] for p in block.parameters()]
        trained += list(self.visual.ln_post.parameters())
        return trained + ([self.visual.proj] if self.visual.proj is not None else [])


# ---------------------------------------------------------------- losses

def region_loss(out: dict, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 10 on mentioned regions, and each labelled-unmentioned region's
    attention logit pushed below the null slot's (a region nobody mentions
    should draw less mass than "nothing")."""
    import torch.nn.functional as F

    from capscope.train.infometic_trainer import vision_token_loss

    mentioned = vision_token_loss(out["region_log_attention"], labels)
    log_attention = out["region_log_attention"]
    n = labels.shape[1]
    null = log_attention[:, n:n + 1] if log_attention.shape[1] > n else None
    unmentioned = labels == 0
    if null is None or not unmentioned.any():
        return mentioned
    margin = (log_attention[:, :n] - null)[unmentioned]
    return mentioned + F.softplus(margin).mean()


def token_losses(out: dict, labels: torch.Tensor, token_rule: str, balanced_shares: bool = False) -> torch.Tensor:
    from capscope.train.infometic_trainer import text_token_loss, verify_loss

    loss = share_loss(out["text_log_attention"], labels, token_rule, balanced=balanced_shares)
    if out.get("checks") is not None and "logits" in out["checks"]:
        return loss + verify_loss(out["checks"]["logits"], labels)
    return loss + text_token_loss(out["text_log_attention"], labels)


def share_loss(log_attention: torch.Tensor, labels: torch.Tensor, token_rule: str, sharpness: float = 2.0,
               balanced: bool = False):
    """What decides a verdict, trained directly: each labelled piece's share of
    the text attention against the token rule's threshold for its caption
    (metrics.words.word_threshold), as a logistic loss on
    sharpness * log(share / threshold). Every labelled piece weighs the same,
    so the boundary stays where the labels' odds of a wrong word put it;
    `balanced` weighs wrong and correct pieces as two equal halves instead,
    which moves it by those odds (about 1:10) and flags more words."""
    import torch.nn.functional as F

    from capscope.metrics.constants import BETA
    from capscope.metrics.words import word_threshold

    semantic = ((labels == 0) | (labels == 1) | (labels == UNKNOWN)).sum(-1)
    thresholds = torch.tensor([word_threshold(token_rule, BETA, int(n)) for n in semantic],
                              device=log_attention.device, dtype=log_attention.dtype)
    margin = sharpness * (log_attention - thresholds.log()[:, None])
    labelled = (labels == 0) | (labels == 1)
    if not labelled.any():
        return log_attention.sum() * 0
    correct = labels[labelled] == 1
    losses = F.binary_cross_entropy_with_logits(margin[labelled], correct.to(margin.dtype), reduction="none")
    if not balanced:
        return losses.mean()
    return torch.stack([losses[side].mean() for side in (correct, ~correct) if side.any()]).mean()


def parent_loss(out: dict, targets: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """KL(parent || child) of the text and the region attention on the items
    whose parent outputs were kept (the replayed ones): in its own world the
    child keeps saying what the parent said, not only the labels' verdicts."""
    if targets is None:
        return out["text_log_attention"].sum() * 0
    rows, text, region = targets

    def kl(log_p, log_q):
        return (log_p.exp() * (log_p - log_q)).sum(-1)

    return (kl(text, out["text_log_attention"][rows]) + kl(region, out["region_log_attention"][rows])).mean()


def anchor_loss(params: list[torch.Tensor], parent: list[torch.Tensor]) -> torch.Tensor:
    return sum(((p - p0) ** 2).sum() for p, p0 in zip(params, parent))


# ---------------------------------------------------------------- the run

def load_parent(path: Path, device):
    """(InfoMetIC model in float32, clip name, clip config, crop dict, raw checkpoint)."""
    import open_clip

    from capscope.metrics.loading import read_checkpoint
    from capscope.metrics.scorer import load_infometic
    from capscope.train.infometic_trainer import PLAIN_CROP

    raw = read_checkpoint(path, "InfoMetIC", "--init")
    model, clip_name = load_infometic(raw, str(path))
    capscope_format = isinstance(raw, dict) and "head_config" in raw
    crop = dict(raw["crop"]) if capscope_format and isinstance(raw.get("crop"), dict) else dict(PLAIN_CROP)
    clip_config = raw.get("clip_config") if capscope_format else None
    clip_config = clip_config or open_clip.get_model_config(clip_name)
    for p in model.clip_backbone.parameters():
        p.requires_grad_(False)
    return model.float().to(device), clip_name, clip_config, crop, raw


def parent_half(raw) -> bool:
    """Whether the parent's head weights were saved in fp16 (the child is saved the same way)."""
    state = raw.get("state_dict", raw) if isinstance(raw, dict) else {}
    heads = [v for k, v in state.items() if not k.startswith("clip_backbone.") and torch.is_tensor(v)
             and v.is_floating_point()]
    return bool(heads) and all(v.dtype == torch.float16 for v in heads)


def finetune(config: FinetuneConfig, evaluate_gold: Callable | None = None,
             fit_word_scale: Callable | None = None) -> dict:
    """Fine-tune, save the child checkpoint atomically at `config.out` and the
    before/after figures beside it; returns the report. `evaluate_gold` gives
    the figures (default: capscope.bench.evaluate.evaluate_gold);
    `fit_word_scale`, normally `capscope.bench.evaluate.fit_word_scale`, fits the child's
    word threshold on its training items (None: no fit, the scale stays 1).
    Raises Cancelled (nothing written) when `should_stop` turns true."""
    from capscope.common.checksums import file_sha256
    from capscope.metrics.encoder import ClipBackbone, CropStyle
    from capscope.metrics.families import InfoFamilyMetric

    if evaluate_gold is None:
        from capscope.bench.evaluate import evaluate_gold
    from capscope.metrics.loading import resolve_device

    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    device = resolve_device(config.device)
    split = split_by_image(config.items, config.holdout, config.seed)
    if not split.train:
        raise FinetuneError("no labelled item left to train on after the hold-out")
    if config.train not in TRAIN_PARTS:
        raise FinetuneError(f"--train must be one of {', '.join(TRAIN_PARTS)}, not {config.train!r}")
    if config.augment and config.train != "visual":
        raise FinetuneError("--augment changes images, so it needs --train visual")
    model, clip_name, clip_config, crop, raw = load_parent(config.init, device)
    report = {"parent": {"file": Path(config.init).name, "sha256": file_sha256(config.init)},
              "labels": {**config.labels, "train": label_counts(split.train), "held_out": label_counts(split.held)},
              "holdout": {"share": config.holdout, "images": len(split.held_images), "seed": config.seed},
              "token_rule": config.token_rule}
    _progress(config, {"stage": "figures before", "fraction": 0.0})
    report["before"] = held_figures(config, config.init, split.held, evaluate_gold)
    backbone = ClipBackbone.from_model(model.clip_backbone, clip_name, clip_name, device, CropStyle(**crop))
    metric = InfoFamilyMetric("infometic", backbone)
    _progress(config, {"stage": "encoding", "fraction": 0.0})
    swaps = swapped_items(split.train, np.random.default_rng(config.seed), config.swaps) if config.swaps else []
    report["labels"]["swapped_copies"] = len(swaps)
    visual = VisualTop(model.clip_backbone.visual, config.visual_blocks) if config.train == "visual" else None
    augment = None
    if config.augment:
        augment = Augment(*preprocess_normalization(backbone.preprocess), mirror=not names_a_side(split.train))
    source = resolved_replay(config.replay, config.init)
    with tempfile.TemporaryDirectory(prefix="capscope-replay-") as scratch:
        replay = replay_items(source, config.replay_items, config.seed, Path(scratch))
        if replay:
            report["labels"]["replay"] = {"from": Path(str(source)).name, **label_counts(replay)}
        data = encode_items(backbone, metric, split.train + swaps + replay, config.base_dir, config.progress, visual,
                            keep_pixels=augment is not None)
    if replay and config.keep_parent:
        keep_parent_outputs(model, data, range(len(data.inputs) - len(replay), len(data.inputs)), device)
    training = train_head(model, data, config, device, visual, augment)
    _progress(config, {"stage": "figures after", "fraction": 1.0})
    with tempfile.TemporaryDirectory(prefix="capscope-child-") as scratch:
        # the child is scored through the Scorer, from a file: a scratch copy until its figures go inside
        unrated = Path(scratch) / Path(config.out).name
        _save_child(unrated, model, clip_name, clip_config, crop, raw, report, training)
        if fit_word_scale is not None:
            _progress(config, {"stage": "fitting the word threshold", "fraction": 1.0})
            report["word_threshold"] = fit_word_scale(_scorer(config, unrated), split.train, config.base_dir,
                                                      token_rule=config.token_rule)
            _save_child(unrated, model, clip_name, clip_config, crop, raw, report, training)
        report["after"] = held_figures(config, unrated, split.held, evaluate_gold)
        if config.check is not None:
            report["check_gold"] = {**config.check.source,
                                    "before": check_figures(config, config.init, evaluate_gold),
                                    "after": check_figures(config, unrated, evaluate_gold)}
    report["training"] = training
    _save_child(Path(config.out), model, clip_name, clip_config, crop, raw, report, training)
    figures_path(config.out).write_text(json.dumps(report, indent=1))
    return report


@torch.no_grad()
def keep_parent_outputs(model, data: LabelledSet, items, device, batch: int = 64) -> None:
    """The parent's text and region log-attention on `items`, the targets of parent_loss."""
    model.eval()
    data.teacher = [None] * len(data.inputs)
    wanted = set(items)
    for bucket in data.buckets().values():     # items of one bucket have as many regions: they stack
        chosen = [i for i in bucket if i in wanted]
        for start in range(0, len(chosen), batch):
            part = chosen[start : start + batch]
            out = model.outputs(*data.batch(part, device)[0])
            for k, i in enumerate(part):
                data.teacher[i] = (out["text_log_attention"][k].cpu(), out["region_log_attention"][k].cpu())


FROZEN = ("verifier.bias_scale",)   # the verifier's weight in the text attention: see the module docstring


TRAIN_PARTS = ("head", "visual")


def trainable_parameters(model, visual: VisualTop | None) -> list[torch.Tensor]:
    """The head's parameters (less FROZEN), and the image tower's top with `visual`."""
    head = {id(p) for p in model.head_parameters()}
    chosen = [p for name, p in model.named_parameters()
              if id(p) in head and p.requires_grad and name not in FROZEN]
    for p in visual.parameters() if visual is not None else []:
        p.requires_grad_(True)
        chosen.append(p)
    return chosen


def train_head(model, data: LabelledSet, config: FinetuneConfig, device, visual: VisualTop | None = None,
               augment: Augment | None = None) -> dict:
    from tqdm import tqdm

    from capscope.train.schedule import TrainState, budget_spent, warmup_cosine

    trainable = trainable_parameters(model, visual)
    parent = [p.detach().clone() for p in trainable]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=0.0)
    buckets = data.buckets()
    weights = np.array([len(v) for v in buckets.values()], dtype=float)
    state, losses = TrainState(), []
    steps = config.steps
    bar = tqdm(total=steps, desc="fine-tune infometic", unit="step", disable=not config.progress, mininterval=5.0)
    model.train()
    while not budget_spent(state, steps, config.minutes):
        if config.should_stop is not None and config.should_stop():
            raise Cancelled()
        started = time.monotonic()
        rng = np.random.default_rng(np.random.SeedSequence([config.seed, 23, state.step]))
        bucket = list(buckets.values())[int(rng.choice(len(buckets), p=weights / weights.sum()))]
        index = [bucket[int(i)] for i in rng.choice(len(bucket), size=min(config.batch_size, len(bucket)), replace=False)]
        inputs, piece_labels, region_labels = data.batch(index, device, visual, augment, rng)
        for group in optimizer.param_groups:
            group["lr"] = warmup_cosine(config.lr, state.step, state.elapsed, warmup_steps=10,
                                        minutes=config.minutes, steps=steps, floor=0.1)
        out = model.outputs(*inputs)
        loss = (token_losses(out, piece_labels, config.token_rule, config.balanced_shares)
                + region_loss(out, region_labels))
        loss = loss + config.anchor * anchor_loss(trainable, parent)
        if config.keep_parent:
            loss = loss + config.keep_parent * parent_loss(out, data.parent_targets(index, device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        state.elapsed += time.monotonic() - started
        state.step += 1
        bar.update(1)
        _progress(config, {"stage": "training", "step": state.step, "loss": losses[-1],
                           "fraction": _fraction(state, steps, config.minutes)})
    bar.close()
    model.eval()
    return {"steps": state.step, "minutes": round(state.elapsed / 60, 2), "seed": config.seed, "lr": config.lr,
            "anchor": config.anchor, "keep_parent": config.keep_parent,
            "balanced_shares": config.balanced_shares,
            "augment": None if augment is None else ("brightness, contrast, mirror" if augment.mirror
                                                     else "brightness, contrast"),
            "batch_size": config.batch_size, "trained": config.train,
            "visual_blocks": config.visual_blocks if visual is not None else 0,
            "first_loss": round(float(np.mean(losses[:10])), 4) if losses else None,
            "last_loss": round(float(np.mean(losses[-10:])), 4) if losses else None}


def _fraction(state, steps: int | None, minutes: float | None) -> float:
    parts = [state.step / steps] if steps else []
    if minutes:
        parts.append(state.elapsed / (60 * minutes))
    return min(max(parts, default=0.0), 1.0)


def _progress(config: FinetuneConfig, event: dict) -> None:
    if config.on_progress is not None:
        config.on_progress(event)


def _save_child(out: Path, model, clip_name, clip_config, crop, raw, report, training) -> None:
    from capscope.demo.clip_model import write_atomically
    from capscope.metrics.infometic import capscope_checkpoint

    half = parent_half(raw)
    child = capscope_checkpoint(model, clip_name, clip_config, crop=dict(crop), training=training,
                                parent=report["parent"], labels=report["labels"],
                                figures={k: report.get(k) for k in ("before", "after", "check_gold") if k in report})
    child["word_threshold_scale"] = report.get("word_threshold", {}).get("scale", 1.0)
    child["state_dict"] = {k: (v.half() if half and v.is_floating_point() else v).detach().cpu().clone()
                           for k, v in child["state_dict"].items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, lambda tmp: torch.save(child, tmp))


def figures_path(checkpoint: Path) -> Path:
    """Where the before/after figures of a fine-tuned checkpoint are saved: beside it."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.stem + ".figures.json")


def held_figures(config: FinetuneConfig, checkpoint: Path, items: list[dict], evaluate_gold) -> dict | None:
    if not items:
        return None
    return _figures(config, checkpoint, items, config.base_dir, evaluate_gold)


def check_figures(config: FinetuneConfig, checkpoint: Path, evaluate_gold) -> dict:
    return _figures(config, checkpoint, config.check.items, config.check.base_dir, evaluate_gold)


def _figures(config: FinetuneConfig, checkpoint: Path, items: list[dict], base_dir: Path, evaluate_gold) -> dict:
    figures = evaluate_gold(_scorer(config, checkpoint), "infometic", items, base_dir, token_rule=config.token_rule)
    out = {k: _round(figures.get(k)) for k in FIGURE_KEYS}
    out["trivial_text_accuracy"] = _round(figures["trivial"]["text_accuracy"])
    out["n_items"] = len(items)
    return out


def _scorer(config: FinetuneConfig, checkpoint: Path):
    from capscope.metrics.scorer import Scorer

    return Scorer(["infometic"], device=config.device, regions="given", infometic_checkpoint=str(checkpoint),
                  token_rule=config.token_rule)


def _round(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)


def _threshold_lines(fit: dict | None, train: dict) -> list[str]:
    if fit is None:
        return []
    scale = f"{fit['scale']:g}"
    return [f"word threshold: the rule's times {scale}, fitted on the {train['items']} training items "
            f"(wrong-word F1 there {fit['f1']['1']:.3f} at 1, {fit['f1'][scale]:.3f} at {scale})"]


def format_report(report: dict, out: Path) -> str:
    """The before/after table `capscope train infometic --labels ...` prints."""
    names = {"text_accuracy": "text accuracy", "incorrect_token_f1": "wrong-word F1",
             "incorrect_token_auroc": "wrong-word AUROC", "vision_accuracy": "vision accuracy",
             "region_auroc": "region AUROC", "trivial_text_accuracy": "text accuracy, all words correct"}
    train, held = report["labels"]["train"], report["labels"]["held_out"]
    lines = [f"fine-tuned {report['parent']['file']} (sha256 {report['parent']['sha256'][:12]}...) "
             f"on {train['items']} items ({train['tokens']} labelled words, {train['regions']} labelled regions); "
             f"{report['training']['steps']} steps in {report['training']['minutes']} min",
             f"held out: {held['items']} items on {report['holdout']['images']} images "
             f"(token rule {report['token_rule']})", *_threshold_lines(report.get("word_threshold"), train), ""]
    tables = [("held-out", report.get("before"), report.get("after"))]
    if "check_gold" in report:
        check = report["check_gold"]
        title = check.get("file") or f"dataset {check.get('dataset')}"
        tables.append((title, check["before"], check["after"]))
    for title, before, after in tables:
        if not before:
            lines.append(f"{title}: nothing held out (--holdout 0)")
            continue
        lines.append(f"{title:<34} {'before':>8} {'after':>8}")
        for key, name in names.items():
            show = lambda v: "-" if v is None else f"{v:.3f}"
            lines.append(f"  {name:<32} {show(before.get(key)):>8} {show(after.get(key)):>8}")
        lines.append("")
    lines.append(f"saved {out} and {figures_path(out).name}")
    return "\n".join(lines)
