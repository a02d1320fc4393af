"""The scorer's output rows (docs/formats.md §2.2): each input row's results with
the `model` block that says what produced them, the provenance a number depends
on included."""
from __future__ import annotations

import torch

from .clipscore import PROMPT
from .input_rows import PreparedInput
from .result import MetricResult, ModelInfo, ScoreRow, reproducibility
from .runtime import onnxruntime_version

NO_REGIONS = "none (no metric read regions)"  # the row's model.regions when none were proposed


def score_row(scorer, row: dict, p: PreparedInput, metrics: dict[str, MetricResult]) -> ScoreRow:
    """The output row of input `row` (`p` as read), with `metrics`' results; with no
    result, the id, the error and what names the input only."""
    image_name = p.image_name or (row.get("image") if isinstance(row.get("image"), str) else None)
    if p.errors and not metrics:  # nothing scored: the id, the error and what names the input, no provenance
        return ScoreRow(id=row.get("id"), image=image_name, caption=row.get("caption"), error="; ".join(p.errors))
    return ScoreRow(
        id=row.get("id"), image=image_name, caption=row.get("caption"),
        tokens=p.pair.tokens, regions=p.regions or [], metrics=metrics,
        model=ModelInfo(scorer.clip_name, regions_label(scorer, row, p), scorer.text_model, scorer.demo,
                        **scorer.provenance()),
        error="; ".join(p.errors) or None,
    )


def provenance_of(scorer) -> dict:
    """What a number of `scorer`'s depends on beyond the model names (versions, dtype,
    device, prompt, β, token rule, checkpoint sha256s, each metric's options and verdict)."""
    return reproducibility(
        dtype=compute_dtype(scorer.metrics), precision=scorer.precision, device=device_kind(scorer.device),
        prompt=PROMPT, runtime=runtime_label(scorer.runtime), beta=scorer.beta,
        token_rule=scorer.token_rule, long_captions=scorer.long_captions, checkpoints=scorer.checkpoints,
        metric_options={name: m.options for name, m in scorer.metrics.items() if getattr(m, "options", None)},
        verdict={name: m.verdict.record() for name, m in scorer.metrics.items()
                 if getattr(m, "verdict", None) is not None})


def regions_label(scorer, row: dict, p: PreparedInput) -> str:
    """Where the row's regions came from: its features file, the row itself, the
    scorer's proposer, or none proposed (no metric read regions)."""
    if p.features is not None:
        return "features"
    if row.get("regions") is not None:
        return "given"
    return scorer.region_source if scorer.proposes_regions or scorer.region_source == "given" else NO_REGIONS


def compute_dtype(metrics: dict) -> str:
    """float32, and the CLIP towers' autocast dtype where they use one (`precision`)."""
    autocast = {m.backbone.autocast_dtype for m in metrics.values() if getattr(m, "backbone", None) is not None}
    autocast.discard(None)
    return "float32" + "".join(f", {str(d).removeprefix('torch.')} autocast" for d in autocast)


def runtime_label(runtime: str) -> str:
    """What ran the CLIP text towers: `eager` (PyTorch) or `onnxruntime X.Y.Z`."""
    return f"onnxruntime {onnxruntime_version()}" if runtime == "onnx" else "eager"


def device_kind(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type
