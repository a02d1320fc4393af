"""Evaluate figures against hand-computed values."""
import pytest

from capscope.bench.gold import auroc, evaluate, f1, foil_accuracy


def tok(text, semantic, label):
    return {"text": text, "start": 0, "end": len(text), "semantic": semantic, "label": label}


ITEMS = [
    {"id": "a", "tokens": [tok("a", False, None), tok("red", True, "correct"), tok("circle", True, "incorrect"),
                           tok(".", False, None)],
     "regions": [{"box": [0, 0, 1, 1], "label": "mentioned"}, {"box": [0, 0, 1, 1], "label": "unmentioned"},
                 {"box": [0, 0, 1, 1], "label": None}]},
    {"id": "b", "tokens": [tok("blue", True, "correct"), tok("square", True, "correct"), tok("big", True, None)],
     "regions": [{"box": [0, 0, 1, 1], "label": "unmentioned"}, {"box": [0, 0, 1, 1], "label": "mentioned"}]},
]
PREDICTIONS = [
    {"token_scores": [None, 0.5, 0.05, None], "token_correct": [None, True, False, None],
     "region_scores": [0.9, 0.2, 0.5], "region_mentioned": [True, True, False]},
    {"token_scores": [0.02, 0.3, 0.9], "token_correct": [False, True, True],
     "region_scores": [0.4, 0.3], "region_mentioned": [False, False]},
]


def test_figures_by_hand():
    result = evaluate(ITEMS, PREDICTIONS, "infometic")
    assert result["metric"] == "infometic" and result["n_items"] == 2
    assert result["n_tokens"] == 4 and result["n_regions"] == 4
    assert result["text_accuracy"] == pytest.approx(3 / 4)        # red, circle, square right; blue flagged
    assert result["incorrect_token_f1"] == pytest.approx(2 / 3)   # tp 1, fp 1, fn 0
    assert result["incorrect_token_auroc"] == pytest.approx(2 / 3)
    assert result["vision_accuracy"] == pytest.approx(2 / 4)
    assert result["region_auroc"] == pytest.approx(3 / 4)
    trivial = result["trivial"]
    assert trivial["text_accuracy"] == pytest.approx(3 / 4)
    assert trivial["incorrect_token_f1"] == 0.0
    assert trivial["vision_accuracy"] == pytest.approx(2 / 4)


def test_missing_predictions_count_as_the_trivial_call():
    result = evaluate(ITEMS, [{}, {}])
    assert result["text_accuracy"] == result["trivial"]["text_accuracy"]
    assert result["vision_accuracy"] == result["trivial"]["vision_accuracy"]
    assert result["incorrect_token_auroc"] is None and result["region_auroc"] is None


def test_single_class_auroc_is_null_and_f1_zero():
    assert auroc([False, False], [0.1, 0.2]) is None
    assert auroc([True, False], [float("nan"), 0.2]) is None
    assert f1([False, False], [False, False]) == 0.0


def test_misaligned_predictions_are_refused():
    with pytest.raises(ValueError, match="token_scores"):
        evaluate(ITEMS[:1], [{"token_scores": [0.1]}])


def test_foil_accuracy_pairs_twins():
    items = [{"id": "s1-clean", "twin": "s1-polluted", "polluted": False},
             {"id": "s1-polluted", "twin": "s1-clean", "polluted": True},
             {"id": "s2-clean", "twin": "s2-polluted", "polluted": False},
             {"id": "s2-polluted", "twin": "s2-clean", "polluted": True}]
    scores = {"s1-clean": 0.9, "s1-polluted": 0.4, "s2-clean": 0.3, "s2-polluted": 0.3}
    assert foil_accuracy(items, scores) == {"foil_accuracy": 0.75, "n_pairs": 2}
