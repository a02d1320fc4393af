"""The scoring pipeline behind `capscope score` and `capscope features`: rows
read lazily from a JSONL file, URLs fetched, batches scored here or on a Ray
cluster (`engine_ray`), results written in input order, a run resumed where
it stopped (`resume`). It imports nothing of capscope's but `metrics` and
its own folder."""
from __future__ import annotations

import itertools
import json
import logging
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from capscope.batch.command_scorer import build_scorer
from capscope.batch.resume import AnsweredIds, batched, count_lines
from capscope.common.errors import CapscopeError
from capscope.common.jsonl import json_lines
from capscope.metrics.config import ScorerConfig
from capscope.metrics.result import ScoreRow

log = logging.getLogger("capscope")

URL_TIMEOUT_S = 30   # one image or features file fetched over http(s)


FEATURE_BATCH = 8    # rows per batch of `capscope features` (a worker's unit of work)


NO_IMAGE = "row has neither an image nor a features file"  # the scorer's error for such a row


def engine_results(task, items: Iterable, batch_size: int, cluster) -> Iterator:
    """The task's results for `items` (read as they are needed), in order:
    here, or on a Ray cluster (then this is the only line that imports Ray)."""
    if cluster is None:
        return local_results(task.worker(), items, batch_size)
    from capscope.batch import engine_ray

    return engine_ray.results(task, items, batch_size, cluster)


def local_results(work, items: Iterable, batch_size: int) -> Iterator:
    """`work(batch, ahead)` for each batch in turn, `ahead` the batch after it (read one batch early)."""
    batches = batched(items, batch_size)
    batch = next(batches, None)
    while batch is not None:
        ahead = next(batches, None)
        yield from work(batch, ahead or ())
        batch = ahead


def fetch_url(url: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes from an http(s) URL; RowError when it cannot be had."""
    import urllib.error
    import urllib.request

    from capscope.metrics.scorer import RowError

    try:
        with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as response:
            return response.read(limit + 1)
    except urllib.error.HTTPError as err:
        raise RowError(f"cannot fetch {url}: HTTP {err.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise RowError(f"cannot fetch {url}: {getattr(err, 'reason', err)}") from None


def is_url(value) -> bool:
    return isinstance(value, str) and value.lower().startswith(("http://", "https://"))


def with_fetched_urls(row: dict, scratch: Callable[[], Path]) -> dict:
    """The row with an image URL replaced by the decoded image and a features URL
    by a downloaded file in `scratch()`; RowError when one cannot be had."""
    from capscope.common import limits
    from capscope.metrics.images import ImageError, read_image
    from capscope.metrics.scorer import RowError

    row = dict(row)
    if is_url(row.get("image")):
        try:
            row["image"] = read_image(fetch_url(row["image"], limits.MAX_IMAGE_BYTES), name=row["image"])
        except ImageError as err:
            raise RowError(str(err)) from None
    if is_url(row.get("features")):
        data = fetch_url(row["features"], limits.MAX_IMAGE_BYTES)
        if len(data) > limits.MAX_IMAGE_BYTES:
            raise RowError(f"features file {row['features']} is over {limits.MAX_IMAGE_BYTES} bytes")
        folder = Path(tempfile.mkdtemp(dir=scratch()))
        path = folder / (Path(urllib.parse.urlsplit(row["features"]).path).name or "features.npz")
        path.write_bytes(data)
        row["features"] = str(path)
    return row


class Scratch:
    """A temporary folder made on first use, removed at the end of the block."""

    def __enter__(self):
        self._folder = None
        return self

    def __call__(self) -> Path:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="capscope-")
        return Path(self._folder.name)

    def __exit__(self, *exc):
        if self._folder is not None:
            self._folder.cleanup()


def read_pairs(path: Path) -> Iterator:
    """(line number, row or None, error) for every non-blank line of a JSONL
    file, read lazily; a missing file is an error at once."""
    if not path.is_file():
        raise CapscopeError(f"input file {path} not found")
    return ((number, row, (f"line {number}: {why}" if why else None)) for number, row, why in json_lines(path))


def error_row(row: dict | None, error: str) -> dict:
    return ScoreRow.failed(row, error).to_dict()


@dataclass(frozen=True)
class ScoreTask:
    """What one worker of `capscope score` does: build a Scorer once, then turn
    batches of (line number, row, why not) into output rows."""
    options: ScorerConfig
    base_dir: Path

    def worker(self) -> Callable[[list], list[dict]]:
        scorer = build_scorer(self.options)
        return lambda items, ahead=(): score_items(scorer, self.base_dir, items, ahead)


def score_items(scorer, base_dir: Path, items: list, ahead=()) -> list[dict]:
    """Output rows for one batch, in order. A line that is no row is an error
    row here; a URL that cannot be fetched fails its pair as a missing file does
    (the scorer still gives tokens and the model block). `ahead`, the items
    scored next, may fill the batch's spare image rows (`Scorer.score_batch`);
    rows with a URL are left for their turn (fetched once, then)."""
    with Scratch() as scratch:
        prepared = [prepare_item(item, scratch) for item in items]
        ready = [sent for sent, _, _ in prepared if sent is not None]
        upcoming = [row for _, row, err in ahead if err is None and isinstance(row, dict)
                    and not is_url(row.get("image")) and not is_url(row.get("features"))]
        scored = iter(scorer.score_batch(ready, base_dir=base_dir, ahead=upcoming) if ready else ())
        out = []
        for (_, row, _), (sent, line_error, fetch_error) in zip(items, prepared):
            result = next(scored) if sent is not None else error_row(row, line_error)
            if fetch_error and result["error"] == NO_IMAGE:
                result["error"] = fetch_error
            if row and is_url(row.get("image")):
                result["image"] = row["image"]  # scored from fetched pixels: named by its URL, as a path is
            out.append(result)
    return out


def prepare_item(item, scratch: Scratch) -> tuple[dict | None, str | None, str | None]:
    """(the row the scorer gets or None, why the line is no row, why a URL could not be fetched)."""
    from capscope.metrics.scorer import RowError

    number, row, err = item
    if err is None and not _has_id(row):
        err = f"line {number}: row has no string \"id\""
    if err is None and isinstance(row.get("problem"), str) and not row.get("image"):
        err = row["problem"]  # said by the reader that wrote the row (an image_id the annotations lack)
    if err:
        return None, err, None
    try:
        return with_fetched_urls(row, scratch), None, None
    except RowError as problem:
        return {**row, "image": None, "features": None}, None, str(problem)


def _has_id(row: dict) -> bool:
    return isinstance(row.get("id"), str) and bool(row["id"])


@dataclass(frozen=True)
class FeatureTask:
    """What one worker of `capscope features` does: per row, write its .npz
    into `out_dir` and give back the index row, or why not."""
    options: ScorerConfig
    base_dir: Path
    out_dir: Path

    def worker(self) -> Callable[[list], list[dict]]:
        scorer = build_scorer(self.options)
        backbone = next(iter(scorer.metrics.values())).backbone
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return lambda items, ahead=(): [self.one(scorer, backbone, item) for item in items]

    def one(self, scorer, backbone, item) -> dict:
        from capscope.metrics.scorer import RowError

        number, row, err = item
        if err:
            return {"row": None, "problem": err}
        try:
            with Scratch() as scratch:
                name = extract_features(scorer, backbone, with_fetched_urls(row, scratch), self.base_dir, self.out_dir)
            return {"row": {**row, "features": name}, "problem": None}
        except RowError as problem:
            return {"row": None, "problem": f"line {number}: {problem}"}


def extract_features(scorer, backbone, row: dict, base: Path, out_dir: Path) -> str:
    """Every candidate region's raw CLIP feature, the kept (clustered) ones indexed."""
    import re

    from capscope.metrics.regions import select_regions
    from capscope.metrics.feature_files import write_features
    from capscope.metrics.scorer import RowError, row_image, row_regions

    if not _has_id(row) or row.get("image") is None:
        raise RowError("row needs a string id and an image")
    image, _ = row_image(row["image"], base)
    if row.get("regions") is not None:
        candidates = row_regions(row["regions"], image.size)
    else:
        candidates = scorer.proposer().propose(image) if scorer.region_source != "given" else []
    kept = select_regions(candidates, scorer.max_regions)
    kept_index = [next(i for i, c in enumerate(candidates) if c is k) for k in kept]
    features = backbone.image_features([image], [candidates])[0]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", row["id"]) + ".npz"
    write_features(out_dir / name, features.region_feats, [c.box for c in candidates],
                   features.global_feat, image.size, kept_index)
    return name


# ---------------------------------------------------------------- whole files

def score_file(options: ScorerConfig, input_path: Path, output: Path, batch_size: int = 32,
               retry_errors: bool = False, cluster=None) -> tuple[int, int]:
    """Score every pair of `input_path` not yet in `output` (appended, in input
    order); (rows written, rows with errors)."""
    from tqdm import tqdm

    pairs = read_pairs(input_path)
    answered, retried = AnsweredIds.read(output, retry_errors=retry_errors)
    if len(answered) or retried:
        log.info("resuming: %d ids already in %s%s", len(answered), output,
                 f"; {retried} rows with errors taken out to score again" if retried else "")
    todo = (item for item in pairs if item[1] is None or not _has_id(item[1]) or item[1]["id"] not in answered)
    first = next(todo, None)
    if first is None:  # a finished run (or an empty file): no models to load
        log.info("nothing to score: every id of %s is in %s", input_path, output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.touch()
        return 0, 0
    todo = itertools.chain([first], todo)
    lines = count_lines(input_path)
    task = ScoreTask(options, input_path.parent.resolve())
    results = engine_results(task, todo, batch_size, cluster)
    output.parent.mkdir(parents=True, exist_ok=True)
    started, done, errors = time.perf_counter(), 0, 0
    total = None if lines is None else max(lines - len(answered), 0)  # exact unless ids repeat
    with output.open("a", encoding="utf-8") as out, \
            tqdm(total=total, unit="pair", desc="scoring", mininterval=1.0) as bar:
        for result in results:
            done += 1
            errors += result["error"] is not None
            out.write(json.dumps(result, ensure_ascii=False) + "\n")
            if done % batch_size == 0:  # a batch's rows come together: on disk before the next is scored
                out.flush()
            bar.update(1)
    elapsed = time.perf_counter() - started
    log.info("%d pairs in %.1f s (%.1f pairs/s), %d with errors -> %s",
             done, elapsed, done / max(elapsed, 1e-9), errors, output)
    return done, errors


def features_file(options: ScorerConfig, input_path: Path, out_dir: Path, cluster=None) -> tuple[int, int]:
    """One official-format .npz per row of `input_path` into `out_dir`, listed
    in `out_dir/pairs.jsonl`; (files written, rows failed)."""
    from tqdm import tqdm

    task = FeatureTask(options, input_path.parent.resolve(), out_dir.resolve())
    results = engine_results(task, read_pairs(input_path), FEATURE_BATCH, cluster)
    out_dir.mkdir(parents=True, exist_ok=True)
    index_path = out_dir / "pairs.jsonl"
    written = failed = 0
    with index_path.open("w", encoding="utf-8") as index:
        for result in tqdm(results, total=count_lines(input_path), unit="image", desc="features"):
            if result["problem"]:
                failed += 1
                print(f"capscope features: {result['problem']}", file=sys.stderr)
            else:
                index.write(json.dumps(result["row"], ensure_ascii=False) + "\n")
                written += 1
    log.info("%d feature files in %s (%d rows failed); %s lists them for capscope score",
             written, out_dir, failed, index_path)
    return written, failed
