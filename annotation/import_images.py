"""Image files of an import: found inside the images folder, hashed, decoded in full."""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

from capscope.annotation.import_report import RowProblem

MAX_IMAGE_BYTES = 50 * 2**20
MAX_IMAGE_PIXELS = 60_000_000


@dataclass
class ImageFile:
    path: Path
    sha256: str
    n_bytes: int
    width: int = 0
    height: int = 0
    pil: object = None  # PIL image, decoded only when needed


def resolve_image_path(name, base: Path) -> Path:
    """The image file `name` inside `base`; RowProblem when it leaves `base`."""
    if not isinstance(name, str) or not name.strip():
        raise RowProblem("missing field 'image' (a path)")
    if "\x00" in name:
        raise RowProblem("image path contains a NUL byte")
    root = base.resolve()
    path = (root / name).resolve()  # follows symbolic links too
    if not path.is_relative_to(root):
        raise RowProblem(f"image {name!r} is outside the images folder")
    if not path.is_file():
        raise RowProblem(f"image {name!r} not found")
    return path


def hash_image_file(path: Path) -> ImageFile:
    n_bytes = path.stat().st_size
    if n_bytes > MAX_IMAGE_BYTES:
        raise RowProblem(f"image is {n_bytes} bytes (limit {MAX_IMAGE_BYTES})")
    data = path.read_bytes()
    return ImageFile(path, hashlib.sha256(data).hexdigest(), len(data))


def decode_image(image: ImageFile) -> None:
    """Decode the whole file (a truncated or corrupt one fails here), fill size and pixels."""
    from PIL import Image as PILImage

    try:
        with PILImage.open(image.path) as probe:
            width, height = probe.size
            if width * height > MAX_IMAGE_PIXELS:
                raise RowProblem(f"image is {width}x{height} pixels (limit {MAX_IMAGE_PIXELS})")
            probe.verify()
        with PILImage.open(image.path) as pil:
            pil.load()
            image.pil = pil.convert("RGB")
    except RowProblem:
        raise
    except (OSError, SyntaxError, ValueError, PILImage.DecompressionBombError) as err:
        raise RowProblem(f"image {image.path.name!r} cannot be decoded: {err}") from None
    image.width, image.height = width, height


def image_bytes_to_pil(data: bytes):
    """Decode image bytes completely (used by the API's score call)."""
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(data)) as probe:
        probe.verify()
    pil = PILImage.open(io.BytesIO(data))
    pil.load()
    return pil
