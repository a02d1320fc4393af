"""Regions over REST (docs/formats.md §8, §8.1): click to segment, add a region, take one away."""
from __future__ import annotations

from fastapi import FastAPI, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel, Field, StrictInt

from capscope.annotation import added_regions, removed_regions
from capscope.common.errors import ModelUnavailable
from capscope.db import Store
from capscope.metrics.images import ImageError
from capscope.server.auth import User
from capscope.server.params import ItemId, RegionIndex
from capscope.server.segmenting import MAX_POINTS, SegmentingBusy


class SegmentRequest(BaseModel):
    points: list[tuple[float, float, StrictInt]] = Field(default_factory=list, max_length=MAX_POINTS,
                                                             description="[x, y, 1] positive, [x, y, 0] negative")
    box: tuple[float, float, float, float] | None = None


class RegionRequest(BaseModel):
    mask: dict | None = Field(default=None, description="COCO RLE {size: [h, w], counts: str}")
    box: tuple[float, float, float, float] | None = None
    prompts: SegmentRequest | None = Field(default=None, description="the clicks that made the mask (kept with it)")


def add_region_routes(app: FastAPI) -> None:
    store: Store = app.state.store

    @app.post("/api/items/{item_id}/segment", responses={422: {"description": "no prompt, or a point outside"}})
    def segment(item_id: ItemId, body: SegmentRequest, user: User) -> dict:
        """A mask from clicks (and a box) on the item's image; nothing is stored."""
        image = added_regions.item_image_file(store, user, item_id)
        try:
            return app.state.clicks.segment(image.id, image.path, body.points, body.box, user=user.name,
                                            size=image.size)
        except SegmentingBusy as err:
            raise HTTPException(429, str(err), headers={"Retry-After": "1"}) from None
        except ModelUnavailable as err:
            raise HTTPException(503, str(err)) from None
        except OSError:
            raise HTTPException(404, f"the image of item {item_id} is missing on disk") from None
        except ImageError as err:
            raise HTTPException(422, str(err)) from None

    @app.post("/api/items/{item_id}/regions", status_code=201,
              responses={200: {"description": "an existing region is the same object (IoU >= 0.9): nothing added"}})
    def add_region(item_id: ItemId, body: RegionRequest, user: User, response: Response) -> dict:
        """Append a region (a mask or a box) to the item's image; indexes never change."""
        prompts = None if body.prompts is None else body.prompts.model_dump()
        if prompts is not None:  # checked against the image with the region; naming the segmenter loads nothing
            prompts["segmenter"] = app.state.clicks.name
        region, added = added_regions.add_region(store, user, item_id, mask=body.mask, box=body.box, prompts=prompts)
        if not added:
            response.status_code = 200
        return region

    @app.delete("/api/items/{item_id}/regions/{index}",
                responses={403: {"description": "an annotator may withdraw only a region they added"},
                           422: {"description": "others have labelled it, or it was taken away already"}})
    def remove_region(item_id: ItemId, index: RegionIndex, user: User) -> dict:
        """Take a region away (it keeps its index; votes on it go): an admin removes any, the one
        who added a region withdraws it while no one else has labelled it."""
        return removed_regions.remove_region(store, user, item_id, index)
