"""Each fact in one place: one error base class caught by type, one set of
limits, one image decoder, one JSONL reader, one LRU cache, one checkpoint
reader, an explicit model inventory, no import cycle and no private names
across modules."""
import ast
from pathlib import Path

import pytest

from capscope.cli import main
from capscope.metrics.errors import CapscopeError, ModelUnavailable


# ---------------------------------------------------------------- errors

def test_user_errors_share_one_base_and_keep_their_old_homes():
    from capscope import cli
    from capscope.annotation.errors import AnnotationError, NotFound
    from capscope.metrics import loading, scorer

    assert cli.CapscopeError is CapscopeError
    assert loading.ModelUnavailable is ModelUnavailable
    for cls in (ModelUnavailable, scorer.RowError, AnnotationError, NotFound):
        assert issubclass(cls, CapscopeError)
    assert issubclass(ModelUnavailable, RuntimeError) and issubclass(scorer.RowError, ValueError)


@pytest.mark.parametrize("error", [ModelUnavailable("CLIP: no weights here"), CapscopeError("bad flag")])
def test_the_cli_prints_any_user_error_as_one_line(monkeypatch, capsys, error):
    import capscope.cmd_score as cmd_score

    def fail(_args):
        raise error

    monkeypatch.setattr(cmd_score, "run_models", fail)
    assert main(["models"]) == 2
    assert capsys.readouterr().err == f"capscope models: error: {error}\n"


def test_other_errors_still_show_their_traceback(monkeypatch):
    import capscope.cmd_score as cmd_score

    def fail(_args):
        raise KeyError("a bug")

    monkeypatch.setattr(cmd_score, "run_models", fail)
    with pytest.raises(KeyError):
        main(["models"])


# ---------------------------------------------------------------- limits

def test_one_caption_and_reference_rule_for_every_door():
    from capscope.metrics.limits import MAX_CAPTION_CHARS, MAX_REFERENCES
    from capscope.metrics.text import check_caption, check_references

    assert check_caption("x" * MAX_CAPTION_CHARS) == ""
    assert check_caption("x" * (MAX_CAPTION_CHARS + 1)) == "caption has 1001 characters (limit 1000)"
    assert check_references(None) == "" and check_references(["a dog"] * MAX_REFERENCES) == ""
    assert "at most 50 references" in check_references(["a dog"] * (MAX_REFERENCES + 1))
    assert "at most 50 references" in check_references(["x" * (MAX_CAPTION_CHARS + 1)])
    assert "non-empty strings" in check_references(["a dog", " "])


def test_given_regions_over_the_limit_are_refused():
    from capscope.metrics.limits import MAX_REGIONS
    from capscope.metrics.regions import given_regions

    assert len(given_regions([[0, 0, 5, 5]] * MAX_REGIONS, 10, 10)) == MAX_REGIONS
    with pytest.raises(ValueError, match="101 regions"):
        given_regions([[0, 0, 5, 5]] * (MAX_REGIONS + 1), 10, 10)


# ---------------------------------------------------------------- helpers

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "metrics", "annotation", "bench", "demo", "db")


def package_trees():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"))
