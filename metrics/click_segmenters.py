"""Click to segment: an annotator's points (and box) on one image become a mask.

Every segmenter splits its work the way segment-anything's `SamPredictor`
does: `embed(image)` runs once per image and returns an `Embedding` kept for
all of that image's clicks; `predict(embedding, points, box)` answers a click.
Points are `(x, y, 1)` for a positive click and `(x, y, 0)` for a negative one,
in image pixels.

- `sam`: segment-anything ViT-B's promptable predictor (real weights: the file
  `--regions sam` uses).
- `sam2`: Meta's SAM 2.1 small image model through its `SAM2ImagePredictor`
  (the `sam2` extra).
- `classic`: the fallback when no SAM weights are here, labelled as such in
  every answer: scikit-image's random walker on a reduced copy of the image,
  seeded with the clicks (positive clicks inside, negative clicks and the
  image's border, or everything outside the box, outside).
"""
from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
from PIL import Image

from .constants import CLICK_SEGMENTERS
from .loading import ModelUnavailable, cache_dir, read_checkpoint
SAM2_CONFIG = "configs/sam2.1/sam2.1_hiera_s.yaml"
SAM2_URL = "https://dl.fbaipublicfiles.com/segment_anything_2/092824/sam2.1_hiera_small.pt"

Point = tuple[float, float, int]


@dataclass
class Embedding:
    """What a segmenter keeps of one image between its clicks."""
    width: int
    height: int
    state: object
    ms: float = 0.0  # how long `embed` took
    previous: dict = field(default_factory=dict)  # prompts -> low-res logits, for the next click's mask input


class ClickSegmenter(Protocol):
    name: str
    fallback: bool

    def embed(self, image: Image.Image) -> Embedding: ...

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float | None]: ...


# ---------------------------------------------------------------- the fallback

class ClassicClickSegmenter:
    """Random walker over a reduced copy of the image (scikit-image).

    The walk's edge weights come from colour differences, so a click inside an
    object floods it up to its strong edges. The reduced side keeps a click
    under 150 ms on one CPU core; the mask is scaled back to the image."""

    name = "classic (random walker, fallback)"
    fallback = True

    def __init__(self, work_side: int = 144, beta: float = 200.0, seed_radius: int = 1):
        self.work_side, self.beta, self.seed_radius = work_side, beta, seed_radius

    def embed(self, image: Image.Image) -> Embedding:
        from skimage.color import rgb2lab
        from skimage.filters import gaussian

        rgb = image.convert("RGB")
        scale = min(1.0, self.work_side / max(rgb.size))
        small = rgb.resize((max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale))), Image.BILINEAR)
        lab = rgb2lab(gaussian(np.asarray(small, dtype=np.float32) / 255.0, sigma=0.8, channel_axis=-1))
        # scale Lab so that the walker's beta means the same on every image
        lab = (lab - lab.mean(axis=(0, 1))) / (lab.std() + 1e-6)
        return Embedding(rgb.width, rgb.height, lab.astype(np.float64))

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float | None]:
        from skimage.segmentation import random_walker

        lab = embedding.state
        h, w = lab.shape[:2]
        sx, sy = w / embedding.width, h / embedding.height
        seeds = np.zeros((h, w), dtype=np.int32)
        if box is None:
            seeds[0, :] = seeds[-1, :] = seeds[:, 0] = seeds[:, -1] = 2
        else:
            outside = np.ones((h, w), dtype=bool)
            x0, y0, x1, y1 = box
            outside[max(0, int(y0 * sy)):int(np.ceil(y1 * sy)), max(0, int(x0 * sx)):int(np.ceil(x1 * sx))] = False
            seeds[outside] = 2
        positives = []
        for x, y, positive in points:
            cx, cy = min(w - 1, int(x * sx)), min(h - 1, int(y * sy))
            r = self.seed_radius
            seeds[max(0, cy - r):cy + r + 1, max(0, cx - r):cx + r + 1] = 1 if positive else 2
            if positive:
                positives.append((cy, cx))
        if not positives and box is not None:
            x0, y0, x1, y1 = box
            positives.append((min(h - 1, int((y0 + y1) / 2 * sy)), min(w - 1, int((x0 + x1) / 2 * sx))))
            seeds[positives[-1]] = 1
        if not positives:
            return np.zeros((embedding.height, embedding.width), dtype=bool), None
        with warnings.catch_warnings():  # the solver's tolerance may put a probability a hair outside [0, 1]
            warnings.simplefilter("ignore", UserWarning)
            probability = random_walker(lab, seeds, beta=self.beta, mode="cg_j", tol=1e-3, channel_axis=-1,
                                        return_full_prob=True)[0]
        # the probability is scaled up before the threshold: a smoother edge than the small mask's
        full = np.asarray(Image.fromarray(probability.astype(np.float32)).resize(
            (embedding.width, embedding.height), Image.BILINEAR)) > 0.5
        seeds_full = [(min(embedding.height - 1, int(cy / sy)), min(embedding.width - 1, int(cx / sx)))
                      for cy, cx in positives]
        return _components_at(full, seeds_full), None


def _components_at(mask: np.ndarray, seeds: list[tuple[int, int]]) -> np.ndarray:
    """The connected parts of `mask` that hold a positive click, holes filled."""
    from scipy import ndimage

    labels, _ = ndimage.label(mask)
    keep = {labels[p] for p in seeds} - {0}
    return ndimage.binary_fill_holes(np.isin(labels, list(keep))) if keep else np.zeros_like(mask)


# ---------------------------------------------------------------- SAM and SAM 2

class _PromptablePredictor:
    """What SAM's and SAM 2's predictors share: an image embedding that is set
    once and swapped in for each click, and the previous click's low-res logits
    fed back as the next click's mask input (as their interactive demos do)."""

    fallback = False

    def __init__(self, predictor):
        self.predictor = predictor
        self.lock = threading.Lock()  # one predictor object, swapped state: one click at a time

    def embed(self, image: Image.Image) -> Embedding:
        rgb = np.asarray(image.convert("RGB"))
        with self.lock:
            self.predictor.set_image(rgb)
            state = self._saved_state()
        return Embedding(rgb.shape[1], rgb.shape[0], state)

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float | None]:
        coords = np.array([[x, y] for x, y, _ in points], dtype=np.float32) if points else None
        labels = np.array([int(p) for _, _, p in points], dtype=np.int32) if points else None
        prompts = (tuple(map(tuple, points)), None if box is None else tuple(box))
        earlier = embedding.previous.get((prompts[0][:-1], prompts[1])) if points else None
        with self.lock:
            self._restore_state(embedding.state)
            masks, scores, logits = self.predictor.predict(
                point_coords=coords, point_labels=labels, box=None if box is None else np.asarray(box, np.float32),
                mask_input=earlier, multimask_output=earlier is None and len(points) <= 1)
        best = int(np.argmax(scores))
        embedding.previous = {prompts: logits[best:best + 1]}
        return np.asarray(masks[best], dtype=bool), float(scores[best])


class SamClickSegmenter(_PromptablePredictor):
    def __init__(self, model=None, kind: str = "vit_b", checkpoint=None, device: str = "cpu"):
        from segment_anything import SamPredictor, sam_model_registry

        from .segmenters import load_sam

        if model is None:
            model, kind = load_sam(kind, checkpoint, device)
        self.name = f"SAM {kind}"
        super().__init__(SamPredictor(model.to(device).eval()))
        self._registry = sam_model_registry

    @classmethod
    def with_random_weights(cls, kind: str = "vit_b", device: str = "cpu") -> "SamClickSegmenter":
        """The real architecture with untrained weights: for timing only (its masks mean nothing)."""
        from segment_anything import sam_model_registry

        segmenter = cls(sam_model_registry[kind](checkpoint=None), kind, device=device)
        segmenter.name = f"SAM {kind} (random weights)"
        return segmenter

    def _saved_state(self):
        p = self.predictor
        return p.features, p.original_size, p.input_size

    def _restore_state(self, state) -> None:
        p = self.predictor
        p.features, p.original_size, p.input_size = state
        p.is_image_set = True


class Sam2ClickSegmenter(_PromptablePredictor):
    def __init__(self, checkpoint=None, device: str = "cpu", random_weights: bool = False):
        try:
            from sam2.build_sam import build_sam2
            from sam2.sam2_image_predictor import SAM2ImagePredictor
        except ImportError:
            raise ModelUnavailable("SAM 2: the sam2 package is not installed (pip install 'capscope[sam2]')") from None
        model = build_sam2(SAM2_CONFIG, None, device=device, mode="eval")
        if not random_weights:
            path = sam2_checkpoint(checkpoint)
            state = read_checkpoint(path, "SAM 2", "CAPSCOPE_SAM2_CHECKPOINT", weights_only=True)
            try:
                model.load_state_dict(state.get("model", state), strict=True)
            except RuntimeError as err:
                raise ModelUnavailable(f"SAM 2: {path} does not fit {SAM2_CONFIG}: {str(err).splitlines()[0]}") from None
        self.name = "SAM 2.1 hiera-small" + (" (random weights)" if random_weights else "")
        super().__init__(SAM2ImagePredictor(model))

    def _saved_state(self):
        p = self.predictor
        return p._features, p._orig_hw, p._is_batch

    def _restore_state(self, state) -> None:
        p = self.predictor
        p._features, p._orig_hw, p._is_batch = state
        p._is_image_set = True


def sam2_checkpoint(checkpoint=None) -> Path:
    from .segmenters import _download

    hint = "set CAPSCOPE_SAM2_CHECKPOINT to a local sam2.1_hiera_small.pt"
    value = checkpoint or os.environ.get("CAPSCOPE_SAM2_CHECKPOINT")
    if value:
        if not Path(value).is_file():
            raise ModelUnavailable(f"SAM 2: checkpoint {value} not found ({hint})")
        return Path(value)
    target = cache_dir() / "sam2" / SAM2_URL.rsplit("/", 1)[-1]
    return target if target.is_file() else _download(SAM2_URL, target, "SAM 2", hint)


# ---------------------------------------------------------------- choosing one

def sam_weights_here() -> bool:
    from .segmenters import SAM_URLS

    given = os.environ.get("CAPSCOPE_SAM_CHECKPOINT")
    if given:
        return Path(given).is_file()
    return (cache_dir() / "sam" / SAM_URLS["vit_b"].rsplit("/", 1)[-1]).is_file()


def make_click_segmenter(name: str = "auto", device: str = "cpu") -> ClickSegmenter:
    """`auto`: SAM when its weights are already here, else the labelled fallback
    (auto never downloads); `sam` and `sam2` fetch their weights when missing."""
    if name not in CLICK_SEGMENTERS:
        raise ValueError(f"unknown segmenter {name!r}; choose from {', '.join(CLICK_SEGMENTERS)}")
    if name == "auto":
        name = "sam" if sam_weights_here() else "classic"
    if name == "sam":
        return SamClickSegmenter(device=device)
    if name == "sam2":
        return Sam2ClickSegmenter(device=device)
    return ClassicClickSegmenter()
