"""Path and query parameters the REST routes share, each with its bounds."""
from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from capscope.common import limits

ItemId = Annotated[int, Path(ge=1, le=2**62)]
ItemQuery = Annotated[int | None, Query(ge=1, le=2**62)]
RegionIndex = Annotated[int, Path(ge=0, le=limits.MAX_REGIONS)]
DatasetName = Annotated[str, Path(max_length=200)]
MAX_INDICES = 10_000  # entries in one list a client sends (labels, ties, gold)
