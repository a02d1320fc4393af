"""The label-efficiency study's own parts (app/label_efficiency.py): the
simulated annotator, the queue's uncertainty order over plain items, and the
plot. The fine-tunes it runs are tested in test_finetune.py."""
import json

import pytest

from capscope.studies import label_efficiency as le


def item(image: str, labels: list, regions: list = ()) -> dict:
    return {"image": image, "tokens": [{"text": f"w{i}", "semantic": label is not None, "label": label}
                                       for i, label in enumerate(labels)],
            "regions": [{"box": [0, 0, 4, 4], "label": label} for label in regions]}


def labels_of(items: list[dict]) -> list:
    return [[t["label"] for t in x["tokens"]] + [r["label"] for r in x["regions"]] for x in items]


def test_simulated_annotator_flips_labels_at_the_noise_rate_and_leaves_unknowns():
    items = [item("a.png", ["correct", "incorrect", None], ["mentioned", None])]
    assert labels_of(le.simulated_labels(items, 0.0, seed=1)) == labels_of(items)
    assert labels_of(le.simulated_labels(items, 1.0, seed=1)) == [["incorrect", "correct", None, "unmentioned", None]]
    many = [item(f"{i}.png", ["correct"] * 10) for i in range(200)]
    flipped = sum(label == "incorrect" for row in labels_of(le.simulated_labels(many, 0.1, seed=3)) for label in row)
    assert 150 <= flipped <= 250  # 2,000 labels at 10%: 200 expected, sd 13
    assert labels_of(le.simulated_labels(many, 0.1, seed=3)) == labels_of(le.simulated_labels(many, 0.1, seed=3))
    assert labels_of(items) == [["correct", "incorrect", None, "mentioned", None]]  # the gold is not touched


def test_uncertainty_order_is_the_queue_s_over_items():
    # two semantic words each: the relative threshold is beta = 0.1; a share on it is a coin toss
    items = [item("a.png", ["correct", "correct"]), item("a.png", ["correct", "correct"]),
             item("b.png", ["correct", "correct"]), item("b.png", ["correct", "correct"])]
    predictions = [{"token_scores": [0.1, 0.1], "region_scores": []},    # a: on the threshold
                   {"token_scores": [0.1, 0.12], "region_scores": []},   # a: nearly
                   {"token_scores": [0.5, 0.5], "region_scores": []},    # b: sure
                   {"token_scores": [0.11, 0.3], "region_scores": []}]   # b: less sure
    # round one: each image's most uncertain (0, then 3); round two: the rest (1, then 2)
    assert le.uncertainty_order(items, predictions) == [0, 3, 1, 2]
    # a prediction with no score at all comes last
    assert le.uncertainty_order(items[:2], [{"token_scores": [None, None]}, predictions[2]]) == [1, 0]


def test_likely_wrong_order_asks_first_for_the_words_the_parent_expects_wrong():
    # two semantic words: threshold 0.1; P(wrong) = 1 / (1 + (share / 0.1) ** 2)
    items = [item("a.png", ["correct", "correct"]), item("a.png", ["correct", "correct"]),
             item("b.png", ["correct", "correct"]), item("b.png", ["correct", None])]
    predictions = [{"token_scores": [0.2, 0.2]},     # 0.2 each: mean 0.2
                   {"token_scores": [0.05, 0.2]},    # 0.8 and 0.2: mean 0.5
                   {"token_scores": [0.1, 0.4]},     # 0.5 and 1/17: mean 0.279
                   {"token_scores": [0.3, 0.01]}]    # the second is not semantic: 0.1
    # round one: each image's likeliest (1 at 0.5, then 2 at 0.279); round two: 0 (0.2), then 3 (0.1)
    assert le.likely_wrong_order(items, predictions) == [1, 2, 0, 3]
    # no scored word: last
    assert le.likely_wrong_order(items[:2], [{"token_scores": [None, None]}, predictions[0]]) == [1, 0]
    # to uncertainty, 0 (P(wrong) 0.2 and 0.2) and 1 (0.8 and 0.2) are alike: entropy is symmetric
    assert le.uncertainty_order(items, predictions) == [0, 2, 1, 3]


def test_random_and_rounds_run_once_per_permutation_seed_and_the_others_once():
    assert le._studied(["random", "uncertainty", "likely-wrong"], [0, 1, 2]) == [
        ("random", 0), ("random", 1), ("random", 2), ("uncertainty", None), ("likely-wrong", None)]
    assert le._studied(["uncertainty", "random"], [5]) == [("uncertainty", None), ("random", 5)]
    # rounds asks its first round at random: once per permutation too
    assert le._studied(["rounds", "uncertainty"], [0, 1]) == [("rounds", 0), ("rounds", 1), ("uncertainty", None)]


def test_plot_draws_each_shift(tmp_path):
    result = {"shifts": {shift: {"before": {"incorrect_token_f1": 0.2},
                                 "runs": [{"order": order, "labels": n, "incorrect_token_f1": f1}
                                          for order in ("random", "uncertainty")
                                          for n, f1 in ((200, 0.4), (400, 0.5))]}
                         for shift in ("dark", "outline")}}
    le.plot(json.loads(json.dumps(result)), tmp_path / "plot.png")
    png = (tmp_path / "plot.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_plot_draws_random_order_s_range_over_permutations_and_each_other_run_s_interval(tmp_path, monkeypatch):
    import matplotlib.axes

    drawn = {}
    monkeypatch.setattr(matplotlib.axes.Axes, "fill_between",
                        lambda self, x, low, high, **kw: drawn.update(x=list(x), low=low, high=high))
    runs = [{"order": "random", "permutation": p, "labels": n, "incorrect_token_f1": f1}
            for p, f1s in ((0, (0.4, 0.6)), (1, (0.5, 0.7)), (2, (0.6, 0.65))) for n, f1 in zip((200, 400), f1s)]
    runs.append({"order": "likely-wrong", "labels": 200, "incorrect_token_f1": 0.3, "incorrect_token_f1_ci95": [0.25, 0.4]})
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar",
                        lambda self, x, y, yerr, **kw: drawn.update(bars=(list(x), y, yerr)))
    le.plot({"shifts": {"outline": {"before": {"incorrect_token_f1": 0.2}, "runs": runs}}}, tmp_path / "plot.png")
    assert drawn.pop("bars") == ([200], [0.3], [[pytest.approx(0.05)], [pytest.approx(0.1)]])   # a single run: its interval
    assert drawn == {"x": [200, 400], "low": [0.4, 0.6], "high": [0.6, 0.7]}
    assert (tmp_path / "plot.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("noise", [-0.1, 1.5])
def test_simulated_annotator_rejects_a_noise_outside_0_1(noise):
    with pytest.raises(ValueError, match="noise"):
        le.simulated_labels([item("a.png", ["correct"])], noise, seed=0)


def test_rounds_ask_first_at_random_then_for_what_the_newest_child_doubts(monkeypatch):
    from types import SimpleNamespace

    pool = [dict(item(f"{i}.png", ["correct", "correct"]), id=i) for i in range(6)]
    doubted = {"rounds-5-1": {0, 1}, "rounds-5-2": {4, 2}}   # what each child is unsure of (4 is labelled already)
    trained = []

    def fine_tune(chosen, name):
        trained.append(sorted(x["id"] for x in chosen))
        return name

    def predict(child, metric, items, base_dir):
        return [{"token_scores": [0.1, 0.1] if x["id"] in doubted[child] else [0.5, 0.5], "region_scores": []}
                for x in items], []

    monkeypatch.setattr("capscope.bench.evaluate.predict", predict)
    monkeypatch.setattr(le, "_scorer", lambda child: child)
    args = SimpleNamespace(round_size=2, noise=0.0, seed=0)
    child, asked = le.in_rounds(pool, [5, 4, 3, 2, 1, 0], 5, args, fine_tune)
    assert trained == [[4, 5], [0, 1, 4, 5], [0, 1, 2, 4, 5]]   # each fine-tune on every label so far
    assert child == "rounds-5-3"
    assert [(a["order"], a["items"]) for a in asked] == [("random", 2), ("uncertainty", 2), ("uncertainty", 1)]


def test_each_order_is_set_against_random_order_at_its_budget_and_at_twice_it():
    items = [{"id": str(i), "image": f"{i}.png", "regions": [],
              "tokens": [{"text": "red", "semantic": True, "label": "incorrect"}]} for i in range(10)]

    def finding(n):   # a child that finds the first n wrong words: F1 2n / (n + 10)
        return [{"token_correct": [i >= n]} for i in range(10)]

    decided = {("random", 2): [finding(2), finding(4)], ("random", 4): [finding(5)],
               ("uncertainty", 2): [finding(5)], ("uncertainty", 4): [finding(10)]}
    found = le.against_random(items, decided)
    assert [(r["order"], r["labels"], r["random_labels"]) for r in found] == [
        ("uncertainty", 2, 2), ("uncertainty", 2, 4), ("uncertainty", 4, 4)]   # no random order at 8
    at_2, goal, at_4 = (r["f1_difference"] for r in found)
    assert at_2 == pytest.approx(round(2 * 5 / 15 - (4 / 12 + 8 / 14) / 2, 4))
    assert goal == 0.0 and found[1]["ci95"] == [0.0, 0.0]    # the same verdicts: no spread
    assert at_4 == pytest.approx(round(1 - 2 * 5 / 15, 4))
    assert found[2]["ci95"][0] > 0
