"""Reading an import file: JSONL lines into checked rows.

`read_jsonl` yields each line's object or a `RejectedRow`; `prepare_row` checks a
row's fields and hashes its image (cheap, before the database is asked what it
already has); `finish_row` decodes the image and checks what depends on its
size. A CapTokenEval row (docs/formats.md) also carries gold labels and votes.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from capscope.annotation.importer.image_files import ImageFile, decode_image, hash_image_file, resolve_image_path
from capscope.annotation.importer.row_regions import checked_regions
from capscope.annotation.importer.problems import RejectedRow, RowProblem
from capscope.common.jsonl import json_lines, shown
from capscope.common.limits import MAX_ID_CHARS
from capscope.metrics.text import check_caption, check_references
from capscope.metrics.text import checked_tokens as engine_checked_tokens

TOKEN_LABELS = ("correct", "incorrect")
REGION_LABELS = ("mentioned", "unmentioned")


@dataclass
class PreparedRow:
    line: int
    external_id: str
    text: str
    references: list[str]
    model: str | None
    image: ImageFile
    regions: list[dict] | None  # from the file; None = propose / keep the image's own
    tokens: list[dict] | None  # from the file; None = tokenise
    gold: dict | None = None
    content_hash: str = ""


def read_jsonl(stream: IO[bytes]) -> Iterator[tuple[int, dict | RejectedRow]]:
    """(line number, object) for each non-blank line, or a RejectedRow for a line
    that is too long, not UTF-8, not JSON, or not a JSON object."""
    for number, obj, why in json_lines(stream):
        yield number, (RejectedRow(number, None, why) if why else obj)


def prepare_row(line: int, obj: dict, base: Path, *, captokeneval: bool) -> PreparedRow:
    """Check one row and hash its image (no decoding yet); RowProblem on bad input."""
    external_id = _row_id(obj)
    text = _caption_text(obj)
    refs = _references(obj)
    model = _model_name(obj)
    image = hash_image_file(resolve_image_path(obj.get("image"), base))
    if captokeneval and "tokens" not in obj:
        raise RowProblem("missing field 'tokens' (a CapTokenEval row)")
    tokens = checked_tokens(obj["tokens"], text) if obj.get("tokens") is not None else None
    raw_regions = obj.get("regions")
    row = PreparedRow(line, external_id, text, refs, model, image, None, tokens)
    row.content_hash = _content_hash(obj, image.sha256)
    if raw_regions is not None:
        row.regions = raw_regions  # checked once the image size is known
    return row


def finish_row(row: PreparedRow, *, captokeneval: bool, obj: dict) -> None:
    """Decode the image and check what depends on its size (regions, masks, gold)."""
    decode_image(row.image)
    if row.regions is not None:
        row.regions = checked_regions(row.regions, row.image.width, row.image.height)
    if captokeneval:
        row.gold = _gold_from_row(obj, len(row.regions or []))
        if row.gold and len(row.gold["token_labels"]) != len(row.tokens or []):
            raise RowProblem("token labels do not match the tokens")
    if row.tokens is None:
        row.tokens = tokenize(row.text)


def row_id_for_report(obj: dict) -> str | None:
    """The row's id as far as it can be read, for an error line."""
    ident = obj.get("id")
    ident = ident if isinstance(ident, (str, int)) and not isinstance(ident, bool) else None
    return None if ident is None else str(ident)[:MAX_ID_CHARS]


def _row_id(obj: dict) -> str:
    value = obj.get("id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RowProblem("missing field 'id' (a string)")
    value = str(value)
    if not value.strip() or len(value) > MAX_ID_CHARS:
        raise RowProblem(f"id must be 1-{MAX_ID_CHARS} characters")
    return value


def _caption_text(obj: dict) -> str:
    text = obj.get("caption")
    if not isinstance(text, str):
        raise RowProblem("missing field 'caption' (a string)")
    problem = check_caption(text)
    if problem:
        raise RowProblem(problem)
    return text


def _references(obj: dict) -> list[str]:
    refs = obj.get("references") or []
    problem = check_references(refs)
    if problem:
        raise RowProblem(problem)
    return refs


def _model_name(obj: dict) -> str | None:
    model = obj.get("model")
    if model is None:
        return None
    if not isinstance(model, str) or len(model) > 200:
        raise RowProblem("'model' must be a string of at most 200 characters")
    return model


def _content_hash(obj: dict, image_sha: str) -> str:
    keep = {k: obj.get(k) for k in ("id", "caption", "references", "model", "tokens", "regions")}
    keep["image_sha256"] = image_sha
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


def checked_tokens(raw, caption: str) -> list[dict]:
    try:
        return [token.to_dict() for token in engine_checked_tokens(raw, caption)]
    except ValueError as err:
        raise RowProblem(str(err)) from None


def tokenize(caption: str) -> list[dict]:
    from capscope.metrics.text import tokenize as engine_tokenize

    return [t.to_dict() for t in engine_tokenize(caption)]


def _gold_from_row(obj: dict, n_regions: int) -> dict | None:
    """Labels and votes of a CapTokenEval row, or None when it carries none."""
    tokens, regions = obj.get("tokens") or [], obj.get("regions") or []
    token_labels = [_checked_label(t.get("label"), TOKEN_LABELS, f"token {i}") for i, t in enumerate(tokens)]
    region_labels = [_checked_label(r.get("label"), REGION_LABELS, f"region {i}") for i, r in enumerate(regions)]
    token_votes = [_checked_votes(t.get("votes"), "incorrect", f"token {i}") for i, t in enumerate(tokens)]
    region_votes = [_checked_votes(r.get("votes"), "mentioned", f"region {i}", extra="junk")
                    for i, r in enumerate(regions)]
    if len(region_labels) != n_regions:
        raise RowProblem("region labels do not match the regions")
    links = _checked_links(obj.get("links"), len(tokens), n_regions)
    if not any(token_labels + region_labels + token_votes + region_votes) and not links:
        return None
    return {
        "token_labels": token_labels,
        "region_labels": region_labels,
        "token_votes": token_votes if any(token_votes) else None,
        "region_votes": region_votes if any(region_votes) else None,
        "link_votes": links or None,
    }


def _checked_links(links, n_tokens: int, n_regions: int) -> list[dict]:
    """An item's `links`: [{"token", "region", "votes", "total"}], each a word tied to a region."""
    if links is None:
        return []
    if not isinstance(links, list):
        raise RowProblem("'links' must be a list")
    checked = {}
    for i, link in enumerate(links):
        values = [link.get(k) for k in ("token", "region", "votes", "total")] if isinstance(link, dict) else []
        if len(values) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise RowProblem(f"link {i} must be {{'token': int, 'region': int, 'votes': int, 'total': int}}")
        token, region, votes, total = values
        if not (0 <= token < n_tokens and 0 <= region < n_regions and 0 <= votes <= total):
            raise RowProblem(f"link {i}: token or region out of range, or votes past total")
        checked[(token, region)] = {"token": token, "region": region, "votes": votes, "total": total}
    return [checked[key] for key in sorted(checked)]


def _checked_label(label, allowed: tuple[str, ...], where: str) -> str | None:
    if label is not None and label not in allowed:
        raise RowProblem(f"{where}: label must be one of {', '.join(allowed)} or null, got {shown(label)}")
    return label


def _checked_votes(votes, key: str, where: str, extra: str | None = None) -> dict | None:
    """{key: int, "total": int} (and an optional `extra` count, as regions' "junk"), each within total."""
    if votes is None:
        return None
    keys = (key, "total") + ((extra,) if extra and isinstance(votes, dict) and votes.get(extra) is not None else ())
    ok = isinstance(votes, dict) and all(
        isinstance(votes.get(k), int) and not isinstance(votes.get(k), bool) for k in keys
    )
    if not ok or not all(0 <= votes[k] <= votes["total"] for k in keys):
        raise RowProblem(f"{where}: votes must be {{'{key}': int, 'total': int}} with {key} <= total")
    return {k: votes[k] for k in keys}
