"""`capscope diagnose`, end to end: each model's file read in its layout,
whatever is not yet scored scored (resumably, into DIR/scored/), the rows added
up in one streaming pass, then DIR/summary.json, DIR/index.html and its
figures."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from capscope.batch import inputs, pipeline
from capscope.common.errors import CapscopeError
from capscope.common.jsonl import json_lines

from .diagnosis import DiagnosisSummary
from .ngrams import ngram_scores
from .report import write_report
from .summary import add_up

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelFile:
    name: str
    path: Path


def named_file(text: str, asked_as: str) -> ModelFile:
    """NAME=FILE, both sides stripped (how --model and the Compare tab name a
    model's file); else CapscopeError "ASKED_AS NAME=FILE, not 'TEXT'"."""
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise CapscopeError(f"{asked_as} NAME=FILE, not {text!r}")
    return ModelFile(name.strip(), Path(path.strip()))


def parse_model(text: str) -> ModelFile:
    """NAME=FILE, as --model takes it: NAME also names its files in the output folder."""
    model = named_file(text, "--model takes")
    name = model.name
    if any(c in name for c in "/\\") or name.startswith("."):
        raise CapscopeError(f"--model: {name!r} cannot name a file in the output folder; use letters, digits, - and _")
    return model


def scored_file(model: ModelFile, out: Path, options, *, input_format: str, coco: inputs.CocoCaptions | None,
                images: Path | None, batch_size: int, cluster) -> tuple[Path, Path | None]:
    """(the rows to add up, the pairs file they came from or None): a scored
    file as it is; pairs and COCO results scored into DIR/scored/NAME.jsonl,
    resuming where an earlier run stopped."""
    layout = inputs.input_layout(model.path, input_format)
    if layout == "scored":
        return model.path, None
    pairs = model.path
    if layout == "coco-results":
        pairs = out / "pairs" / f"{model.name}.jsonl"
        if not pairs.is_file():
            inputs.write_coco_pairs(model.path, coco, images, pairs)
    target = out / "scored" / f"{model.name}.jsonl"
    log.info("%s: scoring %s into %s", model.name, pairs, target)
    pipeline.score_file(options, pairs, target, batch_size, cluster=cluster)
    return target, pairs


def references_of(pairs: Path | None) -> dict[str, list[str]]:
    """id -> references, from a pairs file (COCO results get theirs from the annotations)."""
    if pairs is None:
        return {}
    return {str(row["id"]): row["references"] for _, row, _ in json_lines(pairs)
            if row and row.get("references") and "id" in row}


def models_rows(models: list[ModelFile], out: Path, options, ngram_inputs: dict, **scoring):
    """(name, its scored rows) for each model, its file scored (`scored_file`,
    with `scoring`) when its turn comes; a model with references puts
    (captions by id, references by id) into `ngram_inputs`, the captions
    gathered as its rows are read."""
    for model in models:
        rows_path, pairs = scored_file(model, out, options, **scoring)
        references = references_of(pairs)
        captions: dict[str, str] = {}
        if references:
            ngram_inputs[model.name] = (captions, references)
        yield model.name, scored_rows(rows_path, captions if references else None)


def diagnose(models: list[ModelFile], out: Path, options, *, metrics: list[str] | None, input_format: str = "auto",
             annotations: Path | None = None, images: Path | None = None, batch_size: int = 32, cluster=None,
             seed: int = 0, draws: int = 1000) -> DiagnosisSummary:
    """Scores what is not yet scored, adds every model's rows up, writes the
    summary, the report and its figures; returns the summary."""
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise CapscopeError("--model: each model needs a name of its own")
    coco = inputs.CocoCaptions(annotations) if annotations else None  # read once, for every model
    out.mkdir(parents=True, exist_ok=True)
    ngram_inputs: dict[str, tuple[dict, dict]] = {}
    diagnosis = add_up(models_rows(models, out, options, ngram_inputs, input_format=input_format, coco=coco,
                                   images=images, batch_size=batch_size, cluster=cluster), metrics)
    summary = diagnosis.summary(seed=seed, draws=draws, ngram_scores=ngram_scores(ngram_inputs))
    (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=1) + "\n", encoding="utf-8")
    worst = {(name, metric): diagnosis.worst(name, metric) for name in names for metric in summary.metrics}
    write_report(summary, out, worst, _load_image)
    return summary


def diagnose_captioners(captioners: dict[str, str | Path], out: str | Path, *, metrics: list[str] | None = None,
                        annotations: str | Path | None = None, images: str | Path | None = None,
                        input_format: str = "auto", demo: bool = False, device: str = "auto", batch_size: int = 32,
                        draws: int = 1000, seed: int = 0, **scorer_options) -> DiagnosisSummary:
    """What each captioner gets wrong, and which is better: `capscope diagnose`
    from Python. `captioners` maps a name to its file (COCO results with
    `annotations` and `images`, capscope pairs, or scored rows); `metrics`
    (default infometic and clip-s) are scored where rows lack them;
    `scorer_options` are any other `ScorerConfig` fields (token_rule, regions,
    clip_pretrained, ...). Writes OUT/summary.json and OUT/index.html as the
    command does, and returns the summary as typed objects."""
    from capscope.metrics.config import ScorerConfig

    options = ScorerConfig(tuple(metrics or ("infometic", "clip-s")), device=device, demo=demo).replace(**scorer_options)
    models = [ModelFile(name, Path(path)) for name, path in captioners.items()]
    return diagnose(models, Path(out), options, metrics=list(metrics) if metrics else None,
                    input_format=input_format, annotations=Path(annotations) if annotations else None,
                    images=Path(images) if images else None, batch_size=batch_size, seed=seed, draws=draws)


def scored_rows(path: Path, captions: dict | None = None):
    """The rows of a scored file, one at a time (a line that is no score row is
    logged and left out); a caption by id into `captions` when asked."""
    for number, row, why in json_lines(path):
        if why or not isinstance(row, dict) or "caption" not in row:
            log.warning("%s line %d: not a score row (%s); left out", path.name, number, why or "no caption")
            continue
        row.setdefault("metrics", {})
        row.setdefault("tokens", [])
        row.setdefault("regions", [])
        if captions is not None and isinstance(row.get("caption"), str):
            captions[str(row.get("id"))] = row["caption"]
        yield row


def _load_image(path: str):
    from capscope.metrics.images import ImageError, read_image

    try:
        return read_image(Path(path))
    except (ImageError, OSError):
        return None
