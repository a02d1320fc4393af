"""The labelled items as tensors: the head's inputs with per-piece and
per-region labels (encode_items, LabelledSet), and what trains the top of
CLIP's image tower: the tower cut in two (VisualTop) and the new appearance
of an image each step (Augment)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from capscope.metrics.encoder import crop_region
from capscope.metrics.images import read_image
from capscope.metrics.pairs import PreparedPair
from capscope.metrics.regions import given_regions
from capscope.metrics.text import Token
from capscope.train.finetune.settings import FinetuneError
from capscope.train.infometic_data import IGNORE, OTHER, encode_bank

UNKNOWN = 3        # a piece of a semantic word nobody labelled: counts as a word, supervises nothing


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

