"""Reading an image, the same way for every caller: a file (the scorer, the
importer, the UI), bytes (the REST API's upload) or an image already in memory.

The image is checked against the limits (`limits.MAX_IMAGE_BYTES`,
`limits.MAX_IMAGE_PIXELS`) before its pixels are decoded, decoded completely
(a truncated or corrupt file fails here, not later inside a model) and
converted to RGB. Every failure is an `ImageError` with one line saying why.
"""
from __future__ import annotations

import io
import re
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from capscope.common import limits
from capscope.common.errors import CapscopeError
from capscope.common.jsonl import shown


class ImageError(CapscopeError, ValueError):
    """An image that cannot be read: missing, corrupt, of a format not accepted."""


class ImageTooLarge(ImageError):
    """An image over the byte or pixel limit."""


def read_image(source, name: str | None = None, formats: set[str] | None = None) -> Image.Image:
    """`source` (a path, bytes or a PIL image) fully decoded, in RGB. `name`
    labels the image in errors (default: the path); `formats` restricts the
    accepted Pillow formats (e.g. {"PNG", "JPEG"})."""
    if isinstance(source, Image.Image):
        check_pixels(source.size, name or "image")
        if source.mode == "RGB":  # used as it is (capscope never writes into an image): a copy cost 90 us
            source.load()
            return source
        return source.convert("RGB")
    if isinstance(source, (bytes, bytearray)):
        name = name or "image"
        check_bytes(len(source), name)
        return _decode(lambda: io.BytesIO(source), name, formats)
    path = Path(source)
    name = name or str(source)
    try:
        check_bytes(path.stat().st_size, name)
    except (FileNotFoundError, NotADirectoryError):
        raise ImageError(f"image not found: {name}") from None
    except (OSError, ValueError):  # a name too long, a NUL byte: no file can have it
        raise ImageError(f"image {shown(name)} is not a usable path") from None
    return _decode(lambda: path, name, formats)


def check_bytes(n_bytes: int, name: str) -> None:
    if n_bytes > limits.MAX_IMAGE_BYTES:
        raise ImageTooLarge(f"image {name} is {n_bytes} bytes (limit {limits.MAX_IMAGE_BYTES})")


def check_pixels(size: tuple[int, int], name: str) -> None:
    width, height = size
    if width * height > limits.MAX_IMAGE_PIXELS:
        raise ImageTooLarge(f"image {name} is {width}x{height} pixels (limit {limits.MAX_IMAGE_PIXELS})")


def _decode(open_source, name: str, formats: set[str] | None) -> Image.Image:
    try:
        with Image.open(open_source()) as probe:
            if formats is not None and probe.format not in formats:
                raise ImageError(f"image {name} must be {' or '.join(sorted(formats))}, got {probe.format}")
            check_pixels(probe.size, name)
            probe.verify()  # checks what decoding alone would not (e.g. PNG chunk checksums)
        with Image.open(open_source()) as image:
            image.load()
            return image.convert("RGB")
    except ImageError:
        raise
    except Image.DecompressionBombError:  # far over the limit: Pillow refuses before we look
        raise ImageTooLarge(f"image {name} has far more pixels than the limit ({limits.MAX_IMAGE_PIXELS})") from None
    except UnidentifiedImageError:
        raise ImageError(f"cannot read image {name}: not an image (PNG, JPEG, WebP or another format Pillow "
                         "reads)") from None
    except Exception as err:  # Pillow raises many types for broken files (and plugins add more)
        raise ImageError(f"cannot read image {name}: {type(err).__name__}: {without_paths(str(err))}") from None


def without_paths(message: str) -> str:
    """Pillow's message without quoted file paths or Python reprs (`<_io.BytesIO object at 0x...>`): the
    reader names the image by its own `name`, and a user is never shown where a file lies on the server."""
    message = re.sub(r"'(/|[A-Za-z]:\\)[^']*'", "the file", message)
    return re.sub(r"<[^<>]* at 0x[0-9a-fA-F]+>", "the file", message)
