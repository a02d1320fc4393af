"""The click segmenter used when no SAM weights are here, labelled as the fallback:
scikit-image's random walker on a reduced copy of the image, seeded with the clicks."""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
from PIL import Image

from .click_protocol import Embedding, Point


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
