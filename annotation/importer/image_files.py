"""Image files of an import: found inside the images folder, hashed, decoded in full."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from capscope.annotation.importer.problems import RowProblem
from capscope.metrics.images import ImageError, check_bytes, read_image
from capscope.common.jsonl import shown


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
    try:
        path = (root / name).resolve()  # follows symbolic links too
        found = path.is_relative_to(root) and path.is_file()
    except (OSError, RuntimeError, ValueError):  # a name too long, a loop of links
        raise RowProblem(f"image {shown(name, 120)} is not a usable path") from None
    if not path.is_relative_to(root):
        raise RowProblem(f"image {shown(name, 120)} is outside the images folder")
    if not found:
        raise RowProblem(f"image {shown(name, 120)} not found")
    return path


def hash_image_file(path: Path) -> ImageFile:
    try:
        check_bytes(path.stat().st_size, repr(path.name))
    except ImageError as err:
        raise RowProblem(str(err)) from None
    data = path.read_bytes()
    return ImageFile(path, hashlib.sha256(data).hexdigest(), len(data))


def decode_image(image: ImageFile) -> None:
    """Decode the whole file (a truncated or corrupt one fails here), fill size and pixels."""
    try:
        image.pil = read_image(image.path, name=repr(image.path.name))
    except ImageError as err:
        raise RowProblem(str(err)) from None
    image.width, image.height = image.pil.size


