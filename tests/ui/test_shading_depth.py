"""A word's shade is as deep as its distance from the cut its row reports
(issue 70): on demo captions of 3 to 200 words, the depth follows the cut the
verdict used (`model.verdict`, at the word's window's length), not β."""
import pytest
from PIL import Image

from capscope.metrics.scorer import Scorer
from capscope.ui.caption_shading import shaded_tokens

SENTENCE = "a small red circle and a large blue square."   # 9 words, 6 semantic


def demo_caption(n_words: int) -> str:
    """Demo sentences, cut to `n_words` words (the last sentence ends with a full stop)."""
    words = (SENTENCE.split() * (n_words // 9 + 1))[:n_words]
    return " ".join(words).rstrip(".") + "."


def reported_cuts(row: dict, metric: str) -> list:
    """The cut of each judged word from what the row says, worked out here: the
    rule in `model.verdict`, n the semantic words with a score in the word's
    window (the demo captions' windows are sentences: none overlap)."""
    rule = row["model"]["verdict"][metric]
    result, tokens = row["metrics"][metric], row["tokens"]
    cuts = [None] * len(tokens)
    for start, end in result["windows"]:
        inside = [i for i, t in enumerate(tokens) if t["start"] >= start and t["end"] <= end]
        judged = [i for i in inside if result["token_correct"][i] is not None]
        n = len(judged)
        base = rule["beta"] if rule["token_rule"] == "paper" else min(rule["beta"], rule["beta"] * 5 / n)
        for i in judged:
            cuts[i] = base * rule["word_scale"]
    return cuts


@pytest.fixture(scope="module")
def rows():
    scorer = Scorer(["infometic"], device="cpu", demo=True, regions="given")
    image = Image.new("RGB", (224, 224), (230, 230, 230))
    return {n: scorer.score(image, demo_caption(n), regions=[{"box": [10, 10, 60, 60]}]) for n in (3, 9, 40, 200)}


@pytest.mark.parametrize("n_words", [3, 9, 40, 200])
def test_a_words_shade_is_its_distance_from_the_cut_the_row_reports(rows, n_words):
    row = rows[n_words]
    result = row["metrics"]["infometic"]
    cuts = reported_cuts(row, "infometic")
    assert any(c is not None for c in cuts)
    for i, (_, shade) in enumerate(shaded_tokens(row, "infometic")):
        score, correct, cut = result["token_scores"][i], result["token_correct"][i], cuts[i]
        if cut is None:
            assert shade is None
            continue
        assert correct == (score > cut)   # the row's verdict was decided at that cut
        depth = max(-1.0, min(1.0, (cut - score) / cut))
        assert shade == pytest.approx(max(depth, 0.6) if correct is False else min(depth * 0.7, -0.1)), i


def test_the_row_reports_the_rule_it_decided_by(rows):
    model = rows[3]["model"]
    assert model["verdict"]["infometic"] == {"token_rule": "relative", "region_rule": "relative", "beta": 0.1,
                                             "word_scale": 1.0}
    assert model["token_rule"] == "relative" and model["beta"] == 0.1   # the fields of before stay
