"""A Scorer option is declared once, in `ScorerConfig`: the flags of every
command that builds a Scorer, the server's scorer and docs/api.md's table are
made from it (the table is checked in tests/metrics/test_api_reference.py, the
reading in the Scorer there too). Each test here fails when an option is added
or typed in one place only."""
from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path

import pytest

from capscope.cli import build_parser
from capscope.metrics.config import ScorerConfig, flagged

ROOT = Path(__file__).resolve().parents[2]
# command -> the options it leaves out on purpose (evaluate: each gold item brings its regions; PAC-S and
# Alpha-CLIP judge no word or region there); serve takes the two that decide its verdicts and speed
SCORER_COMMANDS = {
    "score": (), "features": (), "diagnose": (), "correlate": (),
    "evaluate": ("regions", "max_regions", "pacs_checkpoint", "alpha_clip_checkpoint"),
}
SERVE_OPTIONS = ("token_rule", "precision")


def changed_value(f: dataclasses.Field):
    """A value other than the option's default, as its flag takes it."""
    if f.metadata["choices"]:
        return next(choice for choice in f.metadata["choices"] if choice != f.default)
    if f.metadata["kind"] in (int, float):
        return f.default + 1
    return True if f.name == "demo" else f"changed-{f.name}"


CHANGED = {f.name: changed_value(f) for f in dataclasses.fields(ScorerConfig) if f.name in flagged()}


def subparser(name: str) -> argparse.ArgumentParser:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def given_flags(options) -> list[str]:
    argv = []
    for name in options:
        flag = "--" + name.replace("_", "-")
        argv += [flag] if name == "demo" else [flag, str(CHANGED[name])]
    return argv


@pytest.mark.parametrize("command", sorted(SCORER_COMMANDS))
def test_every_option_reaches_the_config_through_each_command(command):
    """Each flag the config declares is offered by the command and comes back in its config."""
    options = flagged(leave_out=SCORER_COMMANDS[command])
    required = {"score": ["--input", "i", "--output", "o"], "features": ["--input", "i", "--out", "o"],
                "diagnose": ["--model", "m=f", "--out", "o"], "correlate": ["--benchmark", "captokeneval"],
                "evaluate": ["--gold", "g", "--metric", "infometic"]}[command]
    args = subparser(command).parse_args(required + given_flags(options))
    config = ScorerConfig.from_args(args, ["infometic"])
    assert {name: getattr(config, name) for name in options} == {name: CHANGED[name] for name in options}


def test_the_server_takes_its_options_from_the_config():
    args = subparser("serve").parse_args(given_flags(SERVE_OPTIONS))
    from capscope.server.scoring import SERVER_CONFIG, Models

    config = ScorerConfig.from_args(args, base=SERVER_CONFIG)
    assert (config.token_rule, config.precision, config.skip_unavailable, config.demo) == ("paper", "bf16", True, None)
    assert Models(lambda metrics: None, config=config).token_rule == "paper"
    with pytest.raises(TypeError, match="unknown Scorer option"):
        Models(lambda metrics: None, no_such_option=1)


def option_flags() -> set[str]:
    return {"--" + f.name.replace("_", "-") for f in dataclasses.fields(ScorerConfig)}


def hand_made_flags(tree: ast.AST) -> list[str]:
    """Flags named after a Scorer option given to add_argument by hand."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and arg.value in option_flags():
                    found.append(arg.value)
    return found


# flags that share a Scorer option's name but not its meaning, each with why
NOT_THE_SCORERS = {
    "app/commands/annotation_store.py": ["--regions", "--max-regions"],  # the importer's proposer; takes `none` too
    "app/commands/bench.py": ["--device", "--precision"],  # bench compares a list of precisions on one device
    # where `train clip|infometic|demo` train, not score; the CLIP `train infometic` builds a new head on
    "app/commands/demo.py": ["--device", "--device", "--clip-model", "--clip-pretrained", "--device"],
    "app/bench/device_parity.py": ["--device"],  # the GPU compared with the CPU (default cuda)
}


def test_no_command_declares_a_scorer_flag_by_hand():
    found = {str(path.relative_to(ROOT)): hand_made_flags(ast.parse(path.read_text(encoding="utf-8")))
             for path in sorted((ROOT / "app").rglob("*.py"))}
    assert {path: flags for path, flags in found.items() if flags} == NOT_THE_SCORERS


def test_a_hand_made_flag_would_be_found():
    tree = ast.parse('parser.add_argument("--beta", type=float, default=0.1)')
    assert hand_made_flags(tree) == ["--beta"]


def typed_betas(tree: ast.AST) -> list[int]:
    """Lines where code gives a beta the number 0.1: a parameter's default, a keyword, an assignment."""
    def is_point_one(node) -> bool:
        return isinstance(node, ast.Constant) and node.value == 0.1

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arguments):
            named = node.posonlyargs + node.args
            pairs = list(zip(named[len(named) - len(node.defaults):], node.defaults))
            pairs += [(arg, d) for arg, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            lines += [d.lineno for arg, d in pairs if "beta" in arg.arg.lower() and is_point_one(d)]
        elif isinstance(node, ast.keyword) and node.arg and "beta" in node.arg.lower() and is_point_one(node.value):
            lines.append(node.value.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and is_point_one(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            lines += [node.lineno for t in targets if "beta" in ast.unparse(t).lower()]
    return lines


def test_beta_is_typed_in_one_place():
    """metrics/constants.py's BETA; everyone else reads it."""
    typed = [f"{path.relative_to(ROOT)}:{line}" for folder in ("app", "metrics", "annotation")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for line in typed_betas(ast.parse(path.read_text(encoding="utf-8")))]
    assert typed == ["metrics/constants.py:5"]
    assert typed_betas(ast.parse("def f(beta: float = 0.1): g(beta=0.1)")) == [1, 1]


def test_an_option_added_in_one_place_only_is_caught():
    """Adding a field to the config without reading it in the Scorer, or a
    Scorer keyword without a field, fails one of the checks above."""
    with pytest.raises(TypeError, match="unknown Scorer option"):
        ScorerConfig().replace(new_option=1)
    with pytest.raises(TypeError, match="unknown Scorer option"):
        from capscope.metrics.scorer import Scorer

        Scorer(["clip-s"], new_option=1)
