"""Benchmark releases (`capscope release`): a frozen, described, loadable version of a dataset.

A release folder holds `benchmark.jsonl` (one CapTokenEval row per item: the
gold labels with their confidence and method, votes, ties, added regions,
whether the item is a control), `benchmark.parquet` (the same rows),
`images/` (every image once, named by its sha256), `datasheet.md` (made from
the data) and `metadata.json` (counts, agreement, the method, and the sha256 of
every other file). It is written to a temporary folder beside the target and
renamed when whole; a version that exists is refused before anything is
written. The store keeps each release's rows as written, its metadata and the
gold revision of every item, so `remake_release` writes it again byte for byte.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from capscope import __version__
from capscope.annotation import audit
from capscope.annotation.export import captokeneval_row, read_image_bytes
from capscope.annotation.refusals import Invalid, NotFound
from capscope.annotation.votes import ItemData, iter_exported_items
from capscope.common.checksums import file_sha256
from capscope.common.paths import safe_name
from capscope.db import Dataset, GoldRevision, Image, Release, Store, data_dir, utcnow

VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_TEXT_CHARS = 100_000  # licence, citation and guidelines each
BOOTSTRAP_DRAWS = 1000
JSONL, PARQUET, DATASHEET, METADATA = "benchmark.jsonl", "benchmark.parquet", "datasheet.md", "metadata.json"


# ---------------------------------------------------------------- making one

def make_release(store: Store, dataset: str, version: str, out: Path, *, licence: str | None = None,
                 citation: str | None = None, guidelines: str | None = None, actor: str | None = None) -> dict:
    """Freeze `dataset` as release `version` in the folder `out` (which must not exist)
    and record it in the store. Returns its metadata."""
    check_version(version)
    actor = actor or audit.acting_now()
    options = {"licence": _text(licence, "licence"), "citation": _text(citation, "citation"),
               "guidelines": _text(guidelines, "guidelines")}
    out = _check_out(Path(out))
    _check_new(store, dataset, version)
    items = list(iter_exported_items(store, dataset))
    if not items:
        raise Invalid(f"dataset {dataset!r} has no items to release")
    names = _image_names(store, items)
    rows = [release_row(item, names[item.image_id]) for item in items]
    jsonl = b"".join((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8") for row in rows)
    created = utcnow().replace(microsecond=0)
    metadata = _metadata(dataset, version, created, items, names)
    sources = {names[item.image_id]: Path(item.image_path) for item in items}

    def record(session, final: dict) -> None:
        dataset_id = session.scalar(select(Dataset.id).where(Dataset.name == dataset))
        session.add(Release(dataset_id=dataset_id, version=version, created_at=created, created_by=actor,
                            method=metadata["method"] or "none", gold_revisions=_gold_revisions(session, items),
                            rows_gz=gzip.compress(jsonl, mtime=0), details={"metadata": final, "options": options}))
        audit.record_in(session, "release made", actor=actor, target=f"{dataset} {version}",
                        details={"items": len(items), "method": metadata["method"]})

    return _write(out, jsonl, sources, metadata, options,
                  lambda final: _recorded(store, lambda session: record(session, final), dataset, version))


def releases_folder() -> Path:
    """Where the server writes releases (REST, the Admin tab) and the Benchmark tab finds them."""
    return data_dir() / "releases"


def make_server_release(store: Store, dataset: str, version: str, **options) -> tuple[dict, Path]:
    """`make_release` into `releases_folder()/NAME-VERSION`: (its metadata, its folder)."""
    check_version(version)
    folder = releases_folder()
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{safe_name(dataset, max_chars=100)}-{version}"
    return make_release(store, dataset, version, out, **options), out


def remake_release(store: Store, dataset: str, version: str, out: Path) -> dict:
    """Write a recorded release again into `out`, byte for byte. Returns its metadata."""
    out = _check_out(Path(out))
    with store.read() as session:
        row = session.scalar(select(Release).join(Dataset, Release.dataset_id == Dataset.id)
                             .where(Dataset.name == dataset, Release.version == version))
        if row is None:
            raise NotFound(f"no release {version!r} of dataset {dataset!r}")
        jsonl, details = gzip.decompress(row.rows_gz), row.details
        wanted = {json.loads(line)["image"] for line in jsonl.splitlines() if line.strip()}
        hashes = {name: Path(name).stem for name in wanted}
        paths = dict(session.execute(select(Image.sha256, Image.path)
                                     .where(Image.sha256.in_(set(hashes.values())))).all())
    missing = sorted(name for name, digest in hashes.items() if digest not in paths)
    if missing:
        raise Invalid(f"the store no longer has the image {missing[0]} of release {version}")
    sources = {name: Path(paths[digest]) for name, digest in hashes.items()}
    frozen = {key: value for key, value in details["metadata"].items() if key != "files"}
    metadata = _write(out, jsonl, sources, frozen, details["options"], lambda final: None)
    if metadata["files"] != details["metadata"].get("files"):
        changed = sorted(k for k in metadata["files"] if metadata["files"][k] != details["metadata"]["files"].get(k))
        raise Invalid(f"re-made release differs in {', '.join(changed)} (a different pyarrow writes other parquet "
                      "bytes); the folder was written")
    return metadata


def list_releases(store: Store, dataset: str | None = None) -> list[dict]:
    query = (select(Release, Dataset.name).join(Dataset, Release.dataset_id == Dataset.id)
             .order_by(Release.created_at, Release.id))
    if dataset is not None:
        query = query.where(Dataset.name == dataset)
    with store.read() as session:
        return [{"dataset": name, "version": r.version, "created_at": r.created_at.isoformat() + "Z",
                 "created_by": r.created_by, "method": r.method, "items": r.details["metadata"]["items"],
                 "files": len(r.details["metadata"].get("files", {}))} for r, name in session.execute(query)]


# ---------------------------------------------------------------- checks

def check_version(version) -> str:
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        raise Invalid(f"a release version is 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
                      f"digit; got {version!r}")
    return version


def _text(value: str | None, what: str) -> str | None:
    if value is not None and len(value) > MAX_TEXT_CHARS:
        raise Invalid(f"the {what} is longer than {MAX_TEXT_CHARS} characters")
    return value


def _check_out(out: Path) -> Path:
    if out.is_file():
        raise Invalid(f"--out {out} is a file; name a folder that does not exist yet")
    if out.exists():
        raise Invalid(f"--out {out} exists; a release is written to a new folder, never over one")
    if not out.parent.is_dir():
        raise Invalid(f"--out {out}: its parent folder {out.parent} does not exist")
    return out


def _check_new(store: Store, dataset: str, version: str) -> None:
    with store.read() as session:
        dataset_id = session.scalar(select(Dataset.id).where(Dataset.name == dataset))
        if dataset_id is None:
            raise NotFound(f"no dataset {dataset!r}")
        made = session.scalar(select(Release.created_at).where(Release.dataset_id == dataset_id,
                                                                Release.version == version))
    if made is not None:
        raise Invalid(f"release {version} of {dataset} exists (made {made.isoformat()}Z); give a new version")


def _recorded(store: Store, record, dataset: str, version: str) -> None:
    try:
        store.run_write(record)
    except IntegrityError:
        raise Invalid(f"release {version} of {dataset} was just made by someone else; give a new version") from None


# ---------------------------------------------------------------- rows and numbers

def release_row(item: ItemData, image_name: str) -> dict:
    """The item's CapTokenEval row (annotation/export.py) with its image by content, and a
    `confidence` on every token and region (null where the label was not made by a consensus)."""
    row = {**captokeneval_row(item), "image": image_name}
    for unit in row["tokens"] + row["regions"]:
        unit.setdefault("confidence", None)
    return row


def _image_names(store: Store, items: list[ItemData]) -> dict[int, str]:
    """image id -> images/<sha256><extension>."""
    with store.read() as session:
        digests = dict(session.execute(select(Image.id, Image.sha256)
                                       .where(Image.id.in_({item.image_id for item in items}))).all())
    return {item.image_id: f"images/{digests[item.image_id]}{Path(item.image_path).suffix.lower() or '.png'}"
            for item in items}


def _gold_revisions(session, items: list[ItemData]) -> dict[str, int]:
    ids = [item.caption_id for item in items if item.gold is not None]
    found = session.execute(select(GoldRevision.caption_id, func.max(GoldRevision.revision))
                            .where(GoldRevision.caption_id.in_(ids)).group_by(GoldRevision.caption_id))
    return {str(caption_id): revision for caption_id, revision in found.all()}


def _metadata(dataset: str, version: str, created: datetime, items: list[ItemData], names: dict[int, str]) -> dict:
    methods = Counter(item.gold.source for item in items if item.gold is not None)
    annotators = {j.user for item in items for j in item.judgements}
    return {
        "name": dataset, "version": version, "created_at": created.isoformat() + "Z", "capscope": __version__,
        "method": methods.most_common(1)[0][0] if methods else None, "methods": dict(sorted(methods.items())),
        "items": len(items), "controls": sum(item.control for item in items), "images": len(set(names.values())),
        "words": sum(len(item.tokens) for item in items),
        "semantic_words": sum(t["semantic"] for item in items for t in item.tokens),
        "regions": sum(len(item.regions) for item in items),
        "labelled_words": sum(item.token_label(i) is not None for item in items for i in range(len(item.tokens))),
        "labelled_regions": sum(item.region_label(i) is not None for item in items
                                for i in range(len(item.regions))),
        "annotators": len(annotators), "judgements": sum(len(item.judgements) for item in items),
        "agreement": agreement_with_intervals(items),
    }


def agreement_with_intervals(items: list[ItemData], draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> dict:
    """Krippendorff's alpha (nominal, binary) per level, semantic words and regions, with a 95%
    percentile bootstrap interval over items. Alpha's sums add up item by item, so a draw
    only adds each drawn item's (disagreement, negatives, positives)."""
    sums = {"words": [], "regions": []}
    for item in items:
        if len(item.judgements) < 2:
            continue
        words = [[i in j.incorrect_tokens for j in item.judgements]
                 for i, token in enumerate(item.tokens) if token["semantic"]]
        regions = [[i in j.mentioned_regions for j in item.region_seers(i)] for i in range(len(item.regions))]
        sums["words"].append(_alpha_sums(words))
        sums["regions"].append(_alpha_sums(regions))
    rng = np.random.default_rng(seed)
    return {level: _alpha_figures(np.array(found).reshape(-1, 4), rng, draws) for level, found in sums.items()}


def _alpha_sums(units: list[list[bool]]) -> tuple[float, float, float, int]:
    """(sum of 2 n0 n1 / (m - 1), n0, n1, units) over the units rated at least twice."""
    disagree = negatives = positives = rated = 0.0
    for ratings in units:
        m = len(ratings)
        if m < 2:
            continue
        n1 = sum(ratings)
        n0 = m - n1
        disagree += 2 * n0 * n1 / (m - 1)
        negatives, positives, rated = negatives + n0, positives + n1, rated + 1
    return disagree, negatives, positives, rated


def _alpha(sums: np.ndarray) -> np.ndarray:
    """alpha = 1 - D / (2 n0 n1 / (n - 1)) from summed columns; NaN where undefined."""
    disagree, n0, n1 = sums[..., 0], sums[..., 1], sums[..., 2]
    expected = np.where(n0 + n1 > 1, 2 * n0 * n1 / np.maximum(n0 + n1 - 1, 1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected > 0, 1 - disagree / expected, np.nan)


def _alpha_figures(per_item: np.ndarray, rng, draws: int) -> dict:
    units = int(per_item[:, 3].sum()) if len(per_item) else 0
    if not units:
        return {"units": 0, "krippendorff_alpha": None, "interval": None}
    point = float(_alpha(per_item.sum(axis=0)))
    picks = rng.integers(0, len(per_item), size=(draws, len(per_item)))
    drawn = _alpha(per_item[picks].sum(axis=1))
    drawn = drawn[~np.isnan(drawn)]
    interval = [round(float(np.percentile(drawn, 2.5)), 6), round(float(np.percentile(drawn, 97.5)), 6)] \
        if len(drawn) else None
    return {"units": units, "krippendorff_alpha": None if np.isnan(point) else round(point, 6), "interval": interval}


# ---------------------------------------------------------------- writing the folder

def _write(out: Path, jsonl: bytes, sources: dict[str, Path], metadata: dict, options: dict, commit) -> dict:
    """Write the release into a temporary folder beside `out`, run `commit` (the store's record),
    then rename it to `out`; on any failure nothing is left behind."""
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        (partial / "images").mkdir()
        for name, source in sorted(sources.items()):
            _copy_checked(source, partial / name)
        (partial / JSONL).write_bytes(jsonl)
        write_parquet([json.loads(line) for line in jsonl.splitlines() if line.strip()], partial / PARQUET)
        digests = {name: file_sha256(partial / name) for name in (JSONL, PARQUET, *sorted(sources))}
        (partial / DATASHEET).write_text(datasheet(metadata, options, digests), encoding="utf-8")
        digests[DATASHEET] = file_sha256(partial / DATASHEET)
        metadata = {**metadata, "files": dict(sorted(digests.items()))}
        (partial / METADATA).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        commit(metadata)
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return metadata


def _copy_checked(source: Path, target: Path) -> None:
    data = read_image_bytes(source)
    if hashlib.sha256(data).hexdigest() != target.stem:
        raise Invalid(f"image {source.name} changed since it was imported (its sha256 is not {target.stem[:16]}...)")
    target.write_bytes(data)


def parquet_schema():
    """The rows' schema, written out so that every release has the same one (a column that is
    null in every row would otherwise be typed null)."""
    import pyarrow as pa

    votes_t = pa.struct([("incorrect", pa.int64()), ("total", pa.int64())])
    votes_r = pa.struct([("mentioned", pa.int64()), ("junk", pa.int64()), ("total", pa.int64())])
    token = pa.struct([("text", pa.string()), ("start", pa.int64()), ("end", pa.int64()), ("semantic", pa.bool_()),
                       ("label", pa.string()), ("confidence", pa.float64()), ("votes", votes_t)])
    mask = pa.struct([("size", pa.list_(pa.int64())), ("counts", pa.string())])
    region = pa.struct([("box", pa.list_(pa.float64())), ("mask", mask), ("label", pa.string()),
                        ("source", pa.string()), ("added_by", pa.string()), ("confidence", pa.float64()),
                        ("votes", votes_r)])
    link = pa.struct([("token", pa.int64()), ("region", pa.int64()), ("votes", pa.int64()), ("total", pa.int64())])
    return pa.schema([("id", pa.string()), ("image", pa.string()), ("caption", pa.string()),
                      ("references", pa.list_(pa.string())), ("tokens", pa.list_(token)),
                      ("regions", pa.list_(region)), ("links", pa.list_(link)), ("dataset", pa.string()),
                      ("gold_method", pa.string()), ("control", pa.bool_())])


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows, schema=parquet_schema()), path, compression="zstd")


# ---------------------------------------------------------------- the datasheet

def datasheet(metadata: dict, options: dict, digests: dict[str, str]) -> str:
    """The release described from its numbers and the options given at release; nothing typed by hand."""
    m = metadata
    name = f"{m['name']} {m['version']}"
    made = (f"labelled by {m['annotators']:,} annotators in {m['judgements']:,} judgements" if m["judgements"]
            else "with labels carried in with the data (no judgement was made in capscope)")
    lines = [f"# {name}", "",
             f"A CapTokenEval benchmark: captions of images with a label on words (correct or incorrect) and "
             f"regions (mentioned by the caption or not), {made}; frozen with capscope {m['capscope']} on "
             f"{m['created_at']}.", "",
             "## What it holds", "", "| | |", "|---|---|"]
    for key, label in (("items", "items (captions)"), ("controls", "control items (gold set by an admin, used to "
                       "measure annotators)"), ("images", "images"), ("words", "words"),
                       ("semantic_words", "semantic words"), ("labelled_words", "words with a label"),
                       ("regions", "regions (counted once per item)"), ("labelled_regions", "regions with a label"),
                       ("annotators", "annotators"), ("judgements", "judgements (one annotator, one item)")):
        lines.append(f"| {label} | {m[key]:,} |")
    lines += ["", "## Agreement between annotators", "",
              "Krippendorff's alpha (nominal) over the items judged by two or more annotators, with a 95% "
              "bootstrap interval over items.", "", "| level | units | alpha | 95% interval |", "|---|---|---|---|"]
    for level, found in m["agreement"].items():
        alpha = "n/a" if found["krippendorff_alpha"] is None else f"{found['krippendorff_alpha']:.3f}"
        interval = "n/a" if found["interval"] is None else f"{found['interval'][0]:.3f} to {found['interval'][1]:.3f}"
        lines.append(f"| {'semantic words' if level == 'words' else level} | {found['units']:,} | {alpha} | "
                     f"{interval} |")
    methods = ", ".join(f"{method}: {count:,} items" for method, count in m["methods"].items()) or "none"
    lines += ["", "## How the gold labels were made", "",
              f"Gold by method: {methods}. `majority`: each unit's majority; `dawid-skene`: each annotator's "
              "error rates learned from all their labels; `model-aware`: a scoring model as one more weighted "
              "voice; `adjudicated`: set by an admin; `import`: carried in from a file. Each label made by a "
              "consensus carries its `confidence` (the probability of the label under the method). Controls "
              "(`\"control\": true`) keep the gold an admin gave them.", "",
              "## Guidelines", "", options.get("guidelines") or "None were given at release.", "",
              "## Licence", "", options.get("licence") or "No licence was given at release.", "",
              "## Citation", "", options.get("citation") or _default_citation(m), "",
              "## Files", "", "| file | sha256 |", "|---|---|"]
    for file in (JSONL, PARQUET):
        lines.append(f"| `{file}` | `{digests[file]}` |")
    lines += [f"| `images/` | {m['images']:,} images, each named by its sha256 |", "",
              "`metadata.json` lists the sha256 of every file. Load the rows with pandas "
              "(`pandas.read_parquet(\"benchmark.parquet\")`) or Hugging Face datasets "
              "(`datasets.load_dataset(\"parquet\", data_files=\"benchmark.parquet\")`); images are paths "
              "relative to this folder.", ""]
    return "\n".join(lines)


def _default_citation(m: dict) -> str:
    key = re.sub(r"[^A-Za-z0-9]+", "-", f"{m['name']}-{m['version']}").strip("-").lower()
    return (f"```bibtex\n@misc{{{key},\n  title = {{{m['name']}, version {m['version']}: a CapTokenEval "
            f"benchmark}},\n  year = {{{m['created_at'][:4]}}},\n  note = {{made with capscope {m['capscope']}}}\n}}\n```")
