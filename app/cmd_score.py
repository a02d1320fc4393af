"""`capscope score`, `capscope features` and `capscope models`."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from capscope.metrics.jsonl import json_lines
from capscope.metrics.regions import PROPOSERS
from capscope.metrics.registry import METRIC_NAMES
from capscope.metrics.result import ScoreRow

from .cli import CapscopeError

log = logging.getLogger("capscope")

METRICS = METRIC_NAMES  # live: a metric registered later is a valid choice
REGION_SOURCES = (*PROPOSERS, "given")
# `capscope models download NAME`: the released checkpoints come from their authors' Google Drive folders
DOWNLOADS = ("infometic", "pacs", "clip", "spacy")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that builds a Scorer."""
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--clip-model", default=None, help="open_clip model name (default ViT-B-32)")
    parser.add_argument("--clip-pretrained", default=None, help="open_clip pretrained tag or a local checkpoint file (default openai)")
    parser.add_argument("--infometic-checkpoint", default=None, help="released best_model.pth or a capscope-trained checkpoint")
    parser.add_argument("--pacs-checkpoint", default=None, help="PAC-S checkpoint file (state_dict with OpenAI CLIP keys)")
    parser.add_argument("--alpha-clip-checkpoint", default=None,
                        help="Alpha-CLIP visual checkpoint for HICE-S region features (else masked crops)")
    parser.add_argument("--beta", type=float, default=0.1, help="threshold for correct tokens / mentioned regions (paper: 0.1)")
    parser.add_argument("--token-rule", default="paper", choices=["paper", "relative"],
                        help="paper: share > beta; relative: beta scaled by the number of semantic words")


def register(sub) -> None:
    score = sub.add_parser("score", help="score a JSONL file of image-caption pairs")
    score.add_argument("--input", required=True, type=Path)
    score.add_argument("--output", required=True, type=Path)
    score.add_argument("--metric", nargs="+", action="extend", choices=METRICS, dest="metrics",
                       help="one or more metrics (default infometic)")
    score.add_argument("--batch-size", type=int, default=32)
    score.add_argument("--regions", default="classic", choices=REGION_SOURCES)
    score.add_argument("--max-regions", type=int, default=20)
    add_model_options(score)
    score.set_defaults(func=run_score)

    features = sub.add_parser("features", help="write official-format InfoMetIC image features (.npz) for a JSONL of images")
    features.add_argument("--input", required=True, type=Path)
    features.add_argument("--out", required=True, type=Path)
    features.add_argument("--regions", default="classic", choices=REGION_SOURCES)
    features.add_argument("--max-regions", type=int, default=20)
    add_model_options(features)
    features.set_defaults(func=run_features)

    models = sub.add_parser("models", help="list the model components, where they come from and whether they are here")
    models.add_argument("action", nargs="?", choices=["list", "download"], default="list")
    models.add_argument("names", nargs="*", metavar="NAME",
                        help=f"with download: {', '.join(DOWNLOADS)}; none: everything with a public source but the "
                             "released InfoMetIC and PAC-S checkpoints")
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=run_models)


def build_scorer(args, metrics):
    from capscope.metrics.scorer import Scorer

    try:
        return Scorer(
            metrics, device=args.device, clip_model=args.clip_model, clip_pretrained=args.clip_pretrained,
            regions=getattr(args, "regions", "classic"), max_regions=getattr(args, "max_regions", 20),
            infometic_checkpoint=args.infometic_checkpoint, pacs_checkpoint=args.pacs_checkpoint,
            alpha_clip_checkpoint=args.alpha_clip_checkpoint, beta=args.beta, token_rule=args.token_rule,
        )
    except ValueError as err:
        raise CapscopeError(str(err)) from None


# ---------------------------------------------------------------- score

def read_pairs(path: Path):
    """(line number, row or None, error) for every non-blank line of a JSONL file."""
    if not path.is_file():
        raise CapscopeError(f"input file {path} not found")
    for number, row, why in json_lines(path):
        yield number, row, (f"line {number}: {why}" if why else None)


def done_ids(path: Path) -> set:
    """Ids already in an output file (for resuming); a torn last line is dropped."""
    if not path.exists():
        return set()
    ids, good = set(), 0
    with path.open("rb") as handle:
        for raw in handle:
            try:
                ids.add(json.loads(raw)["id"])
                good += len(raw)
            except (json.JSONDecodeError, KeyError, UnicodeDecodeError):
                break
    with path.open("r+b") as handle:  # cut a line torn by a crash
        handle.truncate(good)
    return ids


def error_row(row: dict | None, error: str) -> dict:
    return ScoreRow.failed(row, error).to_dict()


def run_score(args) -> int:
    from tqdm import tqdm

    metrics = args.metrics or ["infometic"]
    rows = list(read_pairs(args.input))
    skip = done_ids(args.output)
    todo = [(n, row, err) for n, row, err in rows if row is None or not _has_id(row) or row["id"] not in skip]
    if skip:
        log.info("resuming: %d rows already in %s", len(rows) - len(todo), args.output)
    scorer = build_scorer(args, metrics)
    if scorer.demo:
        log.warning("DEMO MODEL: pretrained weights could not be had; scores come from capscope's "
                    "tiny coloured-shapes model and mean nothing on photos")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    base = args.input.parent
    started, errors = time.perf_counter(), 0
    with args.output.open("a", encoding="utf-8") as out, tqdm(total=len(todo), unit="pair", desc="scoring") as bar:
        for start in range(0, len(todo), args.batch_size):
            chunk = todo[start : start + args.batch_size]
            valid = [row for _, row, err in chunk if err is None and _has_id(row)]
            scored = iter(scorer.score_batch(valid, base_dir=base)) if valid else iter(())
            for number, row, err in chunk:
                if err is None and not _has_id(row):
                    err = f"line {number}: row has no string \"id\""
                result = error_row(row, err) if err else next(scored)
                errors += result["error"] is not None
                out.write(json.dumps(result, ensure_ascii=False) + "\n")
            out.flush()
            bar.update(len(chunk))
    elapsed = time.perf_counter() - started
    log.info("%d pairs in %.1f s (%.1f pairs/s), %d with errors -> %s",
             len(todo), elapsed, len(todo) / max(elapsed, 1e-9), errors, args.output)
    return 0


def _has_id(row: dict) -> bool:
    return isinstance(row.get("id"), str) and bool(row["id"])


# ---------------------------------------------------------------- features

def run_features(args) -> int:
    from tqdm import tqdm

    from capscope.metrics.scorer import RowError

    scorer = build_scorer(args, ["infometic"] if args.infometic_checkpoint else ["infoclip"])
    metric = next(iter(scorer.metrics.values()))
    args.out.mkdir(parents=True, exist_ok=True)
    index_path = args.out / "pairs.jsonl"
    written = failed = 0
    with index_path.open("w", encoding="utf-8") as index:
        for number, row, err in tqdm(list(read_pairs(args.input)), unit="image", desc="features"):
            try:
                if err:
                    raise RowError(err)
                name = extract_features(scorer, metric.backbone, row, args.input.parent, args.out)
                index.write(json.dumps({**row, "features": name}, ensure_ascii=False) + "\n")
                written += 1
            except RowError as problem:
                failed += 1
                print(f"capscope features: line {number}: {problem}", file=sys.stderr)
    log.info("%d feature files in %s (%d rows failed); %s lists them for capscope score",
             written, args.out, failed, index_path)
    return 0 if written or not failed else 1


def extract_features(scorer, backbone, row: dict, base: Path, out_dir: Path) -> str:
    """Every candidate region's raw CLIP feature, the kept (clustered) ones indexed."""
    import re

    from capscope.metrics.regions import given_regions, select_regions
    from capscope.metrics.scorer import RowError, row_image, write_features

    if not _has_id(row) or row.get("image") is None:
        raise RowError("row needs a string id and an image")
    image, _ = row_image(row["image"], base)
    if row.get("regions") is not None:
        candidates = given_regions(row["regions"], *image.size)
    else:
        candidates = scorer.proposer().propose(image) if scorer.region_source != "given" else []
    kept = select_regions(candidates, scorer.max_regions)
    kept_index = [next(i for i, c in enumerate(candidates) if c is k) for k in kept]
    features = backbone.image_features([image], [candidates])[0]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", row["id"]) + ".npz"
    write_features(out_dir / name, features.region_feats, [c.box for c in candidates],
                   features.global_feat, image.size, kept_index)
    return name


# ---------------------------------------------------------------- models

def run_models(args) -> int:
    from capscope.metrics import loading

    if args.names and args.action != "download":
        raise CapscopeError(f"models: names ({' '.join(args.names)}) go with download: capscope models download NAME")
    if args.action == "download":
        return download_named(args.names) if args.names else download_models()
    rows = loading.components()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        mark = "present" if row["present"] else "MISSING"
        print(f"{row['component']:<11} {mark:<8} {row['loads']}\n{'':<20} from: {row['from']}\n{'':<20} get:  {row['get']}")
    return 0


def download_named(names: list[str]) -> int:
    """`capscope models download infometic pacs ...`: each named component; the
    first that cannot be had stops the command with its one line."""
    from capscope.metrics import downloads, loading

    unknown = [n for n in names if n not in DOWNLOADS]
    if unknown:
        raise CapscopeError(f"models download: unknown name {unknown[0]!r}; choose from {', '.join(DOWNLOADS)}")
    for name in dict.fromkeys(names):
        if name in downloads.RELEASES:
            downloads.download_release(name)
        elif name == "clip":
            loading.create_open_clip("ViT-B-32", "openai", loading.resolve_device("cpu"))
            print("CLIP ViT-B-32/openai: ready")
        elif not _download_spacy():
            raise CapscopeError("models download: spaCy en_core_web_sm download failed (python -m spacy download en_core_web_sm)")
    return 0


def _download_spacy() -> bool:
    import subprocess

    from capscope.metrics import loading

    if loading.spacy_pipeline_present():
        print("spaCy en_core_web_sm: present")
        return True
    ok = subprocess.call([sys.executable, "-m", "spacy", "download", "en_core_web_sm"]) == 0
    print("spaCy en_core_web_sm:", "ready" if ok else "download failed")
    return ok


def download_models() -> int:
    """Fetch what has a stable public source; say how to get the rest."""
    from capscope.metrics import loading

    failures = 0
    try:
        loading.create_open_clip("ViT-B-32", "openai", loading.resolve_device("cpu"))
        print("CLIP ViT-B-32/openai: ready")
    except loading.ModelUnavailable as err:
        failures += 1
        print(err)
    if not loading.spacy_pipeline_present():
        failures += not _download_spacy()
    for row in loading.components():
        if not row["present"] and row["component"] not in ("CLIP", "spaCy"):
            print(f"{row['component']}: {row['get']}")
    return 1 if failures else 0
