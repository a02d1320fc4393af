"""CLIP features, fast.

`ClipBackbone` wraps one open_clip model and encodes
- token-id sequences with the text transformer run only over a length close
  to their own (positional embedding and causal mask cut to it). With a causal
  mask the features at the `<eot>` position do not depend on what follows, so
  this equals the full 77-token result;
- BPE pieces, each as `<sot> piece <eot>` (InfoMetIC's individual token
  encoding), each distinct piece once per call and remembered across calls;
- images and region crops in batches, cached per image so that a new caption on
  a known image re-encodes only the text.

Every pass through a tower has a fixed shape: texts are padded to the bucket of
their own length (`TEXT_LENGTHS`) and run `text_rows` to a pass, images
`IMAGE_ROWS` to a pass, the last pass filled up with copies. Float results of a
matrix product depend on its shape (measured on this CPU: one ViT-B-32 image
encoded alone or among 5 differs by 2.6e-6), never on the other rows of the
same shape nor on the thread count (both measured exactly equal), so a pair's
features, and its scores, do not depend on what it was batched with.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch
from PIL import Image

from .constants import PRECISIONS, check_precision
from .loading import cache_dir
from .preprocess import Pixels, pool
from .runtime import resolve_runtime, text_tower_graph
from capscope.common.lru import LRUCache
from .regions import Region
from .text import EOT_ID, SOT_ID

TEXT_LENGTHS = (4, 8, 16, 24, 32, 48, 77)  # a sequence runs padded to the first that holds it
# rows per pass, by device: a GPU needs wide passes to be busy; on a CPU a pass of a long text
# costs little more than its share of a batched one, so long texts run one to a pass
TEXT_ROWS = {"cpu": 1, "cuda": 32}
# and short ones fill a pass up to this many tokens (a 4-token bucket 16 rows, 8 tokens 8, 16
# tokens 4): a short eager pass costs its fixed overhead more than its tokens (BENCHMARKS.md run 9).
# On ONNX Runtime a pass costs about 7 ms plus 0.75 ms a token row (one thread), so a pass filled
# with copies costs a lone re-score more than it saves a batch: 16 tokens (runtime.py)
TEXT_TOKENS = {"cpu": 64, "onnx": 16}
SIDE_BY_SIDE_PASSES = 4  # at most this many text passes of a lone re-score run two at a time
TEXT_CACHE_SIZE = 4096  # texts' features kept (2 KB each at 512 dimensions)
PIECE_ROWS = {"eager": 64, "onnx": 8}  # `<sot> piece <eot>` sequences per pass: 4 tokens each, cheap in bulk
IMAGE_ROWS = {"cpu": 8, "cuda": 32}  # on an AMD EPYC CPU, ViT-B-32: 131 ms/image alone, 75 at 4, 66 at 8
# The towers' autocast dtype by precision. Their outputs are cast back to float32, so what reads
# them (the InfoMetIC head, HICE-S's and CLIP-S's cosines, CLIP4DM's gradients) stays in float32.
AUTOCAST_DTYPES = dict(zip(PRECISIONS, (None, torch.bfloat16, torch.float16)))


@contextlib.contextmanager
def ieee_float32():
    """float32 that is float32 on a GPU: PyTorch lets cuDNN run convolutions
    (CLIP's patch embedding) in TF32, with a 10-bit mantissa, by default. On an
    H100 that moved the demo model's InfoCLIP score by 2e-2 from the CPU's."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def pass_rows(table: dict[str, int], device: torch.device) -> int:
    return table.get(device.type, table["cpu"])


def text_rows(device: torch.device, length: int, runtime: str = "eager") -> int:
    """Rows per pass of texts padded to `length` tokens: fixed per device,
    runtime and bucket, so that a text's features never depend on what it is
    batched with."""
    rows = pass_rows(TEXT_ROWS, device)
    budget = TEXT_TOKENS.get("onnx" if runtime == "onnx" else device.type)
    return max(rows, budget // length) if budget else rows


def filled_to(items: list, size: int) -> list:
    """`items` made `size` long with copies of the first: a pass of fixed shape
    (the caller keeps the first `len(items)` results)."""
    return items + [items[0]] * (size - len(items))


def padded_ids(sequences: list[list[int]], length: int) -> torch.Tensor:
    """Token-id sequences as one zero-padded len x `length` tensor."""
    ids = torch.zeros(len(sequences), length, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
    return ids


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


@dataclass(frozen=True)
class CropStyle:
    """How a region becomes a CLIP input. The default is the plain box crop;
    capscope's demo CLIP was trained on crops grown by a margin and pasted at
    true scale on a fixed canvas (so that size stays visible), and must be fed
    the same way."""

    margin: float = 0.0
    canvas: int | None = None


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
    change each other's features (module docstring), so this changes no number
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


class ClipBackbone:
    """One open_clip model with its tokenizer, preprocessing and caches."""

    def __init__(self, model, tokenizer, preprocess, name: str, device: torch.device, cache_size: int = 512,
                 crop: CropStyle = CropStyle(), precision: str = "fp32", text_cache_size: int = TEXT_CACHE_SIZE,
                 runtime: str = "eager"):
        self.model = model.eval().to(device)
        self.crop = crop
        self.precision = check_precision(precision)
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.name = name
        self.device = device
        self._tower = model.text if hasattr(model, "text") else model
        self._images = LRUCache(cache_size)
        self._texts = LRUCache(text_cache_size)  # by (rows a pass, ids): the pass's whole shape
        self._pieces: dict[int, torch.Tensor] = {}  # bounded by the BPE vocabulary
        self._bpe = LRUCache(text_cache_size)  # text -> its BPE ids: a text is read for its length, then encoded
        self.runtime = resolve_runtime(runtime, device, self.precision)
        self._onnx = text_tower_graph(self._tower, cache_dir() / "onnx") if self.runtime == "onnx" else None
        self._passes: ThreadPoolExecutor | None = None

    @classmethod
    def from_model(cls, model, model_name: str, name: str, device: torch.device, crop: CropStyle | None = None,
                   precision: str = "fp32", runtime: str = "eager"):
        import open_clip

        tokenizer = open_clip.get_tokenizer(model_name)
        cfg = model.visual.preprocess_cfg if hasattr(model.visual, "preprocess_cfg") else {}
        preprocess = open_clip.image_transform(
            model.visual.image_size, is_train=False,
            mean=cfg.get("mean"), std=cfg.get("std"),
        )
        return cls(model, tokenizer, preprocess, name, device, crop=crop or CropStyle(), precision=precision,
                   runtime=runtime)

    @property
    def first_use_costs(self) -> dict:
        """What the ONNX text tower's graph cost at first use: `export_s` (None:
        found in capscope's cache) and `session_s`; empty when eager."""
        if self._onnx is None:
            return {}
        return {"export_s": self._onnx.export_seconds, "session_s": self._onnx.load_seconds}

    @property
    def text_tower(self):
        """The open_clip module holding the text transformer (the model itself for
        `CLIP`, `model.text` for `CustomTextCLIP`)."""
        return self._tower

    @property
    def dim(self) -> int:
        proj = self._tower.text_projection
        return proj.out_features if isinstance(proj, torch.nn.Linear) else proj.shape[1]

    @property
    def context(self) -> int:
        """How many token ids the text tower reads (77 for CLIP), <sot> and <eot> included."""
        return int(self._tower.positional_embedding.shape[0])

    def reads_whole(self, text: str, room: int | None = None) -> bool:
        """Whether `text`'s BPE pieces with <sot> and <eot> fit in `room` ids
        (default the context), i.e. the tower reads it uncut. Only for a BPE
        tokenizer with `encode` (`reads_length`)."""
        return len(self.bpe(text)) + 2 <= (room or self.context)

    def bpe(self, text: str) -> tuple[int, ...]:
        """`text`'s BPE ids (the tokenizer's `encode`), remembered: the windows
        ask whether a caption fits, then its tower pass needs the same ids."""
        try:
            return self._bpe[text]
        except KeyError:
            ids = self._bpe[text] = tuple(self.tokenizer.encode(text))
            return ids

    @property
    def reads_length(self) -> bool:
        """Whether `reads_whole` can tell (a tokenizer with `encode`, as open_clip's BPE one)."""
        return callable(getattr(self.tokenizer, "encode", None))

    @property
    def logit_scale(self) -> float:
        return float(self.model.logit_scale.detach().exp())

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The towers' autocast dtype (None: float32); rows record it."""
        return AUTOCAST_DTYPES[self.precision]

    def running(self):
        """The context the towers run in: inference mode in fp32; else autocast
        to the precision under no_grad. Not inference mode there: autocast keeps
        its cast weights only for tensors that can require grad, so in inference
        mode it re-cast every weight in every pass, which made bf16 five times
        slower than fp32 on this CPU (ViT-B-32 images: 2.8 img/s against 12.0).
        Callers enter it once around all their passes, so each weight is cast
        once per call."""
        if self.autocast_dtype is None:
            if self.device.type != "cuda":
                return torch.inference_mode()
            stack = contextlib.ExitStack()
            stack.enter_context(torch.inference_mode())
            stack.enter_context(ieee_float32())
            return stack
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch.autocast(self.device.type, dtype=self.autocast_dtype))
        return stack

    # ------------------------------------------------------------ text

    def encode_ids(self, sequences: list[list[int]], rows: int | None = None) -> torch.Tensor:
        """Features of token-id sequences (each starting with <sot> and holding
        an <eot>), read at the argmax id as CLIP does. Each runs padded to the
        bucket of its own length, `rows` (default `text_rows`) of a bucket to a
        pass (always the same number for the same kind of sequence), so a
        30-token caption does not make its 6-token phrases pay for 30 and no
        sequence's features depend on its neighbours. That also makes them
        worth remembering: a sequence met before (a phrase shared by several
        captions of an image, the unchanged phrases of an edited caption) is
        not encoded again, and comes back with exactly the floats it had.
        Returns float32 N x D in input order."""
        if not sequences:
            return torch.zeros(0, self.dim)
        context = self.context
        keys = [(rows or text_rows(self.device, bucket_of(len(seq), context), self.runtime), tuple(seq))
                for seq in sequences]

        def fresh(todo: list[int]) -> list[torch.Tensor]:
            return self._encode_fresh([sequences[i] for i in todo], rows)

        return torch.stack(self._texts.get_many(keys, fresh))

    def _encode_fresh(self, sequences: list[list[int]], rows: int | None) -> list[torch.Tensor]:
        """`encode_ids` without the cache: every sequence through the tower.
        Each row is its own tensor, so that a cached row does not hold its pass."""
        context = self.context
        passes = []
        for length, group in bucket_groups([len(s) for s in sequences], context).items():
            size = rows or text_rows(self.device, length, self.runtime)
            for start in range(0, len(group), size):
                chunk = group[start : start + size]
                passes.append((chunk, padded_ids([sequences[i] for i in filled_to(chunk, size)], length)))
        with self.running():
            if self._side_by_side(len(passes)):
                found = list(self._pass_threads().map(self._encode_apart, [ids for _, ids in passes]))
            else:
                found = [self._encode_group(ids) for _, ids in passes]
        out = [None] * len(sequences)  # in the caller's grad mode, as callers expect
        for (chunk, _), feats in zip(passes, found):
            for i, feat in zip(chunk, feats[: len(chunk)]):
                out[i] = feat.clone()
        return out

    def _side_by_side(self, passes: int) -> bool:
        """Whether a few text passes run two at a time: on ONNX Runtime when the
        caller holds one intra-op thread (a lone re-score: a caption and its new
        phrases, 2 passes of about 20 ms each) and the machine has a second core.
        Each pass keeps its shape and its one thread, so its numbers do not change."""
        return (self._onnx is not None and 1 < passes <= SIDE_BY_SIDE_PASSES and torch.get_num_threads() == 1
                and (os.cpu_count() or 1) > 1 and self._onnx.ready(1))  # a first pass exports on this thread

    def _pass_threads(self) -> ThreadPoolExecutor:
        if self._passes is None:
            self._passes = ThreadPoolExecutor(max_workers=2, thread_name_prefix="capscope-text-pass")
        return self._passes

    def _encode_apart(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # grad mode is per thread
            return self._encode_group(ids)

    def _encode_group(self, ids: torch.Tensor) -> torch.Tensor:
        ids, length, tower = ids.to(self.device), ids.shape[1], self._tower
        x = tower.token_embedding(ids)
        x = x + tower.positional_embedding[:length].to(x.dtype)
        mask = tower.attn_mask[:length, :length] if tower.attn_mask is not None else None
        if self._onnx is not None and mask is not None:
            return self._onnx(x, mask, ids.argmax(dim=-1))
        if getattr(tower.transformer, "batch_first", True):
            x = tower.transformer(x, attn_mask=mask)
        else:
            x = tower.transformer(x.permute(1, 0, 2), attn_mask=mask).permute(1, 0, 2)
        # the last norm and the projection in float32 at any precision: one row each, cheap, and a
        # bf16 projection alone moved the demo CLIP's CLIP-S by up to 5e-3
        with torch.autocast(self.device.type, enabled=False):
            x = tower.ln_final(x.float())
            x = x[torch.arange(x.shape[0], device=x.device), ids.argmax(dim=-1)]
            proj = tower.text_projection
            x = proj(x) if isinstance(proj, torch.nn.Linear) else x @ proj
        return x.float().cpu()

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Global features of whole texts (open_clip tokenization, cut to the context)."""
        tok = self.tokenizer
        if self.reads_length and getattr(tok, "reduction_fn", None) is None and hasattr(tok, "eot_token_id"):
            return self.encode_ids([self.text_ids(t) for t in texts])
        tokens = tok(texts)
        lengths = (tokens.argmax(dim=-1) + 1).tolist()
        return self.encode_ids([tokens[i, :n].tolist() for i, n in enumerate(lengths)])

    def text_ids(self, text: str) -> list[int]:
        """`<sot> pieces <eot>` of a text, cut to the context with `<eot>` last, as
        open_clip's BPE tokenizer makes them (its pieces remembered: `bpe`)."""
        tok = self.tokenizer
        ids = [tok.sot_token_id, *self.bpe(text), tok.eot_token_id]
        if len(ids) > self.context:
            ids = ids[: self.context]
            ids[-1] = tok.eot_token_id
        return ids

    def encode_pieces(self, ids) -> torch.Tensor:
        """Feature of each id encoded alone as `<sot> id <eot>`; N x D in input order."""
        ids = [int(i) for i in ids]
        missing = sorted({i for i in ids if i not in self._pieces})
        if missing:
            feats = self._encode_fresh([[SOT_ID, i, EOT_ID] for i in missing], PIECE_ROWS[self.runtime])  # not in _texts
            self._pieces.update(zip(missing, feats))
        if not ids:
            return torch.zeros(0, self.dim)
        return torch.stack([self._pieces[i] for i in ids])

    # ------------------------------------------------------------ images

    @property
    def pixels(self) -> Pixels:
        """`preprocess` as `metrics.preprocess.Pixels` runs it (made again if `preprocess` is replaced)."""
        if getattr(self, "_pixels", None) is None or self._pixels.preprocess is not self.preprocess:
            self._pixels = Pixels(self.preprocess)
        return self._pixels

    def encode_images(self, images: list[Image.Image]) -> torch.Tensor:
        """Features of images, `IMAGE_ROWS` to a pass (the last filled up with
        copies of its first image); float32 N x D in input order. The passes'
        pixels are open_clip's preprocessing bit for bit (`Pixels`)."""
        rows = pass_rows(IMAGE_ROWS, self.device)
        out = []
        with self.running():
            for batch, n in self.pixels.passes(images, rows, self.device):  # already on self.device
                out.append(self.model.encode_image(batch).float().cpu()[:n])
        return torch.cat(out) if out else torch.zeros(0, self.dim)

    def image_features(self, images: list[Image.Image], regions: list[list[Region]],
                       ahead: Iterable[tuple[list[Region], ImageHash]] = (),
                       hashes: list[str] | None = None) -> list[ImageFeatures]:
        """Global and region-crop features of many images; crops of all
        images go through CLIP together. Cached per (image, regions); `hashes`,
        the images' `image_key`s where the caller made them already. The last
        pass's spare rows take images of `ahead` (rows scored next: their
        regions and `ImageHash`), cached for when they come, where copies would
        fill them."""
        key = lambda image_hash, rs: f"{image_hash}:{regions_key(rs)}:{self.crop}"  # noqa: E731
        return encode_cached(self._images, key, self._encode, images, regions, ahead,
                             pass_rows(IMAGE_ROWS, self.device), hashes)

    def _encode(self, images: list[Image.Image], regions: list[list[Region]]) -> list[ImageFeatures]:
        crops = []
        for image, rs in zip(images, regions):
            crops.append(image)
            crops.extend(crop_region(image, region, self.crop) for region in rs)
        return split_features(images, regions, self.encode_images(crops))

    def clear_caches(self) -> None:
        """Forget every cached image, text and piece feature (benchmarks, one-off encodings)."""
        self._images.clear()
        self.forget_texts()
        self._pieces.clear()

    def forget_texts(self) -> None:
        """Forget the cached text features only (pieces and images stay)."""
        self._texts.clear()


def text_backbone(metric) -> ClipBackbone | None:
    """The CLIP a metric encodes text with (HICE-S wraps its image side around it as `clip`)."""
    return getattr(metric, "clip", None) or getattr(metric, "backbone", None)


def bucket_groups(lengths: list[int], context: int = 77) -> dict[int, list[int]]:
    """Indices by padded length: the first of `TEXT_LENGTHS` (cut to the
    context) that holds each sequence, which depends on that sequence alone.
    Padding makes a row cost at most 1.6 times its own length past 8 tokens;
    few buckets mean few passes, which cost more than their padding here."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(bucket_of(n, context), []).append(i)
    return dict(sorted(groups.items()))


def bucket_of(length: int, context: int = 77) -> int:
    """The padded length a sequence of `length` ids runs at."""
    return next(b for b in sorted({min(b, context) for b in TEXT_LENGTHS} | {context}) if b >= length)


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
