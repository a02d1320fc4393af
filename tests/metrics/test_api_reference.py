"""docs/api.md against the code: its example runs, and every `Scorer` option
is documented both in the constructor's docstring and on the page."""
import inspect
import math
import re
from pathlib import Path


from capscope.metrics.scorer import Scorer

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
SECTION = re.compile(r"^\s*(Args|Arguments|Returns|Raises|Yields|Attributes|Example|Examples|Note|Notes):\s*$")


def options() -> list[str]:
    return [name for name in inspect.signature(Scorer.__init__).parameters if name != "self"]


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


def test_every_option_in_the_docstring_args():
    args = args_section(Scorer.__init__.__doc__ or "")
    documented = set(re.findall(r"^\s{4}(\w+)(?:\s*\([^)]*\))?:", args, re.M))
    missing = [name for name in options() if name not in documented]
    assert not missing, f"Scorer.__init__ Args lacks {missing}"
    assert len(options()) == 20


def test_every_option_on_the_api_page():
    page = API_PAGE.read_text(encoding="utf-8")
    missing = [name for name in options() if f"`{name}`" not in page]
    assert not missing, f"docs/api.md does not name {missing}"


def test_methods_documented():
    for method in (Scorer.score, Scorer.score_batch, Scorer.results):
        doc = inspect.getdoc(method) or ""
        assert "Args:" in doc and "Returns:" in doc and "Raises:" in doc, method.__name__
    assert "RowError" in inspect.getdoc(Scorer.score)
    assert "ModelUnavailable" in inspect.getdoc(Scorer.__init__)


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
