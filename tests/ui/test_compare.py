"""The Compare tab (captioners, for admins) (capscope.ui.compare): scored files
inside the data roots only, captioners in the store by their `model` field, the
same sums as `capscope diagnose`, the captions behind a clicked word, and what
Inspect is filled with when one of them is clicked."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from capscope.common.errors import CapscopeError
from capscope.server.data_roots import DataRoots
from capscope.ui.compare import compare, named_files, open_in_inspect, store_choices, wrong_captions
from ui_support import scored

RULE = "relative"  # the token rule a stored captioner's verdicts are decided by


@pytest.fixture()
def files(tmp_path):
    good = [scored("1", "a.png", "a red dog", [True, True, True], 3.0),
            scored("2", "b.png", "two cats", [True, True], 2.0)]
    bad = [scored("1", "a.png", "a blue dog", [True, False, True], 1.0),
           scored("2", "b.png", "three blue cats", [False, False, True], 0.5)]
    for name, rows in (("good", good), ("bad", bad)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_files_must_be_named_and_inside_the_data_roots(files, tmp_path_factory):
    roots = DataRoots([files])
    assert [s["name"] for s in named_files(f"good={files / 'good.jsonl'}\n\nbad={files / 'bad.jsonl'}", roots)] == ["good", "bad"]
    outside = tmp_path_factory.mktemp("outside") / "x.jsonl"
    outside.write_text("")
    for text, why in ((f"x={outside}", "outside the server's data roots"), ("nameless", "NAME=FILE"),
                      (f"x={files / 'none.jsonl'}", "no such file")):
        with pytest.raises(CapscopeError, match=why):
            named_files(text, roots)
    for text, why in (("", "at least one"), (f"a={files / 'good.jsonl'}\na={files / 'bad.jsonl'}", "name of its own")):
        assert why in compare(text, roots, token_rule=RULE)[0]


def test_compare_gives_the_diagnose_tables_and_plots(files):
    message, overview, compared, words, scores_png, kinds_png, named = compare(
        f"good={files / 'good.jsonl'}\nbad={files / 'bad.jsonl'}", DataRoots([files]), draws=100, token_rule=RULE)
    assert overview == [["good", 2, 2, 0], ["bad", 2, 2, 0]]
    (a, b, metric, key, n, diff, _, a_wins, b_wins, ties), = compared
    assert (a, b, metric, key, n, a_wins, b_wins, ties) == ("good", "bad", "infometic", "overall", 2, 2, 0, 0)
    assert diff == pytest.approx(((3.0 - 1.0) + (2.0 - 0.5)) / 2)
    assert ["bad", "infometic", "blue", 2, 2, 1.0] in words
    assert "bad**, infometic: wrong rate 0.500" in message and "attribute 67%" in message
    assert scores_png.endswith(".png") and kinds_png.endswith(".png")
    assert wrong_captions(named, "bad", "infometic", "blue", token_rule=RULE) == [
        ["bad", "1", "a.png", "a blue dog"], ["bad", "2", "b.png", "three blue cats"]]
    assert wrong_captions(named, "good", "infometic", "blue", token_rule=RULE) == []


def test_a_bad_line_is_one_message_and_no_tables(files):
    message, overview, *_ = compare("nameless", DataRoots([files]), token_rule=RULE)
    assert message.startswith("**Not run:**") and overview == []


def captioner_rows(names, model, swapped):
    """Pairs of one captioner over the images, with its model named."""
    rows = []
    for i, name in enumerate(names):
        colour = "blue" if i in swapped else "red"
        rows.append({"id": str(i + 1), "image": name, "caption": f"a {colour} square", "model": model,
                     "regions": [{"box": [4, 4, 30, 30]}]})
    return rows


@pytest.fixture()
def store_with_captioners(tmp_path):
    """Two captioners' captions of the same four images in the store, each in
    its dataset, with InfoMetIC predictions: `swapper` wrote "blue" for red
    twice, and its predictions give "blue" a low share."""
    from annotation_support import make_images, sqlite_url, write_jsonl
    from capscope.annotation.importer.predictions import import_prediction_rows
    from capscope.annotation.importer import ImportOptions, import_captions
    from capscope.db import Store

    store = Store(sqlite_url(tmp_path))
    names = make_images(tmp_path / "images", 4)
    for model, swapped in (("honest", set()), ("swapper", {0, 2})):
        pairs = write_jsonl(tmp_path / f"{model}.jsonl", captioner_rows(names, model, swapped))
        report = import_captions(store, pairs, tmp_path / "images", ImportOptions(dataset=f"ds-{model}", regions="none",
                                                                                  progress=False))
        assert report.added == 4
        predictions = [(k + 1, {"id": str(k + 1), "error": None, "metrics": {"infometic": {
            "scores": {"overall": 1.0 if k in swapped else 3.0},
            "token_scores": [None, 0.01 if k in swapped else 0.5, 0.49], "region_scores": [0.7]}}})
            for k in range(4)]
        assert import_prediction_rows(store, predictions, f"ds-{model}").added == 4
    return store, tmp_path


def test_store_captioners_are_compared_by_their_model_field(store_with_captioners):
    store, folder = store_with_captioners
    choices = store_choices(store)
    assert [label for label, _ in choices] == ["honest · ds-honest (4 captions)", "swapper · ds-swapper (4 captions)"]
    message, overview, compared, words, _, _, sources = compare(
        "", DataRoots([folder]), draws=100, picked=[value for _, value in choices], store=store, token_rule=RULE)
    assert overview == [["honest", 4, 4, 0], ["swapper", 4, 4, 0]]
    overall = next(c for c in compared if c[3] == "overall")
    assert overall[:2] == ["honest", "swapper"] and overall[5] == pytest.approx(1.0)  # (0 + 2 + 0 + 2) / 4
    assert ["swapper", "infometic", "blue", 2, 2, 1.0] in words
    assert "swapper**, infometic: wrong rate 0.250" in message  # 2 of 8 judged words ("a" is a stop word)
    listed = wrong_captions(sources, "swapper", "infometic", "blue", store, token_rule=RULE)
    assert [row[1] for row in listed] == ["1", "3"] and listed[0][3] == "a blue square"

    found = open_in_inspect(sources, "swapper", listed[0][2], DataRoots([folder]), store, token_rule=RULE)
    assert (found["name_a"], found["caption_a"]) == ("swapper", "a blue square")
    assert (found["name_b"], found["caption_b"]) == ("honest", "a red square")
    original = DataRoots([folder]).check(listed[0][2])
    assert Path(found["image"]).read_bytes() == original.read_bytes()  # the file itself: no re-encoded pixels
    assert Image.open(found["image"]).size == (64, 48) and found["regions"] == [{"box": [4.0, 4.0, 30.0, 30.0]}]
    with pytest.raises(CapscopeError, match="outside the server's data roots"):
        open_in_inspect(sources, "swapper", listed[0][2], DataRoots([folder / "elsewhere"]), store, token_rule=RULE)


def test_compare_says_what_the_report_says_first():
    from capscope.diagnose import DiagnosisSummary
    from capscope.ui.compare import cautions

    def summary(demo: bool, warnings: list[dict]) -> DiagnosisSummary:
        return DiagnosisSummary.from_dict({"metrics": [], "type_source": "word lists", "models": {}, "comparisons": [],
                                           "word_differences": [], "warnings": warnings,
                                           "provenance": {"capscope": "0", "demo": demo, "scorers": []}})

    chance = {"metric": "clip4dm", "test": "spearman-with-other-metrics", "statistic": 0.01, "n": 40,
              "text": "CLIP4DM looks at chance."}
    said = cautions(summary(True, [chance]))
    assert "demo model scored" in said and "CLIP4DM looks at chance." in said
    assert cautions(summary(False, [])) == ""
