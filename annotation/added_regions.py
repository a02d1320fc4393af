"""Regions annotators add to an image (from a click segmenter's mask, or a box).

A new region is appended after the image's last one, so the indexes every
label refers to never change. A region that overlaps an existing one with
IoU >= `DUPLICATE_IOU` is that region: the existing one is given back and
nothing is added. Each added region keeps who added it, when, and the prompts
that made it; every annotator of the image's captions sees it from then on.
One annotator adds at most `MAX_ADDED_REGIONS` to an image, so that no one
can fill an image's `MAX_REGIONS` alone.
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import numpy as np
from sqlalchemy import select

from capscope.annotation.access import item_image
from capscope.annotation.refusals import Invalid
from capscope.annotation.users import UserInfo
from capscope.annotation.item_views import region_view
from capscope.annotation.workflow import record_region_added
from capscope.common.limits import MAX_ADDED_REGIONS, MAX_REGIONS, finite_number
from capscope.db import Image, Region, Store, utcnow
from capscope.metrics.regions import checked_rle_mask, clip_box, mask_to_box, mask_to_rle

DUPLICATE_IOU = 0.9
ADDED_SOURCE = "annotator"


def checked_shape(mask_rle, box, width: int, height: int) -> tuple[np.ndarray | None, tuple]:
    """(mask or None, box) of a region as a client sent it; Invalid says what is wrong."""
    if (mask_rle is None) == (box is None):
        raise Invalid("give a region as either a mask (COCO RLE) or a box [x0, y0, x1, y1]")
    try:
        if mask_rle is not None:
            mask = checked_rle_mask(mask_rle, width, height)
            if not mask.any():
                raise ValueError("the mask is empty")
            return mask, mask_to_box(mask)
        _, inside = checked_prompts(None, box, width, height)  # as a segment call's box: inside the image
        return None, clip_box(inside, width, height)
    except ValueError as err:
        raise Invalid(str(err)) from None


def add_region(store: Store, user: UserInfo, item_id: int, *, mask=None, box=None, prompts: dict | None = None,
               source: str = ADDED_SOURCE, now: datetime | None = None) -> tuple[dict, bool]:
    """(the region, True when it was added; False when an existing region is the same object)."""
    def work(session):
        image = item_image(session, user, item_id)
        # the image's row lock serialises appends to its regions
        session.get(Image, image.id, with_for_update=True)
        new_mask, new_box = checked_shape(mask, box, image.width, image.height)
        kept_prompts = stored_prompts(prompts, image.width, image.height)
        regions = session.scalars(select(Region).where(Region.image_id == image.id).order_by(Region.index)).all()
        live = [r for r in regions if r.removed_at is None]
        same = duplicate_of(live, new_mask, new_box, image.width, image.height)
        if same is not None:
            return region_view(same), False
        if len(regions) >= MAX_REGIONS:
            raise Invalid(f"this image has {len(regions)} regions, the most an image may have")
        if sum(r.added_by == user.name for r in live) >= MAX_ADDED_REGIONS:
            raise Invalid(f"you have added {MAX_ADDED_REGIONS} regions to this image, the most one person may")
        # regions taken back keep their index: adding and undoing cannot use up the image's room
        if sum(r.added_by == user.name for r in regions) >= 2 * MAX_ADDED_REGIONS:
            raise Invalid(f"you have added and taken back {2 * MAX_ADDED_REGIONS} regions on this image, "
                          "the most one person may")
        region = Region(image_id=image.id, index=(regions[-1].index + 1) if regions else 0, source=source,
                        x0=new_box[0], y0=new_box[1], x1=new_box[2], y1=new_box[3],
                        mask_rle=None if new_mask is None else mask_to_rle(new_mask), confidence=None,
                        added_by=user.name, created_at=now or utcnow(), prompts=kept_prompts)
        session.add(region)
        session.flush()
        record_region_added(session, user, item_id, region.index, region.created_at)
        return region_view(region), True

    return store.run_write(work)


def duplicate_of(regions: list[Region], mask: np.ndarray | None, box, width: int, height: int) -> Region | None:
    """The first region with IoU >= DUPLICATE_IOU with the new one (masks compared as
    masks, a region without one as its box), computed on COCO RLE without decoding."""
    if not regions:
        return None
    from pycocotools import mask as coco_mask

    def as_rle(rle: dict | None, region_box) -> dict:
        if rle is not None:
            return {"size": rle["size"], "counts": rle["counts"].encode("ascii")}
        x0, y0, x1, y1 = region_box
        return coco_mask.frPyObjects(np.array([[x0, y0, x1 - x0, y1 - y0]], dtype=np.float64), height, width)[0]

    new = as_rle(None if mask is None else mask_to_rle(mask), box)
    existing = [as_rle(r.mask_rle, r.box) for r in regions]
    overlaps = np.asarray(coco_mask.iou([new], existing, [0] * len(existing))).reshape(-1)
    best = int(np.argmax(overlaps))
    return regions[best] if overlaps[best] >= DUPLICATE_IOU else None


class ImageFile(NamedTuple):
    id: int
    path: str
    size: tuple[int, int]  # (width, height) as stored: prompts are checked against it before any embedding


def item_image_file(store: Store, user: UserInfo, item_id: int) -> ImageFile:
    """The image of an item given to this user (admins: any item's)."""
    with store.read() as session:
        image = item_image(session, user, item_id)
        return ImageFile(image.id, image.path, (image.width, image.height))


MAX_POINTS = 64  # clicks in one prompt


def checked_prompts(points, box, width: int, height: int) -> tuple[list[tuple[float, float, int]], tuple | None]:
    """Points [[x, y, 1|0], ...] and box [x0, y0, x1, y1] inside a width x height image, or Invalid."""
    if points is not None and not isinstance(points, (list, tuple)):
        raise Invalid("points are a list of [x, y, 1|0]")
    points = list(points or [])
    if not points and box is None:
        raise Invalid("give at least one point [x, y, 1|0] or a box [x0, y0, x1, y1]")
    if len(points) > MAX_POINTS:
        raise Invalid(f"at most {MAX_POINTS} points in one prompt")
    checked = []
    for point in points:
        if not isinstance(point, (list, tuple)) or len(point) != 3 or type(point[2]) is not int \
                or point[2] not in (0, 1) or not all(map(finite_number, point[:2])):
            raise Invalid("a point is [x, y, 1] (positive) or [x, y, 0] (negative)")
        x, y = float(point[0]), float(point[1])
        if not (0 <= x < width and 0 <= y < height):
            raise Invalid(f"point ({x:g}, {y:g}) is outside the {width} x {height} image")
        checked.append((x, y, int(point[2])))
    if box is not None:
        if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(map(finite_number, box)):
            raise Invalid("a box is four finite numbers [x0, y0, x1, y1]")
        x0, y0, x1, y1 = (float(v) for v in box)
        if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
            raise Invalid(f"box must satisfy 0 <= x0 < x1 <= {width} and 0 <= y0 < y1 <= {height}")
        box = (x0, y0, x1, y1)
    return checked, box


def stored_prompts(prompts: dict | None, width: int, height: int) -> dict | None:
    """The clicks (and box) that made a region as they are kept with it: checked as a segment call's
    prompts are (finite numbers inside the image), the segmenter's name at most 200 characters."""
    if not prompts or (not prompts.get("points") and prompts.get("box") is None):
        return None
    points, box = checked_prompts(prompts.get("points"), prompts.get("box"), width, height)
    segmenter = prompts.get("segmenter")
    return {"points": [list(p) for p in points], "box": None if box is None else list(box),
            "segmenter": segmenter[:200] if isinstance(segmenter, str) else None}
