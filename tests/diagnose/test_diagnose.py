"""`capscope diagnose`: the field's caption files in, what each model gets
wrong added up (by hand on small rows, and end to end on demo scenes with three
captioners of known faults), a report that opens from disk."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from capscope.cli import main
from capscope.diagnose.diagnosis import ErrorType, RegionCount
from capscope.diagnose.error_types import type_from_words
from capscope.diagnose.summary import Diagnosis, MetricTally, paired_comparison, top_words
from capscope.metrics.text import load_spacy


def row(id_, image, caption, verdicts, overall, regions=None):
    words = caption.split()
    tokens, start = [], 0
    for w in words:
        tokens.append({"text": w, "start": start, "end": start + len(w), "semantic": True})
        start += len(w) + 1
    return {"id": id_, "image": image, "caption": caption, "tokens": tokens, "regions": [],
            "metrics": {"infometic": {"scores": {"overall": overall}, "token_scores": [0.1] * len(words),
                                      "token_correct": verdicts, "region_scores": [],
                                      "region_mentioned": regions or []}}}


def test_word_lists_decide_kinds_without_a_tagger():
    assert [type_from_words(w) for w in ("two", "red", "under", "running", "dog", "12")] == \
        ["count", "attribute", "relation", "action", "object", "count"]


def test_a_model_added_up_by_hand():
    d = Diagnosis(["infometic"], load_spacy(), "word lists")
    d.add_rows("m", [
        row("1", "a.png", "two red dogs", [False, True, True], 1.0, [True, False]),
        row("2", "a.png", "a red cat", [None, False, True], 3.0, [True, True]),
        row("3", "b.png", "one cat", [True, True], 2.0),
        {"id": "4", "image": "c.png", "caption": "x", "error": "image not found", "metrics": {}},
    ])
    s = d.summary(draws=200).models["m"]
    assert (s.n_captions, s.n_images, s.n_errors) == (4, 2, 1)
    m = s.metrics["infometic"]
    assert (m.words.judged, m.words.wrong, m.words.wrong_rate) == (7, 2, pytest.approx(2 / 7))
    assert m.captions_with_wrong_word == pytest.approx(2 / 3)
    assert m.scores["overall"].mean == pytest.approx((2.0 + 2.0) / 2)  # image means: a = 2, b = 2
    assert m.error_types["count"] == ErrorType(judged=2, wrong=1, wrong_rate=0.5, share_of_errors=0.5)
    assert m.error_types["attribute"].wrong == 1 and m.error_types["object"].wrong == 0
    assert m.regions == RegionCount(judged=4, unmentioned=1, unmentioned_rate=0.25)
    assert [w.word for w in m.top_wrong_words] == ["two", "red"]  # both wrong once; red at half the rate
    assert m.top_wrong_words[1].examples == ("2",)
    low, high = m.words.ci95
    assert low <= 2 / 7 <= high


def test_top_words_order_by_wrong_then_rate():
    from capscope.diagnose.summary import WordCount

    words = {"a": WordCount(10, 2), "b": WordCount(2, 2), "c": WordCount(5, 1), "d": WordCount(3, 0)}
    assert [w.word for w in top_words(words)] == ["b", "a", "c"]


def test_ngram_scores_name_what_could_not_run():
    from capscope.diagnose.ngrams import ngram_scores

    out = ngram_scores({"m": ({"1": "a cat"}, {})})["m"]
    assert out.n_captions == 0 and out.scores == {}
    assert out.unavailable["CIDEr"] == "no caption has references"


def test_paired_comparison_counts_wins_on_shared_images():
    out = paired_comparison("a", "b", "m", "k", {1: 0.5, 2: 0.2, 3: 0.7, 9: 1.0}, {1: 0.4, 2: 0.3, 3: 0.7},
                            draws=300, seed=0)
    assert out.n_images == 3 and (out.a_wins, out.b_wins, out.ties) == (1, 1, 1)
    assert out.mean_difference == pytest.approx(0.0)
    assert out.ci95[0] <= 0.0 <= out.ci95[1] and not out.decided
    assert paired_comparison("a", "b", "m", "k", {1: 0.5}, {2: 0.5}, draws=300, seed=0) is None


def test_the_worst_captions_are_kept_lowest_first():
    tally = MetricTally("infometic")
    for i, value in enumerate([5.0, 1.0, 3.0, 0.5, 4.0, 2.0, 6.0, 7.0]):
        r = row(str(i), "a.png", "a cat", [True, True], value)
        tally.add(0, r, r["metrics"]["infometic"], [None, "object"])
    assert [w["id"] for w in tally.worst()] == ["3", "1", "5", "2", "4", "0"]


# ---------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def coco_files(tmp_path_factory):
    """24 demo scenes as a COCO captions file, and three captioners' results
    (capscope.studies.diagnose_recovery): `colours` swaps a colour word and
    `shapes` a shape word in 60% of their captions, `nearly-clean` any such
    word in 10%; with the truth of what each swapped."""
    from capscope.studies.diagnose_recovery import write_captioners

    folder = tmp_path_factory.mktemp("coco")
    truth = write_captioners(folder, n=24, seed=45, swap_share=0.6, clean_share=0.1)
    return folder, truth


@pytest.fixture(scope="module")
def diagnosed(coco_files, tmp_path_factory):
    folder, _ = coco_files
    out = tmp_path_factory.mktemp("report")
    args = ["diagnose", "--annotations", str(folder / "captions.json"), "--images", str(folder / "images"),
            "--metric", "infometic", "clip-s", "--demo", "--device", "cpu", "--bootstrap", "300", "--out", str(out)]
    for name in ("colours", "shapes", "nearly-clean"):
        args += ["--model", f"{name}={folder / (name + '.json')}"]
    assert main(args) == 0
    return out, args


@pytest.mark.slow
def test_diagnose_recovers_what_each_captioner_gets_wrong(coco_files, diagnosed):
    from capscope.diagnose import DiagnosisSummary
    from capscope.studies.diagnose_recovery import compare_with_truth

    out, _ = diagnosed
    summary = DiagnosisSummary.from_dict(json.loads((out / "summary.json").read_text()))
    assert summary.metrics == ("infometic", "clip-s") and "word lists" in summary.type_source
    found = compare_with_truth(summary, coco_files[1], "infometic")["captioners"]
    assert (found["colours"]["found_dominant_type"], found["shapes"]["found_dominant_type"]) == ("attribute", "object")
    for name, c in found.items():
        assert c["found_wrong_rate"] == pytest.approx(c["true_wrong_rate"], abs=0.05), name
        assert c["found_ci95"][0] <= c["found_wrong_rate"] <= c["found_ci95"][1]
    for name in ("colours", "shapes"):  # the words it swapped in most are the words found wrong most
        assert len(set(found[name]["true_top_words"]) & set(found[name]["found_top_words"])) >= 2, found[name]
    for faulty in ("colours", "shapes"):  # the nearly clean captioner is better, and the interval says so
        compared = summary.comparison(faulty, "nearly-clean", "infometic", "overall")
        assert compared.n_images == 24 and compared.mean_difference < 0 and compared.decided
        assert compared.b_wins > compared.a_wins
    assert summary.models["nearly-clean"].n_captions == 24 and summary.models["nearly-clean"].n_errors == 0
    assert summary.to_dict() == json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_the_report_says_what_scored(diagnosed):
    """The demo model scored these rows: summary.json says so, and index.html opens with a banner."""
    from capscope import __version__
    from capscope.diagnose import DiagnosisSummary

    out, _ = diagnosed
    summary = json.loads((out / "summary.json").read_text())
    made = summary["provenance"]
    assert made["capscope"] == __version__ and made["demo"] is True
    assert made["scorers"] and all(s["demo"] for s in made["scorers"])
    assert DiagnosisSummary.from_dict(summary).provenance.demo
    page = (out / "index.html").read_text()
    assert page.index("The demo model scored these captions") < page.index("<table>")


def test_rows_that_could_not_be_scored_are_listed_with_their_reasons(tmp_path):
    from capscope.diagnose.diagnosis import FailedRow
    from capscope.diagnose.report import write_report
    from capscope.diagnose.summary import Diagnosis

    diagnosis = Diagnosis(["clip-s"], None, "word lists")
    diagnosis.add_rows("m", [{"id": "7", "caption": "a cat", "error": "image not found: cat.png", "metrics": {}}])
    summary = diagnosis.summary(draws=10)
    assert summary.models["m"].failed == (FailedRow("7", "image not found: cat.png"),)
    assert summary.provenance.demo is False
    page = write_report(summary, tmp_path, {}, lambda path: None).read_text()
    assert "Rows that could not be scored" in page and "image not found: cat.png" in page


@pytest.mark.slow
def test_diagnose_writes_a_report_and_scores_nothing_twice(diagnosed, capsys):
    out, args = diagnosed
    summary = json.loads((out / "summary.json").read_text())
    ngrams = summary["ngram_scores"]["nearly-clean"]
    assert ngrams["n_captions"] == 24
    assert set(ngrams["scores"]) | set(ngrams["unavailable"]) == {"BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE"}
    if shutil.which("java"):  # .ci/run installs it; SPICE also needs the network for its models
        assert {"BLEU-4", "METEOR", "ROUGE-L", "CIDEr"} <= set(ngrams["scores"])
        assert summary["ngram_scores"]["colours"]["scores"]["CIDEr"] < ngrams["scores"]["CIDEr"]
    page = (out / "index.html").read_text()
    assert "What do these captioners get wrong?" in page and "data:image/png;base64," in page
    assert "src='http" not in page and 'src="http' not in page  # opens from disk with no server
    assert (out / "figures" / "scores.png").stat().st_size > 1000

    before = (out / "scored" / "colours.jsonl").read_text()
    assert main(args) == 0
    assert (out / "scored" / "colours.jsonl").read_text() == before
    assert "report:" in capsys.readouterr().out


@pytest.mark.slow
def test_scored_rows_are_used_as_they_are(diagnosed, tmp_path):
    out, _ = diagnosed
    again = tmp_path / "again"
    assert main(["diagnose", "--model", f"clean={out / 'scored' / 'nearly-clean.jsonl'}", "--bootstrap", "300",
                 "--out", str(again)]) == 0
    assert not (again / "scored").exists()
    first = json.loads((out / "summary.json").read_text())["models"]["nearly-clean"]["metrics"]["clip-s"]["scores"]
    second = json.loads((again / "summary.json").read_text())["models"]["clean"]["metrics"]["clip-s"]["scores"]
    assert first["clip_s"]["mean"] == pytest.approx(second["clip_s"]["mean"])


def test_bad_inputs_get_one_line(tmp_path, capsys):
    odd = tmp_path / "odd.txt"
    odd.write_text("hello\n")
    assert main(["diagnose", "--model", f"m={odd}", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "expected a COCO results JSON" in err and len(err.strip().splitlines()) == 1
    results = tmp_path / "r.json"
    results.write_text(json.dumps([{"image_id": 1, "caption": "a cat"}]))
    assert main(["diagnose", "--model", f"m={results}", "--out", str(tmp_path / "o")]) == 2
    assert "--annotations" in capsys.readouterr().err
    assert main(["diagnose", "--model", "nameless", "--out", str(tmp_path / "o")]) == 2
    assert "NAME=FILE" in capsys.readouterr().err


def test_score_reads_coco_results_too(coco_files, tmp_path):
    coco_files, _ = coco_files
    out = tmp_path / "scored.jsonl"
    assert main(["score", "--input", str(coco_files / "nearly-clean.json"), "--annotations", str(coco_files / "captions.json"),
                 "--images", str(coco_files / "images"), "--output", str(out), "--metric", "clip-s",
                 "--device", "cpu", "--demo"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [str(i) for i in range(1, 25)] and not any(r["error"] for r in rows)
    assert all("ref_clip_s" in r["metrics"]["clip-s"]["scores"] for r in rows)  # the annotations' references
    assert (tmp_path / "scored-pairs.jsonl").is_file()
    assert main(["score", "--input", str(coco_files / "nearly-clean.json"), "--output", str(out)]) == 2


def test_an_image_id_the_annotations_lack_says_so(coco_files, tmp_path):
    coco_files, _ = coco_files
    results = json.loads((coco_files / "nearly-clean.json").read_text())[:2]
    results[1]["image_id"] = 987654
    (given := tmp_path / "results.json").write_text(json.dumps(results))
    out = tmp_path / "scored.jsonl"
    assert main(["score", "--input", str(given), "--annotations", str(coco_files / "captions.json"),
                 "--images", str(coco_files / "images"), "--output", str(out), "--metric", "clip-s",
                 "--device", "cpu", "--demo"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["error"] is None
    assert rows[1]["error"] == "image_id 987654 is not among the images of the annotations file"


def test_ctrl_c_ends_score_with_one_line_and_the_resume_hint(monkeypatch, capsys):
    from capscope.commands import score as score_command

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(score_command, "run_score", interrupted)  # the parser is built anew by main
    assert main(["score", "--input", "x.jsonl", "--output", "y.jsonl"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "run the same command again" in err
    assert "Traceback" not in err


def test_api_gives_a_diagnosis_inside_the_data_roots_only(tmp_path):
    from fastapi.testclient import TestClient

    from annotation_support import sqlite_url
    from capscope.annotation.users import add_user
    from capscope.db import Store
    from capscope.server.api import create_app
    from capscope.server.data_roots import DataRoots

    data = tmp_path / "data"
    (data / "report").mkdir(parents=True)
    (data / "report" / "summary.json").write_text(json.dumps({"metrics": ["clip-s"], "models": {}}))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "summary.json").write_text("{}")
    store = Store(sqlite_url(tmp_path))
    add_user(store, "boss", "boss-password-1", role="admin")
    add_user(store, "ann", "ann-password-1")
    client = TestClient(create_app(store=store, scorer_factory=lambda metrics: None, data_roots=DataRoots([data])),
                        raise_server_exceptions=False)
    admin = ("boss", "boss-password-1")
    got = client.get("/api/diagnose", params={"folder": str(data / "report")}, auth=admin)
    assert got.status_code == 200 and got.json()["metrics"] == ["clip-s"]
    assert client.get("/api/diagnose", params={"folder": str(tmp_path / "elsewhere")}, auth=admin).status_code == 403
    assert client.get("/api/diagnose", params={"folder": str(data)}, auth=admin).status_code == 404
    assert client.get("/api/diagnose", params={"folder": str(data / "report")}, auth=("ann", "ann-password-1")).status_code == 403


def test_import_reads_coco_results_with_the_model_named(coco_files, tmp_path, capsys):
    coco_files, _ = coco_files
    from annotation_support import sqlite_url
    from capscope.annotation import browse
    from capscope.db import Store

    db = sqlite_url(tmp_path)
    assert main(["import", "--db", db, "--captions", str(coco_files / "shapes.json"), "--annotations",
                 str(coco_files / "captions.json"), "--images", str(coco_files / "images"), "--dataset", "coco",
                 "--model", "captioner-b", "--regions", "none", "--no-progress"]) == 0
    store = Store(db)
    assert browse.dataset_names(store) == ["coco"]
    from sqlalchemy import select

    from capscope.db import Caption

    with store.read() as session:
        captions = session.scalars(select(Caption)).all()
        assert len(captions) == 24 and {c.model for c in captions} == {"captioner-b"}
        assert sorted(c.external_id for c in captions)[:2] == ["1", "10"]


def test_a_metric_at_chance_is_flagged_and_a_working_one_is_not():
    """InfoMetIC finds the sloppy captioner's wrong words; a metric that calls half of every captioner's
    words wrong at random agrees with it no better than chance and tells no one apart: it is flagged."""
    import random

    from capscope.diagnose.summary import Diagnosis

    from capscope.metrics.text import load_spacy

    rng = random.Random(0)
    diagnosis = Diagnosis(["infometic", "clip4dm"], load_spacy(), "word lists")
    for model, wrong_share in (("clean", 0.0), ("sloppy", 0.5)):
        rows = []
        for image in range(30):
            caption = "a red circle and a blue square on grass"
            tokens = [{"text": w, "start": 0, "end": 0, "semantic": True} for w in caption.split()]
            truth = [rng.random() < wrong_share for _ in tokens]
            rows.append({"id": f"{model}{image}", "image": f"{image}.png", "caption": caption, "tokens": tokens,
                         "regions": [],
                         "metrics": {"infometic": {"scores": {"overall": 1.0}, "token_correct": [not t for t in truth]},
                                     "clip4dm": {"scores": {"f_clip_s": 0.5},
                                                 "token_correct": [rng.random() < 0.5 for _ in tokens]}}})
        diagnosis.add_rows(model, rows)
    warnings = diagnosis.summary(draws=200).warnings
    assert [w.metric for w in warnings] == ["clip4dm"]
    assert warnings[0].test == "spearman-with-other-metrics" and warnings[0].n == 60
    assert abs(warnings[0].statistic) < 0.1 and "CLIP4DM" in warnings[0].text
