"""An image's CLIP features (`ImageFeatures`), the keys they are cached by
(`image_key`, `ImageHash`, `regions_key`) and the cache that encodes only what
it lacks (`encode_cached`), filling a last pass's spare rows with images to come."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable

import torch
from PIL import Image

from .preprocess import pool
from capscope.common.lru import LRUCache
from .regions import Region


@dataclass
class ImageFeatures:
    """One image as a CLIP model sees it (raw, unnormalised embeddings)."""

    size: tuple[int, int]                 # W, H
    regions: list[Region]
    global_feat: torch.Tensor             # D
    region_feats: torch.Tensor            # n x D
    extra: dict = field(default_factory=dict)  # per-metric extras (masked-region features, ...)

    @property
    def boxes(self) -> torch.Tensor:
        return torch.tensor([r.box for r in self.regions], dtype=torch.float32).reshape(-1, 4)


def image_key(image: Image.Image) -> str:
    """An in-memory cache key. SHA-256, as this CPU computes it in hardware: 84 us for a
    224 px image against blake2b's 164."""
    digest = hashlib.sha256(image.tobytes())
    digest.update(f"{image.size}{image.mode}".encode())
    return digest.hexdigest()[:32]


class ImageHash:
    """An image's `image_key`, made when first asked and then kept, so that every
    cache that asks of one image (the region proposals', each metric's image
    features') shares one hash. Hashing on a thread beside the caption parsing
    was slower (CLIP-S's host ceiling 2,440 against 2,550 pairs/s): the GIL
    passed back and forth. A batch's images are hashed together by `image_keys`."""

    def __init__(self, image: Image.Image):
        self.image, self._key = image, None

    def __call__(self) -> str:
        if self._key is None:
            self._key = image_key(self.image)
        return self._key

    @property
    def made(self) -> bool:
        """Whether the key is made already."""
        return self._key is not None


def image_keys(hashes: list[ImageHash]) -> list[str]:
    """Each `ImageHash`'s key; those not yet made are hashed on the image
    threads, side by side (SHA-256 lets go of the GIL): CLIP-S's host ceiling
    2,540 -> 2,800 pairs/s on 2 cores."""
    todo = [h for h in hashes if not h.made]
    if len(todo) > 1:
        list(pool().map(ImageHash.__call__, todo))
    return [h() for h in hashes]


def regions_key(regions: list[Region]) -> str:
    return hashlib.blake2b(repr([r.box for r in regions]).encode(), digest_size=8).hexdigest()


def encode_cached(cache: LRUCache, key_of, encode, images: list[Image.Image], regions: list[list[Region]],
                  ahead: Iterable[tuple[list[Region], ImageHash]], rows: int,
                  hashes: list[str] | None = None) -> list[ImageFeatures]:
    """`encode(images, regions)` for the pairs `cache` lacks (each distinct key
    once), an image and its regions taking 1 + len(regions) rows of passes
    `rows` wide; `key_of(image_key, regions)` names a pair in `cache`, and
    `hashes` are the images' `image_key`s where the caller has them. Where the
    last pass would be filled up with copies, (regions, image hash) pairs of
    `ahead` not yet cached that fit take the spare rows and go into the cache: a pass's rows never
    change each other's features (tower_passes.py), so this changes no number
    and saves the passes those pairs would cost later."""
    hashes = hashes if hashes is not None else [image_key(image) for image in images]
    keys = [key_of(h, rs) for h, rs in zip(hashes, regions)]

    def compute(todo: list[int]) -> list[ImageFeatures]:
        todo_images, todo_regions = [images[i] for i in todo], [regions[i] for i in todo]
        fill = spare_fill(sum(1 + len(rs) for rs in todo_regions), rows, ahead, key_of, cache, set(keys))
        feats = encode(todo_images + [h.image for _, _, h in fill], todo_regions + [rs for _, rs, _ in fill])
        for (key, _, _), features in zip(fill, feats[len(todo) :]):
            cache[key] = features
        return feats[: len(todo)]

    return cache.get_many(keys, compute)


def split_features(images: list[Image.Image], regions: list[list[Region]], feats: torch.Tensor,
                   extra: dict | None = None) -> list[ImageFeatures]:
    """One ImageFeatures per image from a stack of rows: each image's own, then
    one per region; each with its own copy of `extra`."""
    parts = torch.split(feats, [1 + len(rs) for rs in regions])
    return [ImageFeatures(image.size, rs, f[0], f[1:], dict(extra or {})) for image, rs, f in zip(images, regions, parts)]


def spare_fill(used: int, rows: int, ahead: Iterable[tuple[list[Region], ImageHash]], key_of, cache: LRUCache,
               taken: set) -> list[tuple[str, list[Region], ImageHash]]:
    """(key, regions, image hash) of `ahead`, in order, that fit in the spare
    rows of the last `rows`-wide pass after `used` rows, skipping what `cache`
    or `taken` holds; `ahead` is read (and hashed) only while rows are spare."""
    spare, out = -used % rows, []
    if not used or not spare:
        return out
    for rs, image_hash in ahead:
        if 1 + len(rs) > spare:
            continue
        key = key_of(image_hash(), rs)
        if key not in cache and key not in taken:
            taken.add(key)
            out.append((key, rs, image_hash))
            spare -= 1 + len(rs)
            if not spare:
                break
    return out
