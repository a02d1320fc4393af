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
"""
from __future__ import annotations

import logging
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

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Weights:
    """A click segmenter's weights file: named by the user (`variable`), else kept in
    capscope's cache at `relative`, fetched from `url` on first use. The download's
    sha256 is checked against `sha256` when the authors publish one, and recorded
    beside the file in any case; every later load checks the file against it
    (`loading.read_checkpoint`), so a file changed on disk is refused."""
    component: str
    url: str
    variable: str
    relative: str
    sha256: str | None = None

    def cached(self) -> Path:
        return cache_dir() / self.relative

    def given(self, checkpoint=None) -> Path | None:
        value = checkpoint or os.environ.get(self.variable)
        return Path(value) if value else None

    def here(self) -> bool:
        """Whether the file is here already (nothing is fetched)."""
        given = self.given()
        return (given or self.cached()).is_file()

    def path(self, checkpoint=None) -> Path:
        """The file, downloaded first when neither named nor cached."""
        from .downloads import fetch_http

        hint = f"set {self.variable} to a local {self.url.rsplit('/', 1)[-1]}"
        given = self.given(checkpoint)
        if given is not None:
            if not given.is_file():
                raise ModelUnavailable(f"{self.component}: checkpoint {given} not found ({hint})")
            return given
        target = self.cached()
        if not target.is_file():
            try:
                fetch_http(self.url, target, self.sha256, self.component, log=log.info)
            except ModelUnavailable as err:
                raise ModelUnavailable(f"{err}; {hint}") from None
        return target


SAM2_CONFIGS = {"small": "configs/sam2.1/sam2.1_hiera_s.yaml", "tiny": "configs/sam2.1/sam2.1_hiera_t.yaml"}
SAM2_WEIGHTS = {
    "small": Weights("SAM 2", "https://dl.fbaipublicfiles.com/segment_anything_2/092824/sam2.1_hiera_small.pt",
                     "CAPSCOPE_SAM2_CHECKPOINT", "sam2/sam2.1_hiera_small.pt"),
    "tiny": Weights("SAM 2 tiny", "https://dl.fbaipublicfiles.com/segment_anything_2/092824/sam2.1_hiera_tiny.pt",
                    "CAPSCOPE_SAM2_TINY_CHECKPOINT", "sam2/sam2.1_hiera_tiny.pt"),
}
SAM2_CONFIG, SAM2_URL = SAM2_CONFIGS["small"], SAM2_WEIGHTS["small"].url
# the release ultralytics itself fetches its assets from; the same file and place as `--regions mobilesam`'s
MOBILESAM_WEIGHTS = Weights("MobileSAM", "https://github.com/ultralytics/assets/releases/download/v8.4.0/mobile_sam.pt",
                            "CAPSCOPE_MOBILESAM_WEIGHTS", "ultralytics/mobile_sam.pt")

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

    def candidates(self, embedding: Embedding, points: Sequence[Point], box=None) -> list[tuple[np.ndarray, float | None]]:
        ...


MAX_CANDIDATES = 3  # masks one click can answer with (SAM's multimask output)


# ---------------------------------------------------------------- the fallback

class ClassicClickSegmenter:
    """Random walker over a reduced copy of the image (scikit-image).

    The walk's edge weights come from colour differences, so a click inside an
    object floods it up to its strong edges. The first click works on the whole
    image reduced to `work_side`; a later click zooms in on a window around the
    previous mask and the clicks (at most `work_side` a side again, the image's
    own pixels for a small object), so corrections sharpen the edge instead of
    meeting the reduced image's pixel size. Each click is one walk, under 150 ms
    on one CPU core. However large the image, the mask is drawn at most
    `detail_side` a side and its copy of the image kept at most `kept_side`,
    so a 36-megapixel photo costs a click what a 1-megapixel one does."""

    name = "classic (random walker, fallback)"
    fallback = True

    def __init__(self, work_side: int = 144, beta: float = 200.0, seed_radius: int = 1, margin: float = 0.5,
                 detail_side: int = 1024, kept_side: int = 2048):
        self.work_side, self.beta, self.seed_radius, self.margin = work_side, beta, seed_radius, margin
        self.detail_side, self.kept_side = detail_side, kept_side

    def embed(self, image: Image.Image) -> Embedding:
        rgb = image.convert("RGB")
        kept = rgb.copy()
        kept.thumbnail((self.kept_side, self.kept_side), Image.BILINEAR)
        return Embedding(rgb.width, rgb.height, {"image": kept, "whole": self._features(kept)})

    def _features(self, rgb: Image.Image) -> np.ndarray:
        """Smoothed Lab of (a window of) the image at most `work_side` a side, scaled so that
        the walker's beta means the same on every image."""
        from skimage.color import rgb2lab
        from skimage.filters import gaussian

        scale = min(1.0, self.work_side / max(rgb.size))
        small = rgb.resize((max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale))), Image.BILINEAR)
        lab = rgb2lab(gaussian(np.asarray(small, dtype=np.float32) / 255.0, sigma=0.8, channel_axis=-1))
        return ((lab - lab.mean(axis=(0, 1))) / (lab.std() + 1e-6)).astype(np.float64)

    def _window(self, embedding: Embedding, points: Sequence[Point]) -> tuple[int, int, int, int] | None:
        """Where a later click looks: the previous mask's box and the positive clicks, with a margin."""
        previous = embedding.previous.get(tuple(map(tuple, points[:-1])))
        if previous is None:
            return None
        xs = [previous[0], previous[2], *(x for x, _, p in points if p)]
        ys = [previous[1], previous[3], *(y for _, y, p in points if p)]
        pad = max(8.0, self.margin * max(max(xs) - min(xs), max(ys) - min(ys)))
        return (max(0, int(min(xs) - pad)), max(0, int(min(ys) - pad)),
                min(embedding.width, int(np.ceil(max(xs) + pad))), min(embedding.height, int(np.ceil(max(ys) + pad))))

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float | None]:
        window = self._window(embedding, points) if points and box is None else None
        kept = embedding.state["image"]
        if window is None:
            window, lab = (0, 0, embedding.width, embedding.height), embedding.state["whole"]
        else:
            factor = kept.width / embedding.width
            lab = self._features(kept.crop(tuple(round(v * factor) for v in window)))
        probability, positives = self._walk(lab, window, points, box)
        full = np.zeros((embedding.height, embedding.width), dtype=bool) if probability is None or \
            window[2:] != (embedding.width, embedding.height) or window[:2] != (0, 0) else None
        if probability is None:
            return full, None
        wx0, wy0, wx1, wy1 = window
        width, height = wx1 - wx0, wy1 - wy0
        # the probability is scaled up before the threshold (a smoother edge than the small mask's), to
        # at most detail_side a side; the mask then takes the window's own size
        scale = min(1.0, self.detail_side / max(width, height))
        detail = (max(1, round(width * scale)), max(1, round(height * scale)))
        sharp = np.asarray(Image.fromarray(probability.astype(np.float32)).resize(detail, Image.BILINEAR)) > 0.5
        inside = [(min(max(0, int((y - wy0) * scale)), detail[1] - 1),
                   min(max(0, int((x - wx0) * scale)), detail[0] - 1)) for y, x in positives]
        part = _components_at(sharp, inside)
        if detail != (width, height):
            part = np.asarray(Image.fromarray(part).resize((width, height), Image.NEAREST))
        if (width, height) == (embedding.width, embedding.height):
            full = part  # the window is the whole image: no second image-sized mask
        else:
            full[wy0:wy1, wx0:wx1] = part
        if part.any() and points:
            ys, xs = np.nonzero(part)
            embedding.previous = {tuple(map(tuple, points)): (wx0 + xs.min(), wy0 + ys.min(),
                                                               wx0 + xs.max() + 1, wy0 + ys.max() + 1)}
        return full, None

    def candidates(self, embedding: Embedding, points: Sequence[Point], box=None) -> list[tuple[np.ndarray, None]]:
        """One mask: the walk has no second guess to offer."""
        return [self.predict(embedding, points, box)]

    def _walk(self, lab: np.ndarray, window, points: Sequence[Point], box):
        """(foreground probability over `lab`, the positive clicks in image pixels), or (None, [])."""
        from skimage.segmentation import random_walker

        h, w = lab.shape[:2]
        wx0, wy0, wx1, wy1 = window
        sx, sy = w / (wx1 - wx0), h / (wy1 - wy0)
        seeds = np.zeros((h, w), dtype=np.int32)
        if box is None:
            seeds[0, :] = seeds[-1, :] = seeds[:, 0] = seeds[:, -1] = 2
        else:
            seeds[:] = 2
            x0, y0, x1, y1 = box
            seeds[max(0, int(y0 * sy)):int(np.ceil(y1 * sy)), max(0, int(x0 * sx)):int(np.ceil(x1 * sx))] = 0
        clicks = [(x, y, 1 if p else 2) for x, y, p in points]
        if not any(p for _, _, p in points) and box is not None:  # a box alone: its centre is inside
            clicks.append(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2, 1))
        positives = [(y, x) for x, y, label in clicks if label == 1]
        r = self.seed_radius
        for x, y, label in clicks:  # in order: a later click on the same spot wins
            cx, cy = int((x - wx0) * sx), int((y - wy0) * sy)
            if 0 <= cx < w and 0 <= cy < h:
                seeds[max(0, cy - r):cy + r + 1, max(0, cx - r):cx + r + 1] = label
        if not positives or not (seeds == 1).any():
            return None, []
        with warnings.catch_warnings():  # the solver's tolerance may put a probability a hair outside [0, 1]
            warnings.simplefilter("ignore", UserWarning)
            probability = random_walker(lab, seeds, beta=self.beta, mode="cg_j", tol=1e-3, channel_axis=-1,
                                        return_full_prob=True)[0]
        inside = [(min(int(y), wy1 - 1), min(int(x), wx1 - 1)) for y, x in positives]
        return probability, inside


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
    state_fields: tuple[str, ...] = ()  # the predictor's fields that hold one image's embedding
    set_flag = ""                       # and the one that says an image is set

    def __init__(self, predictor):
        self.predictor = predictor
        self.lock = threading.Lock()  # one predictor object, swapped state: one click at a time

    def embed(self, image: Image.Image) -> Embedding:
        rgb = np.asarray(image.convert("RGB"))
        with self.lock:
            self.predictor.set_image(rgb)
            state = self._saved_state()
        return Embedding(rgb.shape[1], rgb.shape[0], state)

    def _saved_state(self) -> tuple:
        return tuple(getattr(self.predictor, name) for name in self.state_fields)

    def _restore_state(self, state: tuple) -> None:
        for name, value in zip(self.state_fields, state):
            setattr(self.predictor, name, value)
        setattr(self.predictor, self.set_flag, True)

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float]:
        return self.candidates(embedding, points, box)[0]

    def candidates(self, embedding: Embedding, points: Sequence[Point], box=None) -> list[tuple[np.ndarray, float]]:
        """The predictor's masks, best (highest predicted IoU) first: three for a first click
        alone (multimask output, the click being ambiguous), one once earlier logits or
        several clicks pin the object down."""
        coords = np.array([[x, y] for x, y, _ in points], dtype=np.float32) if points else None
        labels = np.array([int(p) for _, _, p in points], dtype=np.int32) if points else None
        prompts = (tuple(map(tuple, points)), None if box is None else tuple(box))
        earlier = embedding.previous.get((prompts[0][:-1], prompts[1])) if points else None
        with self.lock:
            self._restore_state(embedding.state)
            masks, scores, logits = self.predictor.predict(
                point_coords=coords, point_labels=labels, box=None if box is None else np.asarray(box, np.float32),
                mask_input=earlier, multimask_output=earlier is None and len(points) <= 1)
        order = [int(i) for i in np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")][:MAX_CANDIDATES]
        best = order[0]
        embedding.previous = {prompts: logits[best:best + 1]}
        return [(np.asarray(masks[i], dtype=bool), float(scores[i])) for i in order]


class SamClickSegmenter(_PromptablePredictor):
    state_fields, set_flag = ("features", "original_size", "input_size"), "is_image_set"
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


class Sam2ClickSegmenter(_PromptablePredictor):
    # SAM 2's predictor keeps an image's features in private fields and has no public way to
    # set them back: its public get_image_embedding() gives the lowest level only, and the
    # mask decoder also needs the high-resolution levels (`_features["high_res_feats"]`),
    # which only the model's private `_prepare_backbone_features` makes
    state_fields, set_flag = ("_features", "_orig_hw", "_is_batch"), "_is_image_set"
    def __init__(self, checkpoint=None, device: str = "cpu", random_weights: bool = False, size: str = "small"):
        try:
            from sam2.build_sam import build_sam2
            from sam2.sam2_image_predictor import SAM2ImagePredictor
        except ImportError:
            raise ModelUnavailable("SAM 2: the sam2 package is not installed (pip install 'capscope[sam2]')") from None
        if size not in SAM2_CONFIGS:
            raise ValueError(f"SAM 2 size {size!r}: choose from {', '.join(SAM2_CONFIGS)}")
        config, weights = SAM2_CONFIGS[size], SAM2_WEIGHTS[size]
        model = build_sam2(config, None, device=device, mode="eval")
        if not random_weights:
            path = sam2_checkpoint(checkpoint, size)
            state = read_checkpoint(path, weights.component, weights.variable, weights_only=True)
            try:
                model.load_state_dict(state.get("model", state), strict=True)
            except RuntimeError as err:
                raise ModelUnavailable(f"{weights.component}: {path} does not fit {config}: "
                                       f"{str(err).splitlines()[0]}") from None
        self.name = f"SAM 2.1 hiera-{size}" + (" (random weights)" if random_weights else "")
        super().__init__(SAM2ImagePredictor(model))


def sam2_checkpoint(checkpoint=None, size: str = "small") -> Path:
    return SAM2_WEIGHTS[size].path(checkpoint)


class MobileSamClickSegmenter:
    """MobileSAM as ultralytics builds it (`build_mobile_sam`), driven through its three
    public modules the way segment-anything's predictor drives SAM: the image's longest
    side scaled to 1024 and padded, the encoder run once per image; a click is the prompt
    encoder and the mask decoder on the kept features (a few milliseconds), the previous
    click's low-res logits fed back, the 256 x 256 logits scaled up to the image. The
    image's state is the Embedding itself: nothing is swapped in and out of a predictor,
    so clicks on several images need no lock."""

    fallback = False
    side = 1024

    def __init__(self, model=None, checkpoint=None, device: str = "cpu", random_weights: bool = False):
        from .segmenters import import_ultralytics

        import_ultralytics()
        from ultralytics.models.sam.build import build_mobile_sam

        if model is None:
            model = build_mobile_sam(None)
            if not random_weights:
                path = MOBILESAM_WEIGHTS.path(checkpoint)
                state = read_checkpoint(path, "MobileSAM", MOBILESAM_WEIGHTS.variable, weights_only=True)
                try:
                    model.load_state_dict(state.get("model", state), strict=True)
                except (RuntimeError, AttributeError) as err:
                    raise ModelUnavailable(f"MobileSAM: {path} does not fit MobileSAM: "
                                           f"{str(err).splitlines()[0]}") from None
        import torch

        self.model = model.to(device).eval()
        # channels-last convolutions: the image encoder took 1.46 s a picture on 2 CPU cores, 0.89-0.98 s so
        self.model.image_encoder.to(memory_format=torch.channels_last)
        self.device = device
        self.name = "MobileSAM" + (" (random weights)" if random_weights else "")

    @classmethod
    def with_random_weights(cls, device: str = "cpu") -> "MobileSamClickSegmenter":
        """The real architecture with untrained weights: for timing only (its masks mean nothing)."""
        return cls(device=device, random_weights=True)

    def embed(self, image: Image.Image) -> Embedding:
        import torch

        rgb = image.convert("RGB")
        scale = self.side / max(rgb.size)
        resized = (int(rgb.width * scale + 0.5), int(rgb.height * scale + 0.5))  # as SAM's ResizeLongestSide
        pixels = torch.from_numpy(np.asarray(rgb.resize(resized, Image.BILINEAR), dtype=np.float32)).permute(2, 0, 1)
        pixels = (pixels - self.model.pixel_mean.cpu().view(3, 1, 1)) / self.model.pixel_std.cpu().view(3, 1, 1)
        padded = torch.zeros(1, 3, self.side, self.side)
        padded[0, :, :resized[1], :resized[0]] = pixels
        with torch.inference_mode():
            features = self.model.image_encoder(padded.to(self.device, memory_format=torch.channels_last))
        return Embedding(rgb.width, rgb.height, {"features": features, "resized": resized})

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float]:
        return self.candidates(embedding, points, box)[0]

    def candidates(self, embedding: Embedding, points: Sequence[Point], box=None) -> list[tuple[np.ndarray, float]]:
        """Three masks for a lone first click (multimask output), one once earlier logits
        or several clicks pin the object down; best (predicted IoU) first."""
        import torch
        import torch.nn.functional as F

        rw, rh = embedding.state["resized"]
        sx, sy = rw / embedding.width, rh / embedding.height
        prompts = (tuple(map(tuple, points)), None if box is None else tuple(box))
        earlier = embedding.previous.get((prompts[0][:-1], prompts[1])) if points else None
        with torch.inference_mode():
            point_input = None
            if points:
                coords = torch.tensor([[[x * sx, y * sy] for x, y, _ in points]], dtype=torch.float32, device=self.device)
                labels = torch.tensor([[int(p) for _, _, p in points]], dtype=torch.int32, device=self.device)
                point_input = (coords, labels)
            box_input = None if box is None else torch.tensor(
                [[box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy]], dtype=torch.float32, device=self.device)
            sparse, dense = self.model.prompt_encoder(points=point_input, boxes=box_input, masks=earlier)
            low, iou = self.model.mask_decoder(
                image_embeddings=embedding.state["features"], image_pe=self.model.prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                multimask_output=earlier is None and len(points) <= 1)
            logits = F.interpolate(low, (self.side, self.side), mode="bilinear", align_corners=False)[..., :rh, :rw]
            logits = F.interpolate(logits, (embedding.height, embedding.width), mode="bilinear", align_corners=False)
            masks = (logits[0] > self.model.mask_threshold).cpu().numpy()
        scores = iou[0].float().cpu().numpy()
        order = [int(i) for i in np.argsort(-scores.astype(np.float64), kind="stable")][:MAX_CANDIDATES]
        embedding.previous = {prompts: low[:, order[0]:order[0] + 1]}
        return [(masks[i], float(scores[i])) for i in order]


# ---------------------------------------------------------------- choosing one

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
