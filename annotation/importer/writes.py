"""Writing imported rows to the database: what a batch finds already there,
then images (shared by SHA-256), their regions, captions, tokens and gold, one
transaction per batch."""
from __future__ import annotations

from sqlalchemy import select, update

from capscope.annotation.gold import write_gold
from capscope.annotation.importer.problems import ImportReport, RejectedRow
from capscope.annotation.importer.rows import PreparedRow
from capscope.db import Caption, Dataset, Image, Region, Store, Token


def known_state(store: Store, dataset: str, rows: list[PreparedRow]) -> dict:
    """For the batch's ids and images: content hashes and annotator counts of
    captions already imported, and which images already have regions."""
    ids = [row.external_id for row in rows]
    hashes = [row.image.sha256 for row in rows]
    with store.read() as session:
        found = session.execute(
            select(Caption.external_id, Caption.content_hash, Caption.annotators_needed)
            .join(Dataset, Caption.dataset_id == Dataset.id)
            .where(Dataset.name == dataset, Caption.external_id.in_(ids))
        ).all()
        captions = {ext: content for ext, content, _ in found}
        needed = {ext: n for ext, _, n in found}
        with_regions = set(session.scalars(
            select(Image.sha256).where(Image.sha256.in_(hashes), Image.regions_source != "none")
        ))
    return {"captions": captions, "needed": needed, "images_with_regions": with_regions}


def set_annotators_needed(session, dataset: str, annotators_needed: int, external_ids: list[str]) -> None:
    dataset_id = select(Dataset.id).where(Dataset.name == dataset).scalar_subquery()
    session.execute(
        update(Caption)
        .where(Caption.dataset_id == dataset_id, Caption.external_id.in_(external_ids))
        .values(annotators_needed=annotators_needed)
    )


def write_rows(session, rows: list[PreparedRow], dataset_name: str, annotators_needed: int,
               report: ImportReport) -> None:
    dataset = _get_or_create_dataset(session, dataset_name)
    counts = {"added": 0, "images": 0, "gold": 0}
    errors: list[RejectedRow] = []
    for row in rows:
        if session.scalar(select(Caption.id).where(Caption.dataset_id == dataset.id,
                                                   Caption.external_id == row.external_id)):
            errors.append(RejectedRow(row.line, row.external_id, "id was imported meanwhile by another run"))
            continue
        image, created = _get_or_create_image(session, row)
        counts["images"] += created
        problem = _attach_regions(session, image, row)
        if problem:
            errors.append(RejectedRow(row.line, row.external_id, problem))
            continue
        _add_caption(session, dataset, image, row, annotators_needed)
        counts["added"] += 1
        counts["gold"] += bool(row.gold)
    # counted only once the transaction is sure to commit (a retry redoes them)
    report.added += counts["added"]
    report.images_added += counts["images"]
    report.gold_added += counts["gold"]
    report.errors.extend(errors)


def _get_or_create_dataset(session, name: str) -> Dataset:
    dataset = session.scalar(select(Dataset).where(Dataset.name == name))
    if dataset is None:
        dataset = Dataset(name=name)
        session.add(dataset)
        session.flush()
    return dataset


def _get_or_create_image(session, row: PreparedRow) -> tuple[Image, bool]:
    image = session.scalar(select(Image).where(Image.sha256 == row.image.sha256))
    if image is not None:
        return image, False
    image = Image(sha256=row.image.sha256, path=str(row.image.path), width=row.image.width,
                  height=row.image.height, n_bytes=row.image.n_bytes, regions_source="none")
    session.add(image)
    session.flush()
    return image, True


def _region_key(regions) -> list:
    return [(tuple(round(v, 2) for v in r["box"]), (r.get("mask") or {}).get("counts")) for r in regions]


def _attach_regions(session, image: Image, row: PreparedRow) -> str:
    """Give the image the row's regions; '' when fine, else why the row clashes."""
    if row.regions is None:
        return ""
    existing = image.regions
    if image.regions_source != "none":
        # regions annotators added since are appended after the imported ones: they are no clash
        stored = [{"box": r.box, "mask": r.mask_rle} for r in existing[:len(row.regions)]]
        if _region_key(stored) != _region_key(row.regions):
            return "this image already has other regions (from an earlier row or import)"
        return ""
    if existing:
        return ("annotators added regions to this image before any were imported: import this row without "
                "regions, or under another image")
    for index, region in enumerate(row.regions):
        x0, y0, x1, y1 = region["box"]
        session.add(Region(image_id=image.id, index=index, source=region["source"], x0=x0, y0=y0, x1=x1, y1=y1,
                           mask_rle=region["mask"], confidence=region["confidence"],
                           added_by=region.get("added_by")))
    image.regions_source = row.regions[0]["source"] if row.regions else "empty"
    session.flush()
    session.expire(image, ["regions"])
    return ""


def _add_caption(session, dataset: Dataset, image: Image, row: PreparedRow, annotators_needed: int) -> None:
    caption = Caption(dataset_id=dataset.id, external_id=row.external_id, image_id=image.id, text=row.text,
                      model=row.model, references=row.references, content_hash=row.content_hash,
                      annotators_needed=annotators_needed)
    session.add(caption)
    session.flush()
    session.add_all(Token(caption_id=caption.id, index=i, **tok) for i, tok in enumerate(row.tokens))
    if row.gold:
        gold = write_gold(session, caption.id, row.gold["token_labels"], row.gold["region_labels"], "import")
        gold.token_votes, gold.region_votes = row.gold.get("token_votes"), row.gold.get("region_votes")
        gold.link_votes = row.gold.get("link_votes")
