"""Regions of an import: those a file gives (boxes clipped into the image, masks
checked COCO RLE) and those the engine proposes for images that have none."""
from __future__ import annotations

from capscope.annotation.importer.problems import ImportReport, RowProblem
from capscope.common.limits import MAX_REGIONS, finite_number
from capscope.metrics.regions import checked_rle_mask, clip_box, mask_to_rle


def checked_regions(raw, width: int, height: int) -> list[dict]:
    """Regions from a file: boxes clipped into the image, masks checked RLE."""
    if not isinstance(raw, list):
        raise RowProblem("'regions' must be a list")
    if len(raw) > MAX_REGIONS:
        raise RowProblem(f"{len(raw)} regions (limit {MAX_REGIONS})")
    regions = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise RowProblem(f"region {i} must be an object with a 'box'")
        try:
            box = clip_box(item.get("box"), width, height)
        except ValueError as err:
            raise RowProblem(f"region {i}: {err}") from None
        confidence = item.get("confidence")
        if confidence is not None and not finite_number(confidence):
            raise RowProblem(f"region {i}: confidence must be a number")
        regions.append({
            "box": [round(v, 2) for v in box],
            "mask": _checked_mask(item.get("mask"), width, height),
            "confidence": confidence,
            "source": str(item.get("source") or "file")[:40],
            "added_by": _added_by(item.get("added_by"), i),
        })
    return regions


def _added_by(name, index: int) -> str | None:
    """The annotator who added the region (a name, kept as text), or None for a proposal."""
    if name is None:
        return None
    if not isinstance(name, str) or not 0 < len(name) <= 100:
        raise RowProblem(f"region {index}: added_by must be a user name of at most 100 characters, or null")
    return name


def _checked_mask(mask, width: int, height: int) -> dict | None:
    """The region's mask, checked as the scorer checks one, as compressed COCO RLE."""
    if mask is None:
        return None
    try:
        return mask_to_rle(checked_rle_mask(mask, width, height))
    except ValueError as err:
        raise RowProblem(f"a region {err}") from None


def make_proposer(name: str):
    """The engine's region proposer called `name`, or None for "none"."""
    if name == "none":
        return None
    from capscope.metrics.regions import PROPOSERS

    return PROPOSERS[name]()


def propose_regions(rows, done: set[str], proposer, max_regions: int, report: ImportReport) -> None:
    """Regions from the engine for images that have none yet, one per distinct image."""
    if proposer is None:
        return
    from capscope.metrics.regions import select_regions

    proposed: dict[str, list[dict]] = {}
    for row in rows:
        sha = row.image.sha256
        if row.regions is not None or sha in done:
            continue
        if sha not in proposed:
            kept = select_regions(proposer.propose(row.image.pil), max_regions)
            proposed[sha] = [{
                "box": [round(float(v), 2) for v in region.box],
                "mask": None if region.mask is None else mask_to_rle(region.mask),
                "confidence": region.confidence,
                "source": region.source,
            } for region in kept]
            report.regions_proposed += 1
        row.regions = proposed[sha]
