"""Evaluate figures against hand-computed values."""
import pytest

from capscope.bench.gold_figures import auroc, evaluate, f1, f1_difference, foil_accuracy


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


def one_word(image: str, label: str) -> dict:
    return {"id": image, "image": image, "tokens": [tok("red", True, label)], "regions": []}


def test_f1_interval_resamples_whole_images_by_hand():
    # image p: a wrong word found (tp); image q: a wrong word missed (fn). F1 = 2 / 3.
    items = [one_word("p.png", "incorrect"), one_word("q.png", "incorrect")]
    model = [{"token_correct": [False]}, {"token_correct": [True]}]
    # two images drawn with replacement: pp (F1 1) and qq (0) a quarter each, pq or qp (2/3) half
    found = f1_difference(items, [model], draws=4000, seed=1)
    assert found["value"] == pytest.approx(2 / 3) and found["images"] == 2
    assert found["ci95"] == [0.0, 1.0]
    assert f1_difference(items, [model], draws=500, seed=7) == f1_difference(items, [model], draws=500, seed=7)


def test_f1_difference_is_paired_and_averages_each_side():
    items = [one_word(f"{i}.png", "incorrect") for i in range(20)]
    found = [{"token_correct": [False]}] * 20
    half = [{"token_correct": [i % 2 == 1]} for i in range(20)]   # finds every other one: F1 2/3
    same = f1_difference(items, [half], [half])
    assert same["value"] == 0 and same["ci95"] == [0.0, 0.0]   # one draw for both: no spread
    better = f1_difference(items, [found], [half])
    assert better["value"] == pytest.approx(1 / 3) and 0 < better["ci95"][0] <= better["ci95"][1] < 1
    # each side is the mean of its models: (1 + 2/3) / 2 - 2/3
    assert f1_difference(items, [found, half], [half])["value"] == pytest.approx(1 / 6)
    # one image's two captions move together
    pairs = items + [dict(one_word(f"{i}.png", "incorrect"), id=f"{i}b") for i in range(20)]
    assert f1_difference(pairs, [found * 2])["images"] == 20
