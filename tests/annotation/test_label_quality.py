"""Label quality (docs/formats.md §11): the formulas by hand, control items in the queue,
consensus gold and annotator quality through the REST API on a simulated team."""
import math
import statistics
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation import consensus, controls, workflow
from capscope.annotation.uncertainty import verdict_probabilities
from capscope.annotation.users import add_user
from capscope.db import Store

BOSS, ANN = ("boss", "boss-password-1"), ("ann", "ann-password-1")


# ---------------------------------------------------------------- formulas against hand-computed values

def test_wilson_interval_by_hand():
    # 8 of 10: centre (8 + z^2/2) / (10 + z^2), half width z/(10+z^2) * sqrt(10*0.8*0.2 + z^2/4), z = 1.959964
    z = 1.959964
    centre = (8 + z * z / 2) / (10 + z * z)
    half = z / (10 + z * z) * math.sqrt(10 * 0.8 * 0.2 + z * z / 4)
    assert controls.wilson_interval(8, 10) == pytest.approx([centre - half, centre + half], abs=1e-6)
    assert controls.wilson_interval(0, 0) is None


def _units(votes, model=None):
    units = consensus.Units()
    by_unit = {}
    for unit, who, value in votes:
        by_unit.setdefault(unit, []).append((who, value))
    for unit in sorted(by_unit):
        units.add((1, unit), by_unit[unit])
    units.model = dict(model or {})
    return units


def test_majority_share_and_labels_with_confidence():
    units = _units([(0, "a", True), (0, "b", True), (0, "c", False), (1, "a", True), (1, "b", False)])
    assert consensus.majority_posterior(units).tolist() == pytest.approx([2 / 3, 0.5])
    assert consensus.label_and_confidence(2 / 3, "token") == ("incorrect", pytest.approx(0.666667))
    assert consensus.label_and_confidence(0.25, "region") == ("unmentioned", 0.75)
    assert consensus.label_and_confidence(0.5, "token") == (None, 0.5)


def test_dawid_skene_finds_the_annotator_who_is_always_wrong():
    # a and b always give the truth, c always the opposite: c's confusion flips, and the posterior follows a and b
    truth = [True, False, False, True, False, False, True, False]
    votes = [(u, who, t if who != "c" else not t) for u, t in enumerate(truth) for who in "abc"]
    fit = consensus.dawid_skene(_units(votes))
    assert (fit.posterior > 0.5).tolist() == truth
    accuracy = fit.accuracy()
    assert accuracy["a"] > 0.95 and accuracy["b"] > 0.95 and accuracy["c"] < 0.05
    # the prior is the share of positive units (3 of 8), up to the smoothing pseudo-counts
    assert fit.prior[1] == pytest.approx(3 / 8, abs=0.01)


def test_model_aware_weights_by_hand():
    # unit 0: a, b say positive, c negative; unit 1: all three negative; unit 2: a positive, b, c negative.
    # majority: [+, -, -]; common class share 2/3, baseline error 1/3. Agreement: a 2/3, b 1, c 2/3.
    # agreement is clipped to [0.001, 0.999]; weights: a = c = 1 - (1/3)/(1/3) = 0 (clipped to 1e-3),
    # b = 1 - 0.001/(1/3) = 0.997. Model P(+) = 0.9 on unit 0 only:
    # its accuracy 1 against the majority -> weight 1 * sqrt(9 votes / 3 units).
    votes = [(0, "a", True), (0, "b", True), (0, "c", False), (1, "a", False), (1, "b", False), (1, "c", False),
             (2, "a", True), (2, "b", False), (2, "c", False)]
    p = consensus.model_aware_posterior(_units(votes, {0: 0.9}))
    agree = np.clip(np.array([2 / 3, 1.0, 2 / 3]), 1e-3, 1 - 1e-3)
    w = np.array([1e-3, 0.997, 1e-3])
    mw = math.sqrt(3)
    unit0 = (w[0] * agree[0] + w[1] * agree[1] + w[2] * (1 - agree[2]) + mw * 0.9) / (w.sum() + mw)
    unit2 = (w[0] * agree[0] + w[1] * (1 - agree[1]) + w[2] * (1 - agree[2])) / w.sum()
    assert p[0] == pytest.approx(unit0, abs=1e-6) and p[2] == pytest.approx(unit2, abs=1e-6)
    assert p[1] < 0.01


def test_function_words_are_decided_by_the_majority_and_kept_out_of_quality():
    class J:
        def __init__(self, user, wrong):
            self.user, self.incorrect_tokens, self.mentioned_regions, self.junk_regions = user, wrong, set(), set()

    class Item:
        caption_id, regions = 1, []
        tokens = [{"semantic": False}, {"semantic": True}]
        judgements = [J("a", {1}), J("b", {1}), J("c", set())]

    units = consensus.collect([Item()])
    assert units["function"].keys == [(1, 0)] and units["token"].keys == [(1, 1)]
    labels = consensus.consensus_labels([Item()], "dawid-skene")[1]
    assert labels["token_labels"][0] == "correct" and labels["token_confidence"][0] == 1.0


def test_the_models_verdict_probabilities():
    # relative rule, 2 semantic words scored: threshold min(0.1, 0.1*5/2) = 0.1; a share at the threshold is 0.5
    words, regions = verdict_probabilities("infometic", [0.0, 0.1, 0.4], [0.1], [False, True, True], "relative", 1.0)
    assert words[0] is None and words[1] == pytest.approx(0.5)
    assert words[2] == pytest.approx(1 - 1 / (1 + 4 ** -2.0))  # P(incorrect) = 1 - sigmoid(2 ln 4)
    assert regions == [pytest.approx(0.5)]
    assert verdict_probabilities("clip-s", [0.1], [], None, "relative", 1.0) is None


# ---------------------------------------------------------------- controls through the API

@pytest.fixture()
def small(tmp_path):
    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path, n_images=4, n_captions=40, annotators_per_item=1)
    add_user(store, *BOSS, role="admin")
    add_user(store, *ANN)
    from capscope.server.api import create_app

    client = TestClient(create_app(store=store, scorer_factory=lambda: None), raise_server_exceptions=False)
    client.store = store
    return client


def _gold(client, item_id):
    item = client.get(f"/api/items/{item_id}", auth=BOSS).json()
    labels = {"token_labels": ["correct" if t["semantic"] else None for t in item["tokens"]],
              "region_labels": ["unmentioned"] * len(item["regions"])}
    assert client.put(f"/api/items/{item_id}/gold", json=labels, auth=BOSS).status_code == 200


def test_bad_control_requests_change_nothing(small):
    assert small.put("/api/items/1/control", json={"control": True}, auth=BOSS).status_code == 422  # no gold
    assert small.put("/api/items/1/control", json={"control": True}, auth=ANN).status_code == 403
    assert small.put("/api/items/1/control", json={"control": "yes"}, auth=BOSS).status_code == 422
    for rate in (0.51, -0.1, "lots", float("inf")):
        response = small.put("/api/datasets/default/controls", content=f'{{"rate": {rate!r}}}'.replace("'", '"')
                             .replace("inf", "1e999"), headers={"Content-Type": "application/json"}, auth=BOSS)
        assert response.status_code == 422, rate
    assert small.get("/api/datasets/default/controls", auth=BOSS).json()["rate"] == pytest.approx(0.1)
    assert small.put("/api/datasets/nope/controls", json={"rate": 0.2}, auth=BOSS).status_code == 404
    assert small.post("/api/datasets/default/gold", json={"method": "vote"}, auth=BOSS).status_code == 422
    assert small.get("/api/datasets/default/annotators", auth=ANN).status_code == 403


def test_controls_are_mixed_in_at_the_rate_and_never_named(small):
    control_ids = list(range(31, 41))
    for item_id in control_ids:
        _gold(small, item_id)
        assert small.put(f"/api/items/{item_id}/control", json={"control": True}, auth=BOSS).json() == \
            {"item_id": item_id, "control": True}
    assert small.put("/api/datasets/default/controls", json={"rate": 0.25}, auth=BOSS).json()["rate"] == 0.25
    handed = []
    while (response := small.get("/api/items/next", auth=ANN)).status_code == 200:
        item = response.json()
        assert "control" not in item and "control" not in str(item.get("labels"))
        handed.append(item["item_id"])
        small.put(f"/api/items/{item['item_id']}/labels", json={"status": "submitted"}, auth=ANN)
    regular = [i for i in handed if i not in control_ids]
    assert sorted(regular) == list(range(1, 31))  # every ordinary item once; controls on top of them
    shown = [i for i in handed if i in control_ids]
    assert 2 <= len(shown) <= 10 and len(set(shown)) == len(shown)
    # a control does not take an ordinary slot: the annotators_needed=1 items are all done, the controls stay open
    quality = small.get("/api/datasets/default/annotators", auth=BOSS).json()
    assert quality[0]["annotator"] == "ann" and quality[0]["controls"] == len(shown)
    assert quality[0]["control_accuracy"] == 1.0  # nothing marked, and the gold says every word is correct
    assert quality[0]["control_interval"][0] < 1.0 == quality[0]["control_interval"][1]


def test_controls_keep_their_gold_and_gold_names_its_method(small):
    _gold(small, 1)
    small.put("/api/items/1/control", json={"control": True}, auth=BOSS)
    for _ in range(3):
        item = small.get("/api/items/next", auth=ANN).json()
        small.put(f"/api/items/{item['item_id']}/labels", json={"status": "submitted", "incorrect_tokens": [1]},
                  auth=ANN)
    answer = small.post("/api/datasets/default/gold", json={"method": "dawid-skene", "min_judgements": 1},
                        auth=BOSS).json()
    assert answer["method"] == "dawid-skene" and answer["written"] >= 2
    assert small.get("/api/items/1/gold", auth=BOSS).json()["source"] == "adjudicated"
    history = small.get("/api/items/2/gold/history", auth=BOSS).json()
    assert history[-1]["source"] == "dawid-skene" and len(history[-1]["token_confidence"]) == len(
        history[-1]["token_labels"])


@pytest.mark.slow
def test_handing_out_with_controls_costs_under_10_ms_more(tmp_path):
    """p50 of next_item + submit over 1,000 items, controls on (rate 0.1, 100 controls) against off."""
    timings = {}
    for name, rate in (("off", 0.0), ("on", 0.1)):
        store = Store(sqlite_url(tmp_path / name))
        import_small_dataset(store, tmp_path / name, n_images=10, n_captions=1100, annotators_per_item=1)
        user = add_user(store, "ann", "ann-password-1")
        if rate:
            from capscope.db import Caption, GoldLabel

            def mark(session):
                for caption_id in range(1001, 1101):
                    session.add(GoldLabel(caption_id=caption_id, token_labels=["correct"], region_labels=[],
                                          source="adjudicated"))
                    session.get(Caption, caption_id).control = True

            store.run_write(mark)
        controls.set_control_settings(store, "default", rate)
        spent = []
        for _ in range(1000):
            start = time.perf_counter()
            item = workflow.next_item(store, user)
            spent.append(time.perf_counter() - start)
            workflow.save_labels(store, user, item["item_id"], [], [], "submitted")
        timings[name] = statistics.median(spent) * 1000
        store.dispose()
    assert timings["on"] - timings["off"] < 10, timings


# ---------------------------------------------------------------- a simulated team

@pytest.mark.slow
def test_a_simulated_team_its_intervals_its_random_annotator_and_better_gold(tmp_path):
    from capscope.server.api import create_app
    from capscope.studies import simulated_team

    db_url = simulated_team.prepare(tmp_path, 240)
    client = TestClient(create_app(db_url, scorer_factory=lambda: None), raise_server_exceptions=False)
    result = simulated_team.run_study(client, simulated_team.ADMIN, simulated_team.DATASET, controls=30)
    rows = {row["annotator"]: row for row in result["annotators"]}
    for name, truth in result["true_accuracy"].items():
        low, high = rows[name]["control_interval"]
        assert low <= truth <= high, (name, truth, rows[name])
    assert min(rows, key=lambda name: rows[name]["quality"]) == "random"
    assert min(rows, key=lambda name: rows[name]["control_accuracy"]) == "random"
    errors = result["gold_errors"]
    assert min(errors["dawid-skene"], errors["model-aware"]) <= 0.75 * errors["majority"], errors


def test_the_export_carries_confidence_method_and_control_and_the_consensus_order_follows_it(small):
    import json

    from capscope.annotation import queue

    _gold(small, 1)
    small.put("/api/items/1/control", json={"control": True}, auth=BOSS)
    for _ in range(4):
        item = small.get("/api/items/next", auth=ANN).json()
        small.put(f"/api/items/{item['item_id']}/labels", json={"status": "submitted", "incorrect_tokens": [1]},
                  auth=ANN)
    small.post("/api/datasets/default/gold", json={"method": "majority", "min_judgements": 1}, auth=BOSS)
    rows = {row["id"]: row for row in map(json.loads, small.get("/api/export?format=captokeneval",
                                                                auth=BOSS).text.splitlines())}
    control = rows["cap00000"]
    assert control["control"] is True and control["gold_method"] == "adjudicated"
    assert all("confidence" not in t for t in control["tokens"])  # adjudicated gold: no measured confidence
    judged = [row for row in rows.values() if row.get("gold_method") == "majority"]
    assert judged and all(row["control"] is False for row in judged)
    assert all(t["confidence"] == 1.0 for row in judged for t in row["tokens"])  # one judgement: all of the votes
    unjudged = [row for row in rows.values() if "gold_method" not in row]
    assert unjudged and all("confidence" not in t for row in unjudged for t in row["tokens"])
    # the consensus order ranks items by their least confident label; without a measured one: no rank
    view = queue.set_queue_order(small.store, "default", "consensus", token_rule="relative")
    assert view["order"] == "consensus" and view["ranked"] == len(judged)


def test_capscope_gold_method_and_controls_commands(small, capsys):
    import json

    from capscope.cli import main

    url = str(small.store.engine.url)
    _gold(small, 1)
    assert main(["controls", "--db", url, "--dataset", "default", "--mark", "1", "--rate", "0.3",
                 "--flag-below", "0.8"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["rate"], shown["min_accuracy"], shown["annotators"]) == (0.3, 0.8, [])
    assert main(["gold", "--db", url, "--dataset", "default", "--method", "dawid-skene", "--min-judgements", "1"]) == 0
    assert "method dawid-skene" in capsys.readouterr().out
    assert main(["controls", "--db", url, "--dataset", "default", "--rate", "0.9"]) != 0


def test_a_control_shows_its_answer_after_submit_only_where_the_dataset_says_so(small):
    _gold(small, 1)
    small.put("/api/items/1/control", json={"control": True}, auth=BOSS)
    small.put("/api/datasets/default/controls", json={"rate": 0.5, "show_answers": True}, auth=BOSS)
    seen = {}
    while (response := small.get("/api/items/next", auth=ANN)).status_code == 200 and 1 not in seen:
        item = response.json()
        seen[item["item_id"]] = item["answer"]
        done = small.put(f"/api/items/{item['item_id']}/labels", json={"status": "submitted"}, auth=ANN)
        assert done.status_code == 200
    assert set(seen.values()) == {None}  # before a submit, a control looks like any item
    answer = small.get("/api/items/1", auth=ANN).json()["answer"]
    assert answer is not None and answer["token_labels"][1] == "correct"
    assert all(small.get(f"/api/items/{i}", auth=ANN).json()["answer"] is None for i in seen if i != 1)
    small.put("/api/datasets/default/controls", json={"show_answers": False}, auth=BOSS)
    assert small.get("/api/items/1", auth=ANN).json()["answer"] is None


def test_relabel_gives_the_least_confident_items_one_more_slot_and_hands_them_out_first(small):
    from capscope.annotation import queue
    from capscope.annotation.users import add_user as add

    bob, cat = ("bob", "bob-password-1"), ("cat", "cat-password-1")
    add(small.store, *bob)
    add(small.store, *cat)
    # one slot per item: ann judges items 1-20, and the Dawid-Skene gold is never quite sure with one voice
    for _ in range(20):
        item = small.get("/api/items/next", auth=ANN).json()
        marked = [1] if item["item_id"] % 2 else []
        small.put(f"/api/items/{item['item_id']}/labels", json={"status": "submitted", "incorrect_tokens": marked},
                  auth=ANN)
    small.post("/api/datasets/default/gold", json={"method": "dawid-skene", "min_judgements": 1}, auth=BOSS)
    with pytest.raises(Exception, match="above 0"):
        queue.open_relabel_slots(small.store, "default", 0)
    assert queue.open_relabel_slots(small.store, "default", 0.5) == 0  # a confidence is never under 0.5
    assert queue.open_relabel_slots(small.store, "default", 1.0) == 20
    queue.set_queue_order(small.store, "default", "consensus", token_rule="relative")
    first = small.get("/api/items/next", auth=bob).json()["item_id"]
    assert first <= 20  # a re-opened, judged item before the 20 nobody has judged
