"""CLIP's image preprocessing with open_clip's numbers exactly, at a fraction
of the host's time (issue 59: a host that keeps the GPU fed).

`ClipBackbone.encode_images` ran open_clip's eval transform (Resize,
CenterCrop, RGB, ToTensor, Normalize) one image at a time, then stacked the
results: per image four fresh full-size float copies (ToTensor's contiguous and
float tensors, Normalize's clone, the stack) and two PIL copies of pixels that
did not change (the RGB conversion of an RGB image, the centre crop of an image
already the crop's size). Fresh memory is what it cost: on the 2-core test
machine touching a new 600 KB buffer takes about 200 us, filling one already
touched 11 us. `Pixels` gives the same tensors:

- the PIL stages run as the transform's own objects, leaving out only those
  that would hand back a copy of the same pixels (a centre crop to the image's
  own size, a conversion to the mode it is in); where an image is resized, on
  worker threads (Pillow lets go of the GIL while it resamples);
- ToTensor and Normalize become in-place NumPy arithmetic on reused buffers:
  the same float operations in the same order (x / 255, then - mean, then
  / std), each element on its own, so every value is bit-identical to the
  transform's (tests/metrics/test_host_ceiling_preprocess.py), and off
  PyTorch's intra-op threads (on a busy machine one waiting thread stalls
  every small operation: common/threads.py);
- on a GPU only the uint8 pixels travel (a quarter of the bytes), and a table
  of 256 values per channel, made by running the transform's own ToTensor and
  Normalize over every byte value, maps them there: CUDA divides by a scalar
  as a multiplication by its reciprocal, so arithmetic on the device would move
  the last bit, the table does not;
- on a GPU, `passes` prepares the next pass on a thread while the caller runs
  this one through the tower.

A transform it does not recognise (anything after ToTensor but Normalize, an
image that is not 8-bit RGB by the time it reaches ToTensor) runs through the
transform itself, image by image, with the same results as before.

Wiring (encoder.py): `self.pixels = Pixels(preprocess)` in `ClipBackbone.__init__`
and, in `encode_images`,

    for batch, n in self.pixels.passes(images, rows, self.device):
        out.append(self.model.encode_image(batch).float().cpu()[:n])
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator

import numpy as np
import torch
from PIL import Image

WORKERS = min(8, os.cpu_count() or 1)  # threads that resize images (Pillow releases the GIL there)
SPARE_BUFFERS = 4  # pass buffers kept for later passes and calls (fresh memory is what preprocessing cost)
NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}
# the stages before ToTensor it runs itself (each deterministic, so threads cannot change what they give)
PIL_STAGES = {"Resize", "CenterCrop", "MaybeConvertMode", "ResizeKeepRatio", "CenterCropOrPad", "_convert_to_rgb"}

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The process's image threads, made at first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="capscope-pixels")
        return _pool


class Pixels:
    """Images into the input batches of one CLIP image tower, as
    `torch.stack(filled_to([preprocess(im.convert("RGB")) for im in images], rows))`
    gives them, bit for bit. Safe to share between threads."""

    def __init__(self, preprocess, workers: int = WORKERS):
        self.preprocess = preprocess
        self.workers = workers
        self.pil_stages, self.to_tensor, self.normalize = split(preprocess)
        self.dtype = NUMPY_FLOATS.get(torch.get_default_dtype())  # ToTensor's float type, and so Normalize's
        if self.dtype is None:
            self.pil_stages = None
        elif self.normalize is not None:  # as F.normalize makes them: the tensor's dtype, C x 1 x 1
            self.mean = np.asarray(self.normalize.mean, dtype=self.dtype).reshape(-1, 1, 1)
            self.std = np.asarray(self.normalize.std, dtype=self.dtype).reshape(-1, 1, 1)
        self._spare: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._tables: dict[str, torch.Tensor] = {}
        self._ahead: ThreadPoolExecutor | None = None

    @property
    def fast(self) -> bool:
        """Whether the transform was recognised (else it runs image by image)."""
        return self.pil_stages is not None

    def batch(self, images: list[Image.Image], rows: int | None = None, device=None) -> torch.Tensor:
        """The `images` preprocessed as one rows x C x H x W float tensor on
        `device` (default the CPU), filled up to `rows` with copies of the
        first; the tensor is the caller's."""
        device = _device(device)
        return self.send(self._host(images, rows or len(images), device, spare=False), device)

    def passes(self, images: list[Image.Image], rows: int, device=None) -> Iterator[tuple[torch.Tensor, int]]:
        """(batch, n) for each `rows` images in turn: `batch` as `batch()` gives
        it, its first `n` rows the images'. A batch is the caller's until it
        asks for the next (its memory serves a later pass). On a GPU the next
        pass is prepared on a thread while the caller runs this one; on the
        CPU the tower has every core, and the hand-off only cost time (CLIP-S's
        host ceiling, 2 busy cores, one torch thread: 1,812 pairs/s without it, 1,744 with)."""
        device = _device(device)
        chunks = [images[i : i + rows] for i in range(0, len(images), rows)]
        if len(chunks) <= 1 or device.type == "cpu":  # a CPU's tower has the cores: nothing to overlap
            for chunk in chunks:
                host = self._host(chunk, rows, device)
                yield self.send(host, device), len(chunk)
                self.recycle(host)  # the caller asked for more: it is done with the batch
            return
        ahead = self._thread()
        pending: Future | None = ahead.submit(self._host, chunks[0], rows, device)
        try:
            for k, chunk in enumerate(chunks):
                host = pending.result()
                pending = ahead.submit(self._host, chunks[k + 1], rows, device) if k + 1 < len(chunks) else None
                yield self.send(host, device), len(chunk)  # its host buffer is free once on the device
        finally:
            if pending is not None:
                pending.cancel()

    # ------------------------------------------------------------ host side

    def _host(self, images: list[Image.Image], rows: int, device: torch.device, spare: bool = True):
        """The host's part of a pass: for the CPU the finished rows x C x H x W
        floats, for a GPU the rows x H x W x 3 bytes (NumPy arrays), or the
        transform's own tensors, stacked, where it was not recognised."""
        staged = None
        if self.fast:
            busy = self.workers > 1 and len(images) > 1 and any(self._works_on(im) for im in images)
            staged = list(pool().map(self._pil, images)) if busy else [self._pil(im) for im in images]
            if not all(isinstance(im, Image.Image) and im.mode == "RGB" for im in staged) \
                    or len({im.size for im in staged}) != 1:
                staged = None  # not bytes ToTensor reads as such, or sizes torch.stack would refuse
        if staged is None:
            tensors = [self.preprocess(as_rgb(im)) for im in images]
            return torch.stack(tensors + [tensors[0]] * (rows - len(tensors)))
        width, height = staged[0].size
        if device.type == "cuda":
            pixels = self._buffer((rows, height, width, 3), np.uint8, spare)
            for row, im in enumerate(staged):
                pixels[row] = np.asarray(im)
            pixels[len(staged) :] = pixels[0]
            return pixels
        out = self._buffer((rows, 3, height, width), self.dtype, spare)
        for row, im in enumerate(staged):  # on threads the GIL's hand-offs cost more than they won here
            self._floats(np.asarray(im), out[row])
        out[len(staged) :] = out[0]
        return out

    def _floats(self, pixels: np.ndarray, out: np.ndarray) -> None:
        """ToTensor and Normalize of H x W x 3 bytes into `out` (3 x H x W), as
        they compute: x.to(float).div(255), then .sub_(mean).div_(std). Each
        an IEEE operation on one element, so NumPy's are PyTorch's to the bit."""
        np.copyto(out, pixels.transpose(2, 0, 1))  # bytes to floats: exact
        np.divide(out, self.dtype(255), out=out)
        if self.normalize is not None:
            np.subtract(out, self.mean, out=out)
            np.divide(out, self.std, out=out)

    def _pil(self, image: Image.Image) -> Image.Image:
        image = as_rgb(image)
        for stage in self.pil_stages:
            if not leaves_alone(stage, image):
                image = stage(image)
        return image

    def _works_on(self, image: Image.Image) -> bool:
        """Whether a PIL stage does real work on `image` (worth a thread)."""
        return image.mode != "RGB" or not all(leaves_alone(s, image) for s in self.pil_stages)

    def _buffer(self, shape: tuple, dtype, spare: bool = True) -> np.ndarray:
        if spare:
            with self._lock:
                for i, array in enumerate(self._spare):
                    if array.shape == shape and array.dtype == dtype:
                        return self._spare.pop(i)
        return np.empty(shape, dtype)

    def recycle(self, array) -> None:
        """A pass's host buffer back to the spares, once nothing reads it."""
        if isinstance(array, np.ndarray):
            with self._lock:
                if len(self._spare) < SPARE_BUFFERS:
                    self._spare.append(array)

    def _thread(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._ahead is None:
                self._ahead = ThreadPoolExecutor(1, thread_name_prefix="capscope-next-pass")
            return self._ahead

    # ------------------------------------------------------------ tensors

    def send(self, host, device: torch.device) -> torch.Tensor:
        """A pass's host part as the tower's input on `device`."""
        if isinstance(host, torch.Tensor):  # the transform's own tensors
            return host.to(device)
        if device.type == "cpu":
            return torch.from_numpy(host)  # the buffer itself: `passes` takes it back at the next pass
        on_device = torch.from_numpy(host).to(device)  # a blocking copy: the host buffer is free after it
        self.recycle(host)
        if device.type != "cuda":
            return on_device
        ids = on_device.permute(0, 3, 1, 2).long()
        ids += torch.arange(3, device=device).view(1, 3, 1, 1) * 256
        return self._table(device).flatten()[ids]

    def _table(self, device: torch.device) -> torch.Tensor:
        """3 x 256 on `device`: the transform's own ToTensor and Normalize of
        every byte value (CUDA divides by a scalar as a product with its
        reciprocal: arithmetic there would move the last bit, a table does not)."""
        key = str(device)
        if key not in self._tables:
            values = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)  # 1 x 256 x 3
            tensor = self.to_tensor(Image.fromarray(values))  # an RGB image
            if self.normalize is not None:
                tensor = self.normalize(tensor)
            self._tables[key] = tensor.reshape(3, 256).to(device)
        return self._tables[key]


def split(preprocess):
    """(PIL stages, ToTensor, Normalize or None) of a torchvision `Compose` of
    known PIL stages, one ToTensor and at most a Normalize after it; (None,
    None, None) for any other transform."""
    from torchvision import transforms as T

    stages = list(preprocess.transforms) if isinstance(preprocess, T.Compose) else []
    at = [i for i, s in enumerate(stages) if isinstance(s, T.ToTensor)]
    if len(at) != 1 or not all(_name(s) in PIL_STAGES for s in stages[: at[0]]):
        return None, None, None
    after = stages[at[0] + 1 :]
    if len(after) > 1 or (after and type(after[0]) is not T.Normalize):
        return None, None, None
    normalize = after[0] if after else None
    if normalize is not None and (len(normalize.mean) != 3 or len(normalize.std) != 3 or 0 in normalize.std):
        return None, None, None
    return stages[: at[0]], stages[at[0]], normalize


def _name(stage) -> str:
    return getattr(stage, "__name__", None) or type(stage).__name__


def leaves_alone(stage, image: Image.Image) -> bool:
    """Whether `stage` gives back `image`'s own pixels (the same object, or a
    copy of it), so that leaving it out changes nothing."""
    from torchvision import transforms as T

    if type(stage) is T.CenterCrop:  # F.center_crop to the image's own size: image.crop((0, 0, w, h))
        size = (stage.size,) if isinstance(stage.size, int) else tuple(stage.size)
        return (size * 2 if len(size) == 1 else size) == (image.height, image.width)
    # a Resize always runs: F.resize hands back the image itself when its size is the output size
    if _name(stage) == "MaybeConvertMode":
        return getattr(stage, "mode", None) == image.mode
    if _name(stage) == "_convert_to_rgb":
        return image.mode == "RGB"
    return False


def as_rgb(image: Image.Image) -> Image.Image:
    """`image.convert("RGB")` without the copy of an image already RGB."""
    return image if image.mode == "RGB" else image.convert("RGB")


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else torch.device("cpu")
