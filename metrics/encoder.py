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

Every pass through a tower has a fixed shape (tower_passes.py), so a pair's
features, and its scores, do not depend on what it was batched with. The image
cache and its keys are in image_cache.py, region crops in region_crops.py.
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

import torch
from PIL import Image

from .constants import PRECISIONS, check_precision
from .image_cache import ImageFeatures, ImageHash, encode_cached, regions_key, split_features
from .loading import cache_dir
from .preprocess import Pixels
from .region_crops import CropStyle, crop_region
from .runtime import resolve_runtime, text_tower_graph
from capscope.common.lru import LRUCache
from .regions import Region
from .text import EOT_ID, SOT_ID
from .tower_passes import (IMAGE_ROWS, PIECE_ROWS, SIDE_BY_SIDE_PASSES, bucket_groups, bucket_of, filled_to,
                           padded_ids, pass_rows, text_rows)

TEXT_CACHE_SIZE = 4096  # texts' features kept (2 KB each at 512 dimensions)
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
