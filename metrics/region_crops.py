"""How a region becomes a CLIP input: the plain box crop, or one grown by a
margin and pasted at true scale on a fixed canvas (`CropStyle`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from .regions import Region


@dataclass(frozen=True)
class CropStyle:
    """How a region becomes a CLIP input. The default is the plain box crop;
    capscope's demo CLIP was trained on crops grown by a margin and pasted at
    true scale on a fixed canvas (so that size stays visible), and must be fed
    the same way."""

    margin: float = 0.0
    canvas: int | None = None


def crop_region(image: Image.Image, region: Region, style: CropStyle = CropStyle()) -> Image.Image:
    box = grown_box(region.box, style.margin, image.size)
    crop = image.crop(box)
    if style.canvas is None:
        return crop
    crop = shrink_to(crop, style.canvas)
    return paste_centred(crop, style.canvas, border_colour(np.asarray(crop)))


def grown_box(box, margin: float, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The box grown by `margin` times its width and height, in whole pixels inside the image."""
    x0, y0, x1, y1 = box
    dx, dy = margin * (x1 - x0), margin * (y1 - y0)
    return (max(0, int(np.floor(x0 - dx))), max(0, int(np.floor(y0 - dy))),
            min(size[0], int(np.ceil(x1 + dx))), min(size[1], int(np.ceil(y1 + dy))))


def border_colour(pixels: np.ndarray) -> tuple[int, int, int]:
    """Median colour of the outermost rows and columns: the local background."""
    border = np.concatenate([pixels[[0, -1]].reshape(-1, 3), pixels[:, [0, -1]].reshape(-1, 3)])
    return tuple(int(v) for v in np.median(border, axis=0))


def shrink_to(crop: Image.Image, side: int) -> Image.Image:
    """The crop, shrunk to fit a side x side square when it is larger."""
    if crop.width <= side and crop.height <= side:
        return crop
    crop = crop.copy()
    crop.thumbnail((side, side))
    return crop


def paste_centred(crop: Image.Image, side: int, fill) -> Image.Image:
    """The crop in the middle of a side x side canvas of colour `fill`."""
    canvas = Image.new("RGB", (side, side), tuple(fill))
    canvas.paste(crop, ((side - crop.width) // 2, (side - crop.height) // 2))
    return canvas
