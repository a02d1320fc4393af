"""summary.json keeps its layout byte for byte: `capscope diagnose` on fixed
scored rows writes the file that summary_reference.json holds, which the code
before the typed diagnosis (issue 57) wrote from a plain dict. Only capscope's
version is left out of the comparison (the reference says VERSION)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

REFERENCE = Path(__file__).with_name("summary_reference.json")
WORDS = ["two", "red", "dogs", "under", "a", "blue", "table", "running", "three", "cats", "on", "green", "grass"]
# (model, share of InfoMetIC verdicts that are wrong, its mean overall score)
CAPTIONERS = (("careful", 0.05, 3.0), ("sloppy", 0.45, 1.5), ("erratic", 0.25, 2.2))
SCORER = {"clip": "ViT-B-32", "demo": False, "precision": "fp32", "token_rule": "paper"}


def tokens_of(caption: str) -> list[dict]:
    tokens, start = [], 0
    for word in caption.split():
        tokens.append({"text": word, "start": start, "end": start + len(word), "semantic": word != "a"})
        start += len(word) + 1
    return tokens


def scored_row(rng: random.Random, model: str, image: int, k: int, wrong_share: float, mean: float) -> dict:
    caption = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7)))
    tokens = tokens_of(caption)
    verdicts = [None if not t["semantic"] else rng.random() >= wrong_share for t in tokens]
    return {"id": f"{model}-{image}-{k}", "image": f"images/{image}.png", "caption": caption, "tokens": tokens,
            "regions": [{"box": [0, 0, 8, 8]}], "error": None, "model": SCORER,
            "metrics": {
                "infometic": {"scores": {"overall": round(rng.gauss(mean, 0.5), 4)}, "token_correct": verdicts,
                              "region_mentioned": [rng.random() > wrong_share for _ in range(2)]},
                "clip-s": {"scores": {"clip_s": round(rng.uniform(0.5, 0.9), 4),
                                      "ref_clip_s": None if image % 5 == 0 else round(rng.uniform(0.6, 0.8), 4)}},
                "clip4dm": {"scores": {"f_clip_s": round(rng.random(), 4)},
                            "token_correct": [None if v is None else rng.random() < 0.5 for v in verdicts]}}}


def write_captioners(folder: Path, seed: int = 57) -> list[str]:
    """Three captioners' scored rows (one image left out by one, two captions of some images, a row that
    could not be scored); --model arguments for them."""
    rng = random.Random(seed)
    models = []
    for model, wrong_share, mean in CAPTIONERS:
        rows = [scored_row(rng, model, image, k, wrong_share, mean)
                for image in range(14) if not (model == "erratic" and image == 3)
                for k in range(1 + (image % 4 == 0))]
        if model == "sloppy":
            rows.append({"id": "sloppy-x", "image": "images/x.png", "caption": "a cat", "error": "image not found",
                         "metrics": {}})
        path = folder / f"{model}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        models += ["--model", f"{model}={path}"]
    return models


def diagnose_args(folder: Path, out: Path) -> list[str]:
    return ["diagnose", *write_captioners(folder), "--bootstrap", "200", "--seed", "3", "--out", str(out)]


def summary_text(out: Path) -> str:
    from capscope import __version__

    return (out / "summary.json").read_text(encoding="utf-8").replace(json.dumps(__version__), '"VERSION"', 1)


@pytest.fixture()
def word_lists(monkeypatch):
    """The word lists decide kinds of words, whichever spaCy pipelines are installed."""
    import spacy

    monkeypatch.setattr("capscope.metrics.text.load_spacy", lambda *a, **k: spacy.blank("en"))


def test_summary_json_is_written_as_before(word_lists, tmp_path):
    from capscope.cli import main

    assert main(diagnose_args(tmp_path, tmp_path / "out")) == 0
    assert summary_text(tmp_path / "out") == REFERENCE.read_text(encoding="utf-8")


def test_the_typed_summary_gives_summary_json_back(word_lists, tmp_path):
    from capscope.cli import main
    from capscope.diagnose import DiagnosisSummary

    assert main(diagnose_args(tmp_path, tmp_path / "out")) == 0
    written = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    again = DiagnosisSummary.from_dict(written).to_dict()
    assert json.dumps(again, indent=1) == json.dumps(written, indent=1)  # the same keys in the same order
