"""What the restructuring must not move: every command and flag that
`capscope ... --help` listed before it (cli_surface.json, taken from the
parser before the move), every REST operation of /openapi.json
(rest_operations.json, likewise), the import paths users rely on, and a
default shown in every --help."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from capscope.cli import build_parser

HERE = Path(__file__).parent


def surface(parser: argparse.ArgumentParser, prefix=(), out=None) -> dict[str, set[str]]:
    """Per command path ("" for the top, "train infometic", ...), its option strings and positionals."""
    out = {} if out is None else out
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                surface(child, (*prefix, name), out)
        else:
            out.setdefault(" ".join(prefix), set()).update(action.option_strings or [action.dest])
    return out


def test_every_command_and_flag_of_before_is_still_accepted():
    before = json.loads((HERE / "cli_surface.json").read_text())
    now = surface(build_parser())
    missing = {command: sorted(set(flags) - now.get(command, set())) for command, flags in before.items()}
    assert {command: flags for command, flags in missing.items() if flags} == {}
    assert len(before) == 21 and "train infometic" in now


def test_every_rest_operation_of_before_is_in_the_schema(tmp_path):
    from capscope.server import create_app

    app = create_app(f"sqlite:///{tmp_path / 'capscope.db'}", scorer_factory=lambda: None)
    now = {f"{method.upper()} {path}" for path, item in app.openapi()["paths"].items() for method in item}
    before = set(json.loads((HERE / "rest_operations.json").read_text()))
    assert sorted(before - now) == []


def test_the_public_import_paths_hold():
    from capscope.annotation import importer
    from capscope.metrics.scorer import Scorer
    from capscope.server import create_app

    assert callable(create_app) and callable(importer.import_captions) and Scorer.__module__ == "capscope.metrics.scorer"


@pytest.mark.parametrize("module", ["capscope.label_efficiency", "capscope.bench.browser_latency"])
def test_the_old_entry_points_still_run(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert "usage:" in done.stdout


def test_every_help_shows_its_defaults():
    """An option with a default (not None or off) says it in its help, in every command."""
    hidden = []

    def walk(parser, prefix):
        parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{prefix} {name}".strip())
            elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS, []) \
                    and action.help != argparse.SUPPRESS:
                if "default" not in (action.help or "").lower():
                    hidden.append(f"{prefix} {action.option_strings[0]}")

    walk(build_parser(), "")
    assert hidden == []


def test_features_help_offers_no_option_that_judges_captions():
    """`capscope features` writes image features: the scoring-only options stay accepted but are not offered."""
    parser = build_parser()
    features = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["features"]
    shown = features.format_help()
    assert "--token-rule" not in shown and "--clip4dm-epsilon" not in shown and "--clip-model" in shown
    assert features.parse_args(["--input", "x", "--out", "y", "--token-rule", "paper"]).token_rule == "paper"


# The import paths the docs give users, as of eb11b64 (README, docs/api.md, docs/diagnose.md, docs/formats.md,
# docs/human-judgements.md, docs/train-infometic.md): module -> names it must offer.
PUBLIC_PATHS = {
    "capscope.metrics.scorer": ["Scorer", "RowError"],
    "capscope.metrics.registry": ["get_spec", "metric_names", "metric_title"],
    "capscope.metrics.errors": ["CapscopeError", "ModelUnavailable"],
    "capscope.metrics.result": ["ScoreRow"],
    "capscope.metrics.infometic": ["capscope_checkpoint"],
    "capscope.diagnose": ["diagnose_captioners", "DiagnosisSummary"],
    "capscope.bench.human": ["load"],
    "capscope.train.training_data": ["read_training_file"],
    "capscope.demo.scenes": [],
    "capscope.server": ["create_app"],
    "capscope.annotation.importer": ["import_captions", "import_captokeneval", "import_predictions"],
    "capscope.db": ["Store"],
    # issue 70: label_studio.py became a package; its names stay where they were
    "capscope.annotation.label_studio": ["tasks", "import_export_rows", "import_export", "labeling_config",
                                         "user_emails", "read_export", "brush_rle", "brush_mask", "WORDS",
                                         "CAPTION", "WRONG"],
    # and app/train/finetune*.py the capscope.train.finetune package (its names: tests/train/test_finetune_parts.py)
    "capscope.train.finetune": ["finetune", "FinetuneConfig", "FinetuneError", "Cancelled", "CheckSet",
                                "format_report", "items_sha256", "labelled", "split_by_image", "figures_path"],
    "capscope.train.finetune.defaults": ["HOLDOUT", "MINUTES"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC_PATHS))
def test_every_documented_import_path_of_before_holds(module):
    import importlib

    loaded = importlib.import_module(module)
    assert [name for name in PUBLIC_PATHS[module] if not hasattr(loaded, name)] == []


def test_import_capscope_offers_the_main_names_without_loading_models():
    script = ("import sys, capscope; assert 'torch' not in sys.modules and 'capscope.metrics' not in sys.modules; "
              "from capscope import Scorer, ScorerConfig, diagnose_captioners, DiagnosisSummary, CapscopeError, "
              "metric_names, METRIC_NAMES; "
              "from capscope.metrics.scorer import Scorer as S; from capscope.common.errors import CapscopeError as E; "
              "assert Scorer is S and CapscopeError is E and 'infometic' in metric_names(); "
              "assert sorted(dir(capscope)) == sorted(capscope.__all__)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-800:]
