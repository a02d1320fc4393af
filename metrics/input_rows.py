"""The scorer's input rows read and checked (docs/formats.md §2.1): the caption,
its tokens and references, the image or features file and the regions, each
problem a `RowError` the row reports; and the rows scored next (`Upcoming`),
read only when an image pass has spare rows for them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from .feature_files import features_from_file, read_features
from .image_cache import ImageHash
from .images import ImageError, read_image
from .pairs import PreparedPair
from .regions import Region, given_regions
from .row_errors import RowError
from .text import check_caption, check_references


@dataclass
class PreparedInput:
    """One input row as the scorer reads it, and what is wrong with it (`errors`)."""
    index: int
    pair: PreparedPair
    image: Image.Image | None
    regions: list[Region] | None
    features: dict | None = None
    image_name: str | None = None
    errors: list[str] = field(default_factory=list)
    image_hash: ImageHash | None = None


def prepare_input(index: int, row: dict, base_dir: Path | None, tokens_of, regions_of) -> PreparedInput:
    """An input row read and checked: its caption, tokens (`tokens_of(caption, given)`),
    references, features file, image and regions (`regions_of(image, given, image_hash)`);
    what is wrong with it in `errors`, the row's first error first."""
    caption = row.get("caption")
    prepared = PreparedInput(index, PreparedPair(caption if isinstance(caption, str) else "", []), None, None)
    try:
        problem = check_caption(caption)
        if problem:
            raise RowError(problem)
        given = row.get("tokens")
        if given is not None:  # checked first: a token that does not match is the row's first error
            prepared.pair.tokens = tokens_of(caption, given)
        prepared.pair.references = _references(row.get("references"))
        if row.get("features") is not None:
            prepared.features = read_features(_resolve(row["features"], base_dir))
            prepared.regions = features_from_file(prepared.features).regions
        if row.get("image") is not None:
            prepared.image, prepared.image_name = row_image(row["image"], base_dir)
            prepared.image_hash = ImageHash(prepared.image)
            if prepared.regions is None:
                prepared.regions = regions_of(prepared.image, row.get("regions"), prepared.image_hash)
        elif prepared.features is None:
            raise RowError("row has neither an image nor a features file")
        if given is None:  # parsed last, so a row that cannot be scored (a missing image) is never parsed
            prepared.pair.tokens = tokens_of(caption, None)
    except RowError as err:
        prepared.errors.append(str(err))
    return prepared


class Upcoming:
    """The (regions, image hash) of the rows scored next, each row read once,
    and only when a pass has spare rows for it (`image_cache.encode_cached`)."""

    def __init__(self, rows: list[dict], read):
        self._rows, self._read, self._done = rows, read, []

    def __iter__(self):
        for i, row in enumerate(self._rows):
            if i == len(self._done):
                self._done.append(self._read(row))
            if self._done[i] is not None:
                yield self._done[i]


def row_regions(given, size: tuple[int, int]) -> list[Region]:
    """A row's own regions, checked against the image size; RowError says what is wrong."""
    try:
        return given_regions(given, *size)
    except (ValueError, AttributeError) as err:
        raise RowError(f"bad regions: {err}") from None


def row_image(image, base_dir: Path | None = None) -> tuple[Image.Image, str | None]:
    """A row's `image` (a PIL image, or a path relative to `base_dir`) in RGB,
    with the name it was given; RowError when it cannot be read."""
    name = None if isinstance(image, Image.Image) else str(image)
    try:
        return read_image(image if name is None else _resolve(image, base_dir), name=name), name
    except ImageError as err:
        raise RowError(str(err)) from None


def _resolve(path, base_dir: Path | None) -> Path:
    path = Path(str(path))
    return path if path.is_absolute() or base_dir is None else base_dir / path


def _references(refs) -> list[str] | None:
    problem = check_references(refs)
    if problem:
        raise RowError(problem)
    return refs or None
