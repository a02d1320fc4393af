"""The Admin tab's Compare captioners panel (capscope.ui.compare): scored files
inside the data roots only, the same sums as `capscope diagnose`, and the
captions behind a clicked word."""
from __future__ import annotations

import json

import pytest

from capscope.metrics.errors import CapscopeError
from capscope.server.data_roots import DataRoots
from capscope.ui.compare import compare, named_files, wrong_captions
from ui_support import scored


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
    assert [n for n, _ in named_files(f"good={files / 'good.jsonl'}\n\nbad={files / 'bad.jsonl'}", roots)] == ["good", "bad"]
    outside = tmp_path_factory.mktemp("outside") / "x.jsonl"
    outside.write_text("")
    for text, why in ((f"x={outside}", "outside the server's data roots"), ("nameless", "NAME=FILE"),
                      (f"x={files / 'none.jsonl'}", "no such file"), ("", "at least one"),
                      (f"a={files / 'good.jsonl'}\na={files / 'bad.jsonl'}", "name of its own")):
        with pytest.raises(CapscopeError, match=why):
            named_files(text, roots)


def test_compare_gives_the_diagnose_tables_and_plots(files):
    message, overview, compared, words, scores_png, kinds_png, named = compare(
        f"good={files / 'good.jsonl'}\nbad={files / 'bad.jsonl'}", DataRoots([files]), draws=100)
    assert overview == [["good", 2, 2, 0], ["bad", 2, 2, 0]]
    (a, b, metric, key, n, diff, _, a_wins, b_wins, ties), = compared
    assert (a, b, metric, key, n, a_wins, b_wins, ties) == ("good", "bad", "infometic", "overall", 2, 2, 0, 0)
    assert diff == pytest.approx(((3.0 - 1.0) + (2.0 - 0.5)) / 2)
    assert ["bad", "infometic", "blue", 2, 2, 1.0] in words
    assert "bad**, infometic: wrong rate 0.500" in message and "attribute 67%" in message
    assert scores_png.endswith(".png") and kinds_png.endswith(".png")
    assert wrong_captions(named, "bad", "infometic", "blue") == [["1", "a blue dog"], ["2", "three blue cats"]]
    assert wrong_captions(named, "good", "infometic", "blue") == []


def test_a_bad_line_is_one_message_and_no_tables(files):
    message, overview, *_ = compare("nameless", DataRoots([files]))
    assert message.startswith("**Not run:**") and overview == []
