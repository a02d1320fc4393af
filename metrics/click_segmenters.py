"""Click to segment: an annotator's points (and box) on one image become a mask.

Every segmenter splits its work the way segment-anything's `SamPredictor`
does: `embed(image)` runs once per image and returns an `Embedding` kept for
all of that image's clicks; `candidates(embedding, points, box)` answers a
click with its masks, best first (SAM's three for an ambiguous first click,
one otherwise), and `predict` with the best of them.
Points are `(x, y, 1)` for a positive click and `(x, y, 0)` for a negative one,
in image pixels.

- `sam`: segment-anything ViT-B's promptable predictor (real weights: the file
  `--regions sam` uses).
- `sam2`: Meta's SAM 2.1 small image model through its `SAM2ImagePredictor`
  (the `sam2` extra); `sam2-tiny` the same with SAM 2.1 hiera-tiny, the light one.
- `mobilesam`: MobileSAM (a TinyViT image encoder distilled from SAM's, SAM's
  prompt encoder and mask decoder), built by ultralytics (the AGPL `yolo` extra)
  and driven through its three modules here.
- `classic`: the fallback when no SAM weights are here, labelled as such in
  every answer: scikit-image's random walker on a reduced copy of the image,
  seeded with the clicks (positive clicks inside, negative clicks and the
  image's border, or everything outside the box, outside).

This module chooses and builds one (`make_click_segmenter`, `auto_choice`, the
`capscope models` rows); the protocol is in click_protocol.py, the weights files
in click_weights.py, the segmenters in click_classic.py, click_sam.py (SAM and
SAM 2) and click_mobilesam.py.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from .click_classic import ClassicClickSegmenter
from .click_mobilesam import MobileSamClickSegmenter
from .click_protocol import ClickSegmenter
from .click_sam import Sam2ClickSegmenter, SamClickSegmenter
from .click_weights import MOBILESAM_WEIGHTS, SAM2_WEIGHTS
from .constants import CLICK_SEGMENTERS
from .loading import cache_dir

log = logging.getLogger(__name__)


def sam_weights_here() -> bool:
    from .segmenters import SAM_URLS

    given = os.environ.get("CAPSCOPE_SAM_CHECKPOINT")
    if given:
        return Path(given).is_file()
    return (cache_dir() / "sam" / SAM_URLS["vit_b"].rsplit("/", 1)[-1]).is_file()


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# auto's order, the best first: SAM 2.1 small and tiny (better masks per click than SAM
# ViT-B in Meta's SAM 2 paper, and lighter), SAM ViT-B, MobileSAM (SAM distilled), the fallback
AUTO_ORDER = ("sam2", "sam2-tiny", "sam", "mobilesam")


def weights_here(name: str) -> bool:
    """Whether segmenter `name` can load without a download (its package installed, its weights here)."""
    if name == "classic":
        return True
    if name == "sam":
        return sam_weights_here()
    if name in ("sam2", "sam2-tiny"):
        return _installed("sam2") and SAM2_WEIGHTS["small" if name == "sam2" else "tiny"].here()
    if name == "mobilesam":
        return _installed("ultralytics") and MOBILESAM_WEIGHTS.here()
    raise ValueError(f"unknown segmenter {name!r}")


def auto_choice() -> str:
    """The segmenter `auto` means here and now: the best one whose weights are here (never a download)."""
    return next((name for name in AUTO_ORDER if weights_here(name)), "classic")


def make_click_segmenter(name: str = "auto", device: str = "cpu") -> ClickSegmenter:
    """`auto`: the best segmenter whose weights are already here (`AUTO_ORDER`), else the
    labelled fallback (auto never downloads); the others fetch their weights when missing."""
    if name not in CLICK_SEGMENTERS:
        raise ValueError(f"unknown segmenter {name!r}; choose from {', '.join(CLICK_SEGMENTERS)}")
    if name == "auto":
        name = auto_choice()
        log.info("segmenter auto: %s (the best whose weights are here)", name)
    if name == "sam":
        return SamClickSegmenter(device=device)
    if name == "sam2":
        return Sam2ClickSegmenter(device=device)
    if name == "sam2-tiny":
        return Sam2ClickSegmenter(device=device, size="tiny")
    if name == "mobilesam":
        return MobileSamClickSegmenter(device=device)
    return ClassicClickSegmenter()


def component_rows() -> list[dict]:
    """The click segmenters behind `capscope serve --segmenter`, as rows of `capscope models`
    (SAM's row is the region proposers'; MobileSAM's weights file is theirs too)."""
    sam2_installed, ultralytics_installed = _installed("sam2"), _installed("ultralytics")
    rows = []
    for flag, size in (("sam2", "small"), ("sam2-tiny", "tiny")):
        weights = SAM2_WEIGHTS[size]
        where = weights.given() or weights.cached()
        rows.append({
            "component": weights.component,
            "loads": f"SAM 2.1 hiera-{size}, click to segment (serve --segmenter {flag})"
                     + ("" if sam2_installed else "; needs pip install 'capscope[sam2]'"),
            "from": f"{where} (${weights.variable})", "present": sam2_installed and where.is_file(),
            "get": f"downloaded on first use from {weights.url} (sha256 recorded, checked on every load)",
        })
    where = MOBILESAM_WEIGHTS.given() or MOBILESAM_WEIGHTS.cached()
    rows.append({
        "component": "MobileSAM clicks",
        "loads": "MobileSAM through ultralytics, click to segment (serve --segmenter mobilesam)"
                 + ("" if ultralytics_installed else "; needs pip install 'capscope[yolo]' (AGPL-3.0)"),
        "from": f"{where} (${MOBILESAM_WEIGHTS.variable})", "present": ultralytics_installed and where.is_file(),
        "get": f"downloaded on first use from {MOBILESAM_WEIGHTS.url} (sha256 recorded, checked on every load)",
    })
    rows.append({
        "component": "click fallback", "loads": "random walker (scikit-image), click to segment without SAM "
                                                "weights (serve --segmenter classic; auto's fallback)",
        "from": "scikit-image, no weights", "present": True, "get": "installed with capscope",
    })
    rows.append({
        "component": "click auto", "loads": f"serve --segmenter auto picks, in order: {', '.join(AUTO_ORDER)}, classic",
        "from": "the first whose weights are here (auto never downloads)", "present": True,
        "get": f"now: {auto_choice()}",
    })
    return rows
