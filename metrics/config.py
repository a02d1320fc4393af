"""Every option of a `Scorer`, declared once.

`ScorerConfig` is the Scorer's typed config, as open_clip's model configs are
for its models: each field carries its default and its meaning, and from it
come the command-line flags of every command that builds a Scorer
(`add_flags`, `from_args`), the server's scorer, and the options table of
docs/api.md (`options_table`, checked by the tests). Adding an option is one
field here plus the code that reads it.

    config = ScorerConfig(metrics=("infometic", "clip-s"), device="cpu", regions="given")
    scorer = Scorer(config=config)            # or Scorer(["infometic"], device="cpu")
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from .constants import (BETA, CLIP4DM_EPSILON, CLIP4DM_LAYERS, DEFAULT_LONG_CAPTIONS, DEFAULT_TOKEN_RULE,
                        LONG_CAPTIONS, PRECISIONS, RUNTIMES, TOKEN_RULES)

if TYPE_CHECKING:
    from .encoder import CropStyle

DEVICES = ("auto", "cpu", "cuda")  # what --device offers; the Scorer takes any torch.device string
REGION_SOURCES = ("classic", "sam", "yolo", "fastsam", "mobilesam", "given")


def option(default: Any, meaning: str, *, flag: bool = True, choices: Iterable[str] | None = None,
           shown: str | None = None, scoring_only: bool = False, path: bool = False, kind: type | None = None,
           checked_as: str | None = None):
    """A ScorerConfig field: `meaning` is its line in docs/api.md and, without
    the backticks, its --help; `flag` gives it a command-line flag named after
    it; `shown` is how docs/api.md shows the default when the value alone does
    not say it; `scoring_only` hides the flag where nothing is judged
    (`capscope features`); `path` makes a local file absolute (for Ray workers);
    `checked_as` names the option in the error for a value outside `choices`."""
    return field(default=default, metadata={
        "meaning": meaning, "flag": flag, "choices": tuple(choices) if choices else None, "shown": shown,
        "scoring_only": scoring_only, "path": path, "kind": kind, "checked_as": checked_as})


@dataclass(frozen=True)
class ScorerConfig:
    """What a Scorer loads and how it judges; frozen, so that it can be shared
    and sent to Ray workers. `docs/api.md` shows every field as a table."""

    metrics: tuple[str, ...] = option(
        ("infometic",), "metric names from the registry (`metric_names()`), or one name", flag=False)
    device: str = option(
        "auto", "`auto` picks CUDA when a GPU is visible, else the CPU; or `cpu`, `cuda`, `cuda:1`, ...",
        choices=DEVICES)
    clip_model: str | None = option(
        None, "open_clip architecture of the CLIP that `clip-s`, `infoclip`, `hice`, `clip4dm` read (InfoMetIC and "
        "PAC-S bring their own)", shown="None (ViT-B-32)")
    clip_pretrained: str | None = option(
        None, "its weights: an open_clip tag or a local checkpoint file; naming this or `clip_model` turns the demo "
        "fallback off for that CLIP", shown="None (openai)", path=True)
    clip_crop: CropStyle | None = option(
        None, "an `encoder.CropStyle` (margin, canvas) for a CLIP trained on styled region crops",
        flag=False, shown="None (plain box crop)")
    regions: str = option(
        "classic", "region source for rows without `regions`: `classic` (no weights), `sam`, `yolo`, `fastsam`, "
        "`mobilesam` (weights loaded, or fetched when online, at first use), or `given` (no proposals); regions are "
        "proposed only when a loaded metric reads them (`infometic`, `infoclip`, `hice`)", choices=REGION_SOURCES,
        checked_as="region source")
    max_regions: int = option(
        20, "proposed regions kept (K-means over boxes, the most confident per cluster); given regions are kept "
        "as given", kind=int)
    infometic_checkpoint: str | None = option(
        None, "InfoMetIC file (the released best_model.pth or a capscope-trained one); else "
        "`CAPSCOPE_INFOMETIC_CHECKPOINT`, else `<cache>/infometic/best_model.pth`, else the demo model", path=True)
    pacs_checkpoint: str | None = option(
        None, "PAC-S file; else `CAPSCOPE_PACS_CHECKPOINT`, else `<cache>/pacs/clip_ViT-B-32.pth` (no demo "
        "fallback)", scoring_only=True, path=True)
    pacs_model: str = option(
        "ViT-B-32-quickgelu", "the open_clip architecture the PAC-S checkpoint is loaded into", flag=False)
    alpha_clip_checkpoint: str | None = option(
        None, "Alpha-CLIP visual checkpoint for `hice`'s region features; else `CAPSCOPE_ALPHA_CLIP_CHECKPOINT`, "
        "else masked crops", scoring_only=True, path=True)
    clip4dm_epsilon: float = option(
        CLIP4DM_EPSILON, "`clip4dm`: a semantic word whose attribution is below it is wrong (the released "
        "main.py's --epsilon)", scoring_only=True, kind=float)
    clip4dm_layers: int = option(
        CLIP4DM_LAYERS, "`clip4dm`: relevance from the last N text blocks (the released main.py's "
        "--start_layer_text)", scoring_only=True, kind=int)
    precision: str = option(
        "fp32", "`fp32`, `bf16` or `fp16`: the CLIP towers in float32 or under autocast (bf16 is the CPU's fast "
        "one); the rest stays float32; on CUDA fp32 runs with TF32 off; `capscope bench` shows the speed and the "
        "change in scores of each", choices=PRECISIONS, checked_as="precision")
    runtime: str = option(
        "auto", "what runs the CLIP text towers: `onnx` (ONNX Runtime, CPU and fp32 only: a caption's pass in "
        "about half eager's time, features within 4e-6; its graph is exported once per model architecture into "
        "capscope's cache), `eager` (PyTorch) or `auto` (onnx where it can run and onnxruntime is installed, else "
        "eager); rows say which ran (`model.runtime`)", choices=RUNTIMES, checked_as="runtime")
    beta: float = option(
        BETA, "InfoMetIC's β for `infometic`/`infoclip`: the attention share above which a word is correct, a "
        "region mentioned (sec. 3.3)", scoring_only=True, kind=float)
    token_rule: str = option(
        DEFAULT_TOKEN_RULE, "`infometic`/`infoclip` word and region rule: `relative` (share > min(β, β·5/n) for n "
        "semantic words in the window, n regions; holds at every caption length and region count) or `paper` "
        "(share > β, which flags every word of a caption with more than ten semantic words)",
        choices=TOKEN_RULES, scoring_only=True, checked_as="token rule")
    long_captions: str = option(
        DEFAULT_LONG_CAPTIONS, "how a caption longer than a model reads (InfoMetIC 30 BPE pieces, CLIP 77 tokens) "
        "is read: `windows` (word-level metrics judge every word, window by window; CLIP-S and PAC-S cut at 77 "
        "tokens, their papers' way), `cut` (every metric reads what fits, as the released codes) or `all-windows` "
        "(CLIP-S and PAC-S too, mean over windows)", choices=LONG_CAPTIONS, scoring_only=True,
        checked_as="long-caption reading")
    spacy_model: str = option(
        "en_core_web_sm", "tokeniser and tagger of semantic words, and the parser of HICE-S's phrases; if not "
        "installed, `spacy.blank(\"en\")` with a warning", flag=False)
    demo: bool | None = option(
        None, "`None`: capscope's demo model stands in where pretrained weights cannot be had (rows say "
        "`demo: true`); `True`: every metric that has a demo model uses it, so a run is demo as a whole; `False`: "
        "never, a missing weight raises `ModelUnavailable`. The flag `--demo` gives True, its absence False: a "
        "command never mixes real and demo weights")
    skip_unavailable: bool = option(
        False, "leave out a metric whose model cannot be had, its reason in `scorer.unavailable`, instead of "
        "raising", flag=False)

    def __post_init__(self):
        if isinstance(self.metrics, str):  # ScorerConfig(metrics="clip-s") means one metric, not five letters
            object.__setattr__(self, "metrics", (self.metrics,))
        else:
            object.__setattr__(self, "metrics", tuple(self.metrics))
        for f in fields(self):
            value, choices = getattr(self, f.name), f.metadata["choices"]
            if f.metadata["checked_as"] and value not in choices:
                raise ValueError(f"unknown {f.metadata['checked_as']} {value!r}; choose from {', '.join(choices)}")

    def replace(self, **changes) -> ScorerConfig:
        """A copy with `changes`; a name that is no option raises TypeError naming the options."""
        unknown = sorted(set(changes) - set(option_names()))
        if unknown:
            raise TypeError(f"unknown Scorer option {', '.join(unknown)}; the options are {', '.join(option_names())}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_args(cls, args: argparse.Namespace, metrics: Iterable[str] | None = None,
                  base: ScorerConfig | None = None) -> ScorerConfig:
        """`base` (default: every option at its default) with what a command's
        parsed flags say (flags the command lacks keep the base's values) and
        `metrics`; local files made absolute, so that Ray workers started
        elsewhere find them; `demo` True or False where the command has --demo
        (the server has not: the demo model stands in there)."""
        values: dict[str, Any] = {} if metrics is None else {"metrics": tuple(metrics)}
        for f in fields(cls):
            if f.metadata["flag"] and hasattr(args, f.name):
                value = getattr(args, f.name)
                values[f.name] = _absolute_if_file(value) if f.metadata["path"] else value
        if "demo" in values:  # --demo or not: a command never mixes real and demo weights
            values["demo"] = bool(values["demo"])
        return (base or cls()).replace(**values)


def option_names() -> list[str]:
    return [f.name for f in fields(ScorerConfig)]


def flagged(names: Iterable[str] | None = None, leave_out: Iterable[str] = ()) -> list[str]:
    """The options that have a flag, in declaration order (of `names` when given)."""
    left_out = set(leave_out)
    return [f.name for f in fields(ScorerConfig) if f.metadata["flag"] and f.name not in left_out
            and (names is None or f.name in names)]


def add_flags(parser, names: Iterable[str] | None = None, *, leave_out: Iterable[str] = (),
              defaults: dict[str, Any] | None = None, hide_scoring: bool = False) -> None:
    """One flag per option (`--clip-model` for `clip_model`), with its meaning
    and default as help; `defaults` changes a command's default (correlate
    cuts long captions, as the published tables' code did); `hide_scoring`
    keeps the options that only judge captions out of --help, still accepted."""
    defaults = defaults or {}
    by_name = {f.name: f for f in fields(ScorerConfig)}
    for name in flagged(names, leave_out):
        f = by_name[name]
        default = defaults.get(name, f.default)
        flag = "--" + name.replace("_", "-")
        if name == "demo":
            parser.add_argument(flag, action="store_true", help=_help(f.metadata["meaning"]))
            continue
        kwargs: dict[str, Any] = {"default": default, "help": _help(f.metadata["meaning"], default)}
        if f.metadata["choices"]:
            kwargs["choices"] = f.metadata["choices"]
        if f.metadata["kind"]:
            kwargs["type"] = f.metadata["kind"]
        if hide_scoring and f.metadata["scoring_only"]:
            kwargs["help"] = argparse.SUPPRESS
        parser.add_argument(flag, **kwargs)


def _help(meaning: str, default: Any = None) -> str:
    text = meaning.replace("`", "").replace("%", "%%")
    return f"{text} (default {default})" if default is not None else text


def options_table() -> str:
    """docs/api.md's table of the Scorer's options, made from the fields."""
    rows = ["| option | default | meaning | flag |", "|---|---|---|---|"]
    for f in fields(ScorerConfig):
        shown = f.metadata["shown"] or repr(f.default).replace("'", '"')
        flag = f"`--{f.name.replace('_', '-')}`" if f.metadata["flag"] else ""
        rows.append(f"| `{f.name}` | `{shown}` | {f.metadata['meaning']} | {flag} |")
    return "\n".join(rows)


def _absolute_if_file(value: str | None) -> str | None:
    """A local file as an absolute path; a tag (open_clip's "openai") as given."""
    return str(Path(value).resolve()) if value and Path(value).is_file() else value


if __name__ == "__main__":  # python -m capscope.metrics.config: the table for docs/api.md
    print(options_table())
