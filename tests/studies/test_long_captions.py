"""The long-caption study (capscope.studies.long_captions) on a few scenes:
words past the old window are judged, and about as well as those inside it."""
import pytest

from capscope.studies import long_captions
from capscope.studies.long_captions import long_item


def test_a_long_item_has_one_wrong_word_and_gold_labels():
    from capscope.metrics.text import load_spacy

    item = long_item(46, 0, (6, 8), load_spacy())
    labels = [t["label"] for t in item["tokens"]]
    assert labels.count("incorrect") == 1 and 6 <= item["sentences"] <= 8
    assert all(item["caption"][t["start"]:t["end"]] == t["text"] for t in item["tokens"])
    assert len(item["caption"].split()) > 40


@pytest.mark.slow
def test_words_past_the_old_window_are_judged_as_well_as_those_inside(tmp_path, capsys):
    assert long_captions.main(["--n", "96", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "| infometic | relative |" in table
    import json

    result = json.loads((tmp_path / "long_captions.json").read_text())
    infometic = result["metrics"]["infometic"]
    assert infometic["windows_per_caption"] > 3 and infometic["truncated"] == 0
    inside, past = infometic["relative"]["inside"], infometic["relative"]["past"]
    assert past["words"] > inside["words"] > 0 and past["wrong"] > 0
    assert inside["f1"] > 10 * inside["trivial_f1"] and past["f1"] > 10 * past["trivial_f1"]
    assert abs(past["f1"] - inside["f1"]) <= 0.1
    assert past["f1"] > infometic["paper"]["past"]["f1"]  # the relative rule holds at any length
    assert result["metrics"]["clip4dm"]["relative"]["past"]["auroc"] > 0.5
