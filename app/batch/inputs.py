"""The caption files people bring, read as capscope's pairs (docs/formats.md §11):

- `coco-results`: a COCO results JSON, `[{"image_id": int, "caption": str}, ...]`,
  as captioning code writes it, with a COCO-style captions annotations file
  (`images[].id / file_name`, `annotations[].image_id / caption`: COCO's
  captions_val2014.json, Karpathy test subsets of it, nocaps's
  nocaps_val_4500_captions.json) that gives each image's file (under an images
  folder) and its reference captions;
- `pairs`: capscope's JSONL pairs (`{"id", "image", "caption", ...}`);
- `scored`: rows `capscope score` wrote, used as they are.

The layout is named or recognised from the content, in one place (`input_layout`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from capscope.common.errors import CapscopeError
from capscope.common.jsonl import loads_limited
from capscope.common.limits import MAX_REFERENCES

FORMATS = ("coco-results", "pairs", "scored")
EXPECTED = ('a COCO results JSON ([{"image_id": int, "caption": str}, ...]), capscope JSONL pairs '
            '({"id", "image", "caption"} per line) or rows capscope score wrote')


def input_layout(path: Path, named: str = "auto", *, otherwise: str | None = None) -> str:
    """Which of FORMATS a caption file is: `named`, unless it is "auto", else
    recognised from its content (`detect_format`). When there is no such file
    or its content is none of them: `otherwise`, or with None the
    CapscopeError that says what was expected. What `capscope score`, `import`
    and `diagnose` all ask."""
    if named != "auto":
        return named
    try:
        return detect_format(path)
    except CapscopeError:
        if otherwise is None:
            raise
        return otherwise


def detect_format(path: Path) -> str:
    """Which of FORMATS the file is, from its first non-blank character or line;
    CapscopeError (one line saying what was expected) when it is none."""
    if not path.is_file():
        raise CapscopeError(f"{path}: no such file")
    if is_json_array(path):
        return "coco-results"
    with path.open("rb") as stream:
        first = stream.read(1 << 16).lstrip().split(b"\n", 1)[0]
    try:
        row = loads_limited(first.decode("utf-8"))
    except ValueError:
        row = None
    if isinstance(row, dict) and isinstance(row.get("metrics"), dict):
        return "scored"
    if isinstance(row, dict) and "caption" in row and ("image" in row or "features" in row):
        return "pairs"
    raise CapscopeError(f"{path}: not a caption file capscope reads; expected {EXPECTED}")


def is_json_array(path: Path) -> bool:
    """Whether the file's first non-blank character opens a JSON array (a COCO results file); False when
    there is no such file (its reader says so)."""
    if not path.is_file():
        return False
    with path.open("rb") as stream:
        return stream.read(4096).lstrip().startswith(b"[")


class CocoCaptions:
    """A COCO-style captions annotations file: image id -> file name, and the
    reference captions of each image."""

    def __init__(self, path: Path):
        try:
            data = loads_limited(Path(path).read_text(encoding="utf-8"))
            self.files = {int(image["id"]): str(image["file_name"]) for image in data["images"]}
            self.references: dict[int, list[str]] = {}
            for note in data.get("annotations", []):
                caption = str(note["caption"]).strip()
                if caption:
                    self.references.setdefault(int(note["image_id"]), []).append(caption)
        except FileNotFoundError:
            raise CapscopeError(f"--annotations: {path}: no such file") from None
        except (ValueError, KeyError, TypeError, OverflowError) as err:
            raise CapscopeError(f"--annotations: {path} is not a COCO captions file "
                                f"(images[].id/file_name, annotations[].image_id/caption): {err}") from None


def coco_results(path: Path) -> list[dict]:
    """The entries of a COCO results JSON, checked; CapscopeError at the first bad one."""
    try:
        entries = loads_limited(Path(path).read_text(encoding="utf-8"))
    except ValueError as err:
        raise CapscopeError(f"{path}: not JSON ({err})") from None
    if not isinstance(entries, list):
        raise CapscopeError(f"{path}: expected {EXPECTED}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("caption"), str) or "image_id" not in entry:
            raise CapscopeError(f"{path}: entry {i} is not {{\"image_id\": int, \"caption\": str}}")
    return entries


def coco_pairs(results: Path, annotations: CocoCaptions, images: Path, absolute: bool = True) -> Iterator[dict]:
    """capscope pairs from a COCO results file: the id is the image id (with
    "-2", "-3", ... for an image's later captions), the image its file under
    `images` (its absolute path, or with `absolute=False` the file name as the
    annotations give it), the references its annotated captions. An image the
    annotations do not name becomes a row without an image whose `problem` says
    so (the scored row's error)."""
    seen: dict[int, int] = {}
    for entry in coco_results(results):
        image_id = _image_id(entry["image_id"])
        seen[image_id] = seen.get(image_id, 0) + 1
        pair_id = str(image_id) if seen[image_id] == 1 else f"{image_id}-{seen[image_id]}"
        name = annotations.files.get(image_id)
        path = (str((images / name).resolve()) if absolute else name) if name else None
        pair = {"id": pair_id, "image_id": image_id, "caption": entry["caption"], "image": path}
        if name is None:
            pair["problem"] = f"image_id {image_id} is not among the images of the annotations file"
        refs = annotations.references.get(image_id)
        if refs:
            pair["references"] = refs[:MAX_REFERENCES]
        yield pair


def _image_id(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity, which Python's JSON reads
        raise CapscopeError(f"image_id {value!r} is not an integer") from None


def write_coco_pairs(results: Path, coco: CocoCaptions | None, images: Path | None, path: Path) -> int:
    """A COCO results file's pairs written to `path` (`coco_pairs`); CapscopeError
    naming --annotations and --images when either is missing."""
    if coco is None or images is None:
        raise CapscopeError(f"{results} is a COCO results file: name the captions annotations file "
                            "(--annotations) and the folder of its images (--images)")
    return write_pairs(coco_pairs(results, coco, images), path)


def write_pairs(pairs: Iterator[dict], path: Path) -> int:
    """The pairs as a JSONL file (written whole, then renamed); how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    n = 0
    with partial.open("w", encoding="utf-8") as out:
        for pair in pairs:
            out.write(json.dumps(pair, ensure_ascii=False) + "\n")
            n += 1
    partial.replace(path)
    return n
