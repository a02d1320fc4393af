"""Image side, step one: region proposals.

Every source turns an image into up to `MAX_CANDIDATES` candidate regions;
`select_regions` then runs K-means over the boxes and keeps the most confident
region of each cluster (InfoMetIC appendix C). Sources register themselves in
`PROPOSERS` by name (`--regions NAME`); SAM and detector sources plug in the
same way.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
from PIL import Image

from capscope.common.limits import MAX_REGIONS, finite_number

log = logging.getLogger(__name__)

MAX_CANDIDATES = 100


@dataclass
class Region:
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels
    confidence: float | None = None
    source: str = "given"
    mask: np.ndarray | None = field(default=None, repr=False)  # H x W bool

    def to_dict(self, with_mask: bool = False) -> dict:
        out = {
            "box": [round(float(v), 2) for v in self.box],
            "confidence": None if self.confidence is None else float(self.confidence),
            "source": self.source,
        }
        if with_mask:
            out["mask"] = None if self.mask is None else mask_to_rle(self.mask)
        return out


def mask_to_rle(mask: np.ndarray) -> dict:
    """COCO RLE ({"size": [h, w], "counts": str}), as pycocotools writes it."""
    from pycocotools import mask as coco_mask

    rle = coco_mask.encode(np.asfortranarray(np.asarray(mask, dtype=np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def box_mask(box, height: int, width: int) -> np.ndarray:
    """A height x width mask with the box's pixels (outward to whole pixels) set."""
    mask = np.zeros((height, width), dtype=bool)
    x0, y0, x1, y1 = box
    mask[int(np.floor(y0)) : int(np.ceil(y1)), int(np.floor(x0)) : int(np.ceil(x1))] = True
    return mask


def rle_to_mask(rle: dict) -> np.ndarray:
    from pycocotools import mask as coco_mask

    counts = rle["counts"].encode("ascii") if isinstance(rle["counts"], str) else rle["counts"]
    return coco_mask.decode({"size": list(rle["size"]), "counts": counts}).astype(bool)


class RegionProposer(Protocol):
    """Made by a `PROPOSERS` factory, which takes `device` ("cpu", "cuda", ...)
    among its keyword arguments; `propose` gives candidate regions of one image."""

    name: str

    def propose(self, image: Image.Image) -> list[Region]: ...


def iou(a, b) -> float:
    """Intersection over union of two masks (boolean arrays of one size) or two boxes [x0, y0, x1, y1];
    0 when both are empty."""
    if isinstance(a, np.ndarray) and a.ndim == 2:
        union = np.logical_or(a, b).sum()
        return float(np.logical_and(a, b).sum() / union) if union else 0.0
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def clip_box(box, width: int, height: int) -> tuple[float, float, float, float]:
    """The box clamped to the image, or ValueError when it is empty or malformed
    (not four finite numbers: `"0099"` or `["1", "2", "3", "4"]` would
    otherwise pass through float())."""
    if not _four_numbers(box):
        raise ValueError("box must be four finite numbers [x0, y0, x1, y1]")
    x0, y0, x1, y1 = (float(v) for v in box)
    x0, x1 = sorted((min(max(x0, 0.0), width), min(max(x1, 0.0), width)))
    y0, y1 = sorted((min(max(y0, 0.0), height), min(max(y1, 0.0), height)))
    if x1 - x0 < 1 or y1 - y0 < 1:
        raise ValueError(f"box {list(box)} is empty inside a {width}x{height} image")
    return (x0, y0, x1, y1)


def _four_numbers(box) -> bool:
    if isinstance(box, (str, bytes, dict)) or not hasattr(box, "__len__") or len(box) != 4:
        return False
    return all(finite_number(v) for v in box)


def given_regions(boxes: list, width: int, height: int) -> list[Region]:
    """A row's own regions: boxes (or `{"box", "confidence"?, "mask"?}`),
    clipped into the image; a mask (COCO RLE of the image's size, or null) is
    decoded and kept for the metrics that read masks (HICE-S)."""
    if isinstance(boxes, (str, bytes, dict)) or not hasattr(boxes, "__len__"):
        raise ValueError("regions must be a list of boxes")
    if len(boxes) > MAX_REGIONS:
        raise ValueError(f"{len(boxes)} regions (limit {MAX_REGIONS})")
    regions = []
    for index, item in enumerate(boxes):
        box = item.get("box") if isinstance(item, dict) else item
        conf = item.get("confidence") if isinstance(item, dict) else None
        mask = item.get("mask") if isinstance(item, dict) else None
        if conf is not None and not finite_number(conf):  # it is written out with float() and sorted by
            raise ValueError(f"region {index}: confidence must be a finite number or null")
        try:
            mask = None if mask is None else checked_rle_mask(mask, width, height)
        except ValueError as err:
            raise ValueError(f"region {index}: {err}") from None
        regions.append(Region(clip_box(box, width, height), conf, "given", mask))
    return regions


def checked_rle_mask(rle, width: int, height: int) -> np.ndarray:
    """A COCO RLE mask (`counts` a compressed string or the uncompressed list)
    of a width x height image, decoded; ValueError says what is wrong."""
    from pycocotools import mask as coco_mask

    if not isinstance(rle, dict) or not isinstance(rle.get("size"), list) or "counts" not in rle:
        raise ValueError("a mask must be COCO RLE {\"size\": [h, w], \"counts\": str}")
    if rle["size"] != [height, width]:
        size = rle["size"]
        shown = size if len(size) == 2 and all(isinstance(v, int) for v in size) else "[h, w]"
        raise ValueError(f"mask size {shown} differs from the image's [{height}, {width}]")
    counts = rle["counts"]
    try:
        if isinstance(counts, list):
            _check_counts(counts, height * width)
            coded = coco_mask.frPyObjects({"size": [height, width], "counts": counts}, height, width)
        elif isinstance(counts, str) and counts:
            _check_counts(compressed_counts(counts), height * width)  # else pycocotools reads past them
            coded = {"size": [height, width], "counts": counts.encode("ascii")}
        else:
            raise TypeError
        mask = coco_mask.decode(coded)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
        raise ValueError("mask has malformed RLE counts") from None
    if mask.shape != (height, width):
        raise ValueError("mask does not decode to the image size")
    return mask.astype(bool)


def _check_counts(counts: list, pixels: int) -> None:
    """Uncompressed RLE counts: whole numbers from 0 that add up to the image's
    pixels (pycocotools would overflow on a huge one, or read floats as ints)."""
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts) or sum(counts) != pixels:
        raise ValueError("mask has malformed RLE counts")


def compressed_counts(text: str) -> list[int]:
    """The run lengths of a COCO RLE `counts` string (pycocotools' compressed
    form: each count in 5-bit groups, ASCII 48 onwards, a group's 0x20 bit saying
    another follows, the last group's 0x10 bit its sign; from the fourth on, each
    count is stored as its difference to the count two before). ValueError when
    the text is not such a string."""
    counts, value, shift = [], 0, 0
    for char in text:
        group = ord(char) - 48
        if not 0 <= group < 64:
            raise ValueError("mask has malformed RLE counts")
        value |= (group & 0x1F) << shift
        shift += 5
        if group & 0x20:
            if shift > 60:
                raise ValueError("mask has malformed RLE counts")
            continue
        if group & 0x10:
            value -= 1 << shift
        counts.append(value + counts[-2] if len(counts) > 2 else value)
        value, shift = 0, 0
    if shift:
        raise ValueError("mask has malformed RLE counts")  # the text ends inside a count
    return counts


def mask_to_box(mask: np.ndarray) -> tuple[float, float, float, float]:
    ys, xs = np.nonzero(mask)
    return (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))


class ClassicProposer:
    """Graph-based segmentation (Felzenszwalb, scikit-image): needs no weights.
    Confidence favours mid-sized, compact segments."""

    name = "classic"

    def __init__(self, scale: float = 200.0, sigma: float = 0.8, min_size: int = 40, work_side: int = 256,
                 device: str = "cpu"):
        # `device` is taken like every proposer's; this algorithm runs on the CPU
        self.scale, self.sigma, self.min_size, self.work_side = scale, sigma, min_size, work_side

    def propose(self, image: Image.Image) -> list[Region]:
        from skimage.segmentation import felzenszwalb

        width, height = image.size
        factor = min(1.0, self.work_side / max(width, height))
        small = image.convert("RGB").resize((max(1, round(width * factor)), max(1, round(height * factor))))
        labels = felzenszwalb(np.asarray(small), scale=self.scale, sigma=self.sigma, min_size=self.min_size)
        full = np.asarray(Image.fromarray(labels.astype(np.int32)).resize((width, height), Image.NEAREST))
        regions = []
        for label in np.unique(full):
            mask = full == label
            area = mask.sum()
            box = mask_to_box(mask)
            box_area = (box[2] - box[0]) * (box[3] - box[1])
            frac = area / (width * height)
            thin = min(box[2] - box[0], box[3] - box[1]) < 0.03 * min(width, height)
            if frac > 0.9 or frac < 0.002 or thin:  # the whole frame, specks, anti-aliased edges
                continue
            fill = area / box_area
            conf = float(fill * min(1.0, frac / 0.02) * (1.0 - frac))
            regions.append(Region(box, conf, self.name, mask))
        regions.sort(key=lambda r: -r.confidence)
        return regions[:MAX_CANDIDATES]


def _lazy(target: str) -> Callable[..., RegionProposer]:
    """A factory that imports its module on first use (torch models, ultralytics)."""
    def factory(**kwargs) -> RegionProposer:
        import importlib

        module, cls = target.split(":")
        return getattr(importlib.import_module(module, __package__), cls)(**kwargs)

    factory.target = target
    return factory


PROPOSERS: dict[str, Callable[..., RegionProposer]] = {
    "classic": ClassicProposer,
    "sam": _lazy(".segmenters:SamProposer"),
    "yolo": _lazy(".segmenters:YoloProposer"),
    "fastsam": _lazy(".segmenters:FastSamProposer"),
    "mobilesam": _lazy(".segmenters:MobileSamProposer"),
}


def select_regions(candidates: list[Region], max_regions: int = 20, seed: int = 0) -> list[Region]:
    """K-means over normalised boxes into `max_regions` clusters; the most
    confident region of each cluster is kept (InfoMetIC appendix C). The result
    is ordered by confidence, highest first."""
    candidates = candidates[:MAX_CANDIDATES]
    if len(candidates) <= max_regions:
        return sorted(candidates, key=_confidence_key)
    from sklearn.cluster import KMeans

    boxes = np.array([r.box for r in candidates], dtype=np.float64)
    scale = np.maximum(boxes[:, 2:].max(axis=0), 1.0)
    features = boxes / np.concatenate([scale, scale])
    labels = KMeans(n_clusters=max_regions, n_init=4, random_state=seed).fit_predict(features)
    kept = []
    for cluster in range(max_regions):
        members = [candidates[i] for i in np.flatnonzero(labels == cluster)]
        if members:
            kept.append(min(members, key=_confidence_key))
    return sorted(kept, key=_confidence_key)


def _confidence_key(region: Region) -> float:
    return -(region.confidence if region.confidence is not None else 0.0)
