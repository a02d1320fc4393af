"""Each fact in one place: one error base class caught by type, one set of
limits, one image decoder, one JSONL reader, one LRU cache, one checkpoint
reader, an explicit model inventory, no import cycle and no private names
across modules."""
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
