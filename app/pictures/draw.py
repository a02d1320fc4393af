"""Pictures of scored regions for the UI and the `diagnose` report, drawn with PIL: region outlines
over the image, thumbnails, and the mapping from a click back to a region.

Small images (the demo scenes are 224 px) are enlarged for display, because
the browser never enlarges them; `display_scale` says by how much, and a click
(which Gradio reports in the displayed image's pixels) is divided by it."""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

MIN_DISPLAY_SIDE = 512
MAX_DISPLAY_SCALE = 4
UNMENTIONED = (255, 0, 200)      # magenta: what the caption left out
CHOSEN = (20, 170, 70)           # an annotator's "mentioned"
SUGGESTED = (90, 90, 90)         # a model's suggestion, dashed
JUNK = (120, 120, 120)           # a region marked "no object", crossed out
DRAFT = (40, 110, 255)           # the mask of a region being made by clicks


def display_scale(size: tuple[int, int]) -> int:
    """Whole-number enlargement so that the longer side reaches MIN_DISPLAY_SIDE."""
    side = max(size)
    return max(1, min(MAX_DISPLAY_SCALE, -(-MIN_DISPLAY_SIDE // max(side, 1))))


def enlarged(image: Image.Image) -> tuple[Image.Image, int]:
    scale = display_scale(image.size)
    image = image.convert("RGB")
    if scale == 1:
        return image.copy(), 1
    return image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST), scale


def heat(value: float) -> tuple[int, int, int]:
    """0 -> cool blue, 0.5 -> yellow, 1 -> hot red."""
    v = min(1.0, max(0.0, float(value)))
    stops = [(0.0, (60, 90, 220)), (0.5, (245, 200, 30)), (1.0, (225, 30, 30))]
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if v <= b:
            t = (v - a) / (b - a)
            return tuple(round(x + (y - x) * t) for x, y in zip(ca, cb))
    return stops[-1][1]


def normalised(scores: list[float]) -> list[float]:
    """Scores spread over 0-1 for colouring (a flat list maps to 0.5)."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    return [0.5 if hi - lo < 1e-9 else (s - lo) / (hi - lo) for s in scores]


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def _dashed_rectangle(draw: ImageDraw.ImageDraw, box, colour, width: int, dash: int) -> None:
    x0, y0, x1, y1 = box
    for a, b, horizontal, fixed in ((x0, x1, True, y0), (x0, x1, True, y1), (y0, y1, False, x0), (y0, y1, False, x1)):
        pos = a
        while pos < b:
            end = min(pos + dash, b)
            line = [(pos, fixed), (end, fixed)] if horizontal else [(fixed, pos), (fixed, end)]
            draw.line(line, fill=colour, width=width)
            pos += 2 * dash


def _label(draw, xy, text: str, colour, scale: int) -> None:
    font = _font(12 + 5 * scale)
    left, top, right, bottom = draw.textbbox(xy, text, font=font)
    draw.rectangle((left - 2, top - 1, right + 2, bottom + 1), fill=colour)
    draw.text(xy, text, fill=(255, 255, 255), font=font)


def decoded_mask(mask, size: tuple[int, int]) -> np.ndarray | None:
    """A region's mask (COCO RLE, or an array already decoded) as an H x W bool
    array of an image of `size` (w, h); None when there is none, or it does not fit
    the image (the region is then drawn as its box)."""
    if mask is None:
        return None
    try:
        if isinstance(mask, dict):  # COCO RLE, decoded here: this layer imports none of capscope's
            from pycocotools import mask as coco_mask

            if list(mask["size"]) != [size[1], size[0]]:  # another image's mask: not decoded at all
                return None

            counts = mask["counts"].encode("ascii") if isinstance(mask["counts"], str) else mask["counts"]
            mask = coco_mask.decode({"size": list(mask["size"]), "counts": counts})
        mask = np.asarray(mask, dtype=bool)
    except Exception:  # a malformed mask is drawn as its box
        return None
    return mask if mask.shape == (size[1], size[0]) and mask.any() else None


def mask_outline(mask: np.ndarray, scale: int, width: int) -> tuple[np.ndarray, int, int]:
    """The ring of display pixels just outside `mask` (an image-sized bool array),
    `width` display pixels thick, as (ring, top, left): a bool array over the
    mask's own neighbourhood and where it lies in the enlarged picture."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    pad = -(-width // scale) + 1
    y0, y1 = max(0, rows[0] - pad), min(mask.shape[0], rows[-1] + 1 + pad)
    x0, x1 = max(0, cols[0] - pad), min(mask.shape[1], cols[-1] + 1 + pad)
    inside = mask[y0:y1, x0:x1]
    if scale > 1:
        inside = inside.repeat(scale, axis=0).repeat(scale, axis=1)
    grown = inside.copy()
    for axis in (0, 1):  # a square dilation, one axis after the other
        step = grown.copy()
        for d in range(1, width + 1):
            if axis == 0:
                step[d:] |= grown[:-d]
                step[:-d] |= grown[d:]
            else:
                step[:, d:] |= grown[:, :-d]
                step[:, :-d] |= grown[:, d:]
        grown = step
    return grown & ~inside, y0 * scale, x0 * scale


def _paint_outline(pixels: np.ndarray, mask: np.ndarray, scale: int, width: int, colour, dash: int = 0) -> None:
    """Paint the outline of `mask` onto `pixels` (the enlarged picture, H x W x 3), dashed when `dash`."""
    ring, top, left = mask_outline(mask, scale, width)
    if dash:
        yy, xx = np.indices(ring.shape)
        ring &= ((yy + top + xx + left) // dash) % 2 == 0
    target = pixels[top:top + ring.shape[0], left:left + ring.shape[1]]
    target[ring[:target.shape[0], :target.shape[1]]] = colour


def _with_outlines(canvas: Image.Image, outlines: list) -> Image.Image:
    """`canvas` with each (mask, scale, width, colour, dash) outline painted."""
    if not outlines:
        return canvas
    pixels = np.array(canvas.convert("RGB"))
    for mask, scale, width, colour, dash in outlines:
        _paint_outline(pixels, mask, scale, width, colour, dash)
    return Image.fromarray(pixels)


def score_overlay(image: Image.Image, boxes: list, scores: list[float] | None, mentioned: list[bool] | None,
                  selected: int | None = None, masks: list | None = None) -> Image.Image:
    """Region outlines heat-coloured by score, unmentioned regions dashed
    magenta, every region numbered from 1. Outlines only, drawn just outside
    each box, or just outside its mask where the region has one (`masks`: one
    COCO RLE or None per region): the picture keeps its own colours (a tint over
    a whole-image region made a yellow shape read orange) and a shape's rim stays visible."""
    canvas, scale = enlarged(image)
    width = 2 + scale
    heats = normalised(scores or [])
    shapes = [decoded_mask(m, image.size) for m in (masks or [])]
    colours = []
    for i in range(len(boxes)):
        is_unmentioned = mentioned is not None and i < len(mentioned) and not mentioned[i]
        colours.append((is_unmentioned, UNMENTIONED if is_unmentioned else
                        heat(heats[i]) if i < len(heats) else (80, 80, 80)))
    canvas = _with_outlines(canvas, [(shapes[i], scale, width, colours[i][1], 4 * scale if colours[i][0] else 0)
                                     for i in range(min(len(boxes), len(shapes))) if shapes[i] is not None])
    draw = ImageDraw.Draw(canvas)
    for i, box in enumerate(boxes):
        if box is None:  # a region taken away (shown_boxes)
            continue
        rect = outside(box, scale, width, canvas.size)
        is_unmentioned, colour = colours[i]
        if i < len(shapes) and shapes[i] is not None:
            pass  # outlined by its mask above
        elif is_unmentioned:
            _dashed_rectangle(draw, rect, colour, width, 4 * scale)
        else:
            draw.rectangle(rect, outline=colour, width=width)
        if i == selected:
            draw.rectangle([rect[0] - width, rect[1] - width, rect[2] + width, rect[3] + width],
                           outline=(0, 0, 0), width=2)
        _label(draw, (rect[0] + 2, rect[1] + 1), str(i + 1), colour, scale)
    return canvas


def outside(box, scale: int, width: int, size: tuple[int, int]) -> list[float]:
    """`box` in display pixels, grown by the outline's width so the outline lies
    around the region, not on its edge (kept inside the picture)."""
    x0, y0, x1, y1 = (v * scale for v in box)
    return [max(0, x0 - width), max(0, y0 - width), min(size[0] - 1, x1 + width), min(size[1] - 1, y1 + width)]


def shown_boxes(regions: list[dict]) -> list:
    """Each region's box, None for a region taken away (it keeps its place: regions go by index)."""
    return [None if r.get("removed") else r["box"] for r in regions]


def shown_masks(regions: list[dict]) -> list:
    """Each region's mask (COCO RLE or None), None for a region taken away."""
    return [None if r.get("removed") else r.get("mask") for r in regions]


def labels_overlay(image: Image.Image, boxes: list, chosen: set[int], suggested: set[int] | None = None,
                   junk: set[int] | None = None, masks: list | None = None) -> Image.Image:
    """Annotate view: every region outlined thinly and numbered; the ones the
    annotator marked "mentioned" thick green and tinted; model suggestions dashed;
    junk regions ("no object") crossed out. A region with a mask (`masks`: one
    COCO RLE or None per region) is outlined, and tinted, by its mask, not its box."""
    canvas, scale = enlarged(image)
    shapes = [decoded_mask(m, image.size) for m in (masks or [])]
    shape = lambda i: shapes[i] if i < len(shapes) else None  # noqa: E731
    tint = Image.new("RGBA", canvas.size, (0, 0, 0, 0))
    tint_draw = ImageDraw.Draw(tint)
    for i in chosen:
        if 0 <= i < len(boxes) and boxes[i] is not None:
            if shape(i) is not None:
                shown = Image.fromarray(shape(i).astype("uint8") * 255).resize(canvas.size, Image.Resampling.NEAREST)
                tint.paste(CHOSEN + (60,), (0, 0, *canvas.size), shown)
            else:
                tint_draw.rectangle([v * scale for v in boxes[i]], fill=CHOSEN + (60,))
    canvas = Image.alpha_composite(canvas.convert("RGBA"), tint).convert("RGB")
    canvas = _with_outlines(canvas, [(shape(i), scale, 3 + scale if i in chosen else 1 + scale // 2,
                                      CHOSEN if i in chosen else (70, 70, 70), 0)
                                     for i in range(len(boxes)) if shape(i) is not None])
    draw = ImageDraw.Draw(canvas)
    for i, box in enumerate(boxes):
        if box is None:  # a region taken away (shown_boxes)
            continue
        rect = [v * scale for v in box]
        if shape(i) is not None:
            pass  # outlined by its mask above
        elif i in chosen:
            draw.rectangle(rect, outline=CHOSEN, width=3 + scale)
        else:
            draw.rectangle(rect, outline=(70, 70, 70), width=1 + scale // 2)
        if suggested and i in suggested:
            _dashed_rectangle(draw, [rect[0] + 3, rect[1] + 3, rect[2] - 3, rect[3] - 3], SUGGESTED, 2, 3 * scale)
        if junk and i in junk:
            draw.line([rect[0], rect[1], rect[2], rect[3]], fill=JUNK, width=1 + scale // 2)
            draw.line([rect[0], rect[3], rect[2], rect[1]], fill=JUNK, width=1 + scale // 2)
        _label(draw, (rect[0] + 2, rect[1] + 1), f"{i + 1}{'×' if junk and i in junk else ''}",
               CHOSEN if i in chosen else (70, 70, 70), scale)
    return canvas


def with_draft(canvas: Image.Image, image_size: tuple[int, int], mask, points) -> Image.Image:
    """A region being made: its mask tinted blue over a picture drawn by this module,
    positive clicks as green dots, negative ones as red."""
    scale = canvas.width // max(1, image_size[0])
    out = canvas.convert("RGBA")
    if mask is not None:
        shown = Image.fromarray((mask * 110).astype("uint8")).resize(canvas.size, Image.Resampling.NEAREST)
        tint = Image.new("RGBA", canvas.size, DRAFT + (0,))
        tint.putalpha(shown)
        out = Image.alpha_composite(out, tint)
    draw = ImageDraw.Draw(out)
    for x, y, positive in points:
        r = 3 + scale
        draw.ellipse([x * scale - r, y * scale - r, x * scale + r, y * scale + r],
                     fill=(30, 170, 60) if positive else (220, 30, 30), outline=(255, 255, 255), width=2)
    return out.convert("RGB")


def region_at(boxes: list, x: float, y: float) -> int | None:
    """The smallest region containing the point (original pixels), or None."""
    inside = [(abs((b[2] - b[0]) * (b[3] - b[1])), i) for i, b in enumerate(boxes)
              if b is not None and b[0] <= x <= b[2] and b[1] <= y <= b[3]]
    return min(inside)[1] if inside else None


def clicked_region(boxes: list, image_size: tuple[int, int], index) -> int | None:
    """The region under a click on an image drawn by this module (`index` is
    Gradio's [x, y] in the displayed picture's pixels)."""
    if not isinstance(index, (list, tuple)) or len(index) != 2:
        return None
    scale = display_scale(image_size)
    return region_at(boxes, index[0] / scale, index[1] / scale)


def thumbnails(image: Image.Image, boxes: list, chosen: set[int] | None = None,
               margin: float = 0.2, side: int = 96) -> list[tuple[Image.Image, str]]:
    """A square crop of each region (with some context) and its caption for a Gallery."""
    out = []
    for i, box in enumerate(boxes):
        if box is None:  # a region taken away keeps its place in the gallery
            out.append((Image.new("RGB", (side, side), (245, 245, 245)), f"{i + 1} removed"))
            continue
        x0, y0, x1, y1 = box
        pad_x, pad_y = (x1 - x0) * margin, (y1 - y0) * margin
        crop = image.crop((max(0, x0 - pad_x), max(0, y0 - pad_y),
                           min(image.width, x1 + pad_x), min(image.height, y1 + pad_y))).convert("RGB")
        crop.thumbnail((side, side))
        tile = Image.new("RGB", (side, side), (245, 245, 245))
        tile.paste(crop, ((side - crop.width) // 2, (side - crop.height) // 2))
        is_chosen = chosen is not None and i in chosen
        if is_chosen:
            ImageDraw.Draw(tile).rectangle((0, 0, side - 1, side - 1), outline=CHOSEN, width=5)
        out.append((tile, f"{i + 1} ✓" if is_chosen else f"{i + 1}"))
    return out
