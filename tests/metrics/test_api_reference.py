"""docs/api.md against the code: its example runs, and every `Scorer` option
is declared once, in `ScorerConfig`, whose table the page shows."""
import inspect
import math
import re
from pathlib import Path

import pytest

from capscope.metrics import model_sources
from capscope.metrics import scorer as scorer_module
from capscope.metrics import verdict as verdict_module
from capscope.metrics.config import option_names, options_table
from capscope.metrics.scorer import Scorer

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
SECTION = re.compile(r"^\s*(Args|Arguments|Returns|Raises|Yields|Attributes|Example|Examples|Note|Notes):\s*$")


def options() -> list[str]:
    return option_names()


def example_code(page: str) -> str:
    """The first ```python block under the page's "## Example" heading."""
    _, found, rest = page.partition("\n## Example\n")
    assert found, "docs/api.md has no '## Example' section"
    match = re.search(r"^```python\n(.*?)^```", rest, re.S | re.M)
    assert match, "the Example section has no ```python block"
    return match.group(1)


def args_section(doc: str) -> str:
    """The text of a Google-style docstring's Args section."""
    lines = inspect.cleandoc(doc).splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), None)
    assert start is not None, "Scorer.__init__'s docstring has no Args section"
    body = []
    for line in lines[start + 1:]:
        if SECTION.match(line) and not line.startswith(" "):
            break
        body.append(line)
    return "\n".join(body)


def test_the_scorer_declares_no_option_of_its_own():
    """Scorer(metrics, *, config, **options): every option is a ScorerConfig field, nowhere else."""
    assert list(inspect.signature(Scorer.__init__).parameters) == ["self", "metrics", "config", "options"]
    assert "**options" in args_section(Scorer.__init__.__doc__ or "") and "ScorerConfig" in Scorer.__init__.__doc__
    assert {"device", "regions", "beta", "token_rule", "precision", "demo"} <= set(options())


def test_the_api_page_table_is_the_one_the_config_makes():
    page = API_PAGE.read_text(encoding="utf-8")
    assert options_table() in page, "docs/api.md's table is stale: python -m capscope.metrics.config prints it"


def test_every_option_is_read_where_the_scorer_is_built():
    """An option declared but never read would be a flag that does nothing (the
    scorer's `Verdict.from_config` reads the token rule and β)."""
    code = "".join(Path(module.__file__).read_text(encoding="utf-8") for module in (scorer_module, model_sources,
                                                                                    verdict_module))
    unread = [name for name in options() if f"config.{name}" not in code]
    assert unread == []


def test_methods_documented():
    for method in (Scorer.score, Scorer.score_batch, Scorer.results):
        doc = inspect.getdoc(method) or ""
        assert "Args:" in doc and "Returns:" in doc and "Raises:" in doc, method.__name__
    assert "RowError" in inspect.getdoc(Scorer.score)
    assert "ModelUnavailable" in inspect.getdoc(Scorer.__init__)


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_api_page_example_runs(monkeypatch, tmp_path, capsys):
    # offline and without any pretrained file, as the page says: the demo model stands in
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path / "cache"))
    for variable in ("CAPSCOPE_NO_DEMO", "CAPSCOPE_DEMO_MODEL", "CAPSCOPE_INFOMETIC_CHECKPOINT"):
        monkeypatch.delenv(variable, raising=False)
    code = example_code(API_PAGE.read_text(encoding="utf-8"))
    exec(compile(code, str(API_PAGE), "exec"), {"__name__": "__main__"})
    out = dict(line.split(": ", 1) for line in capsys.readouterr().out.strip().splitlines())
    assert out["demo model"] == "True"
    assert math.isfinite(float(out["overall"]))
    assert 0.0 <= float(out["clip_s"]) <= 2.5
    wrong = eval(out["wrong words"], {})  # a printed list of strings
    assert isinstance(wrong, list)
    assert {"blue", "square"} <= set(wrong), wrong  # the page's caption names a square the image lacks
    assert not {"red", "circle"} & set(wrong), wrong


def test_one_metric_may_be_named_by_a_plain_string(clip_checkpoint):
    scorer = Scorer("clip-s", device="cpu", regions="given", clip_model="ViT-B-32",
                    clip_pretrained=str(clip_checkpoint))
    assert list(scorer.metrics) == ["clip-s"]


def test_hice_reads_phrases_with_the_scorers_spacy_pipeline(clip_checkpoint):
    scorer = Scorer(["hice"], device="cpu", regions="given", clip_model="ViT-B-32",
                    clip_pretrained=str(clip_checkpoint), spacy_model="no_such_pipeline")
    assert scorer.metrics["hice"].nlp is scorer.nlp
