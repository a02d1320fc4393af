"""Queue and labels through the Python calls the UI and the REST API share."""
from datetime import timedelta

import pytest
from sqlalchemy import select

from annotation_support import import_small_dataset, sqlite_url, write_jsonl
from capscope.annotation import workflow as wf
from capscope.annotation.refusals import Forbidden, Invalid, NotFound
from capscope.annotation.users import add_user
from capscope.db import Store, utcnow


@pytest.fixture()
def store(tmp_path):
    store = Store(sqlite_url(tmp_path))
    report = import_small_dataset(store, tmp_path, n_images=3, n_captions=4, annotators_per_item=2)
    assert report.added == 4
    return store


@pytest.fixture()
def users(store):
    return [add_user(store, name, "long-enough-secret") for name in ("ann", "bob", "cat")]


def test_each_item_goes_to_n_annotators_never_twice(store, users):
    ann, bob, cat = users
    given = {user.name: [] for user in users}
    for user in users:
        while (item := wf.next_item(store, user)) is not None:
            given[user.name].append(item["item_id"])
            wf.submit(store, user, item["item_id"])
    assert given["ann"] == [1, 2, 3, 4] and given["bob"] == [1, 2, 3, 4]
    assert given["cat"] == []  # every item already has its 2 annotators


def test_open_draft_is_resumed_with_its_labels(store, users):
    ann = users[0]
    first = wf.next_item(store, ann)
    wf.toggle_token(store, ann, first["item_id"], 2)
    again = wf.next_item(store, ann)
    assert again["item_id"] == first["item_id"]
    assert again["labels"]["incorrect_tokens"] == [2] and again["labels"]["status"] == "draft"


def test_expired_lease_returns_the_item_to_the_queue(store, users):
    ann, bob, cat = users
    now = utcnow()
    for user in (ann, bob):  # both slots of item 1 taken, with 60 s leases
        assert wf.next_item(store, user, lease_seconds=60, now=now)["item_id"] == 1
    assert wf.next_item(store, cat, now=now)["item_id"] == 2
    wf.skip(store, cat, 2)
    later = now + timedelta(seconds=61)
    # ann and bob walked away: their slots are free again for cat
    assert wf.next_item(store, cat, now=later)["item_id"] == 1


def test_skip_frees_the_slot_and_never_comes_back(store, users):
    ann, bob, cat = users
    item = wf.next_item(store, ann)["item_id"]
    wf.skip(store, ann, item)
    assert wf.next_item(store, ann)["item_id"] != item
    assert wf.next_item(store, bob)["item_id"] == item
    assert wf.next_item(store, cat)["item_id"] == item  # ann's skip did not use a slot


def test_every_change_is_saved_and_undo_walks_back(store, users):
    ann = users[0]
    item = wf.next_item(store, ann)["item_id"]
    wf.toggle_token(store, ann, item, 1)
    wf.toggle_token(store, ann, item, 3)
    wf.toggle_region(store, ann, item, 0)
    state = wf.get_item(store, ann, item)["labels"]
    assert (state["incorrect_tokens"], state["mentioned_regions"]) == ([1, 3], [0])
    assert wf.undo(store, ann, item)["mentioned_regions"] == []
    assert wf.undo(store, ann, item)["incorrect_tokens"] == [1]
    assert wf.undo(store, ann, item)["incorrect_tokens"] == []
    final = wf.undo(store, ann, item)  # nothing left: unchanged
    assert final["incorrect_tokens"] == [] and not final["can_undo"]


def test_same_state_twice_writes_nothing(store, users):
    ann = users[0]
    item = wf.next_item(store, ann)["item_id"]
    first = wf.save_labels(store, ann, item, [0, 2], [1], "submitted")
    second = wf.save_labels(store, ann, item, [2, 0, 2], [1], "submitted")
    assert first == second
    assert len(wf.history(store, ann, item)) == 2  # start + one change


def test_edits_after_submit_keep_history(store, users):
    ann = users[0]
    item = wf.next_item(store, ann)["item_id"]
    wf.save_labels(store, ann, item, [1], [], "submitted")
    edited = wf.save_labels(store, ann, item, [1, 2], [], "draft")  # the UI autosaves as draft
    assert edited["status"] == "submitted" and edited["incorrect_tokens"] == [1, 2]
    history = wf.history(store, ann, item)
    assert [h["incorrect_tokens"] for h in history] == [[], [1], [1, 2]]
    assert [h["status"] for h in history] == ["draft", "submitted", "submitted"]
    assert wf.undo(store, ann, item)["incorrect_tokens"] == [1]


def test_previous_walks_back_through_submitted_items_and_they_stay_editable(store, users):
    ann, bob, _ = users
    assert wf.previous_item(store, ann) is None  # nothing submitted yet
    done = []
    for _ in range(3):
        item = wf.next_item(store, ann)["item_id"]
        wf.submit(store, ann, item)
        done.append(item)
    skipped = wf.next_item(store, ann)["item_id"]
    wf.skip(store, ann, skipped)
    assert wf.previous_item(store, ann)["item_id"] == done[2]  # skipped items are not walked back to
    assert wf.previous_item(store, ann, done[2])["item_id"] == done[1]
    assert wf.previous_item(store, ann, done[1])["item_id"] == done[0]
    assert wf.previous_item(store, ann, done[0]) is None
    edited = wf.toggle_token(store, ann, done[1], 2)
    assert edited["status"] == "submitted" and edited["incorrect_tokens"] == [2]
    assert wf.previous_item(store, ann, done[2])["labels"]["incorrect_tokens"] == [2]
    assert wf.previous_item(store, bob) is None  # only one's own items


def test_bad_indices_and_foreign_items_are_refused(store, users):
    ann, bob, _ = users
    item = wf.next_item(store, ann)
    n_tokens = len(item["tokens"])
    with pytest.raises(Invalid, match="out of range"):
        wf.save_labels(store, ann, item["item_id"], [n_tokens], [])
    with pytest.raises(Invalid, match="out of range"):
        wf.toggle_region(store, ann, item["item_id"], 2)
    with pytest.raises(Invalid):
        wf.save_labels(store, ann, item["item_id"], [-1], [])
    with pytest.raises(Invalid):
        wf.save_labels(store, ann, item["item_id"], [True], [])
    with pytest.raises(Invalid):
        wf.save_labels(store, ann, item["item_id"], [], [], "done")
    with pytest.raises(Forbidden):
        wf.save_labels(store, bob, item["item_id"], [0], [])
    with pytest.raises(NotFound):
        wf.save_labels(store, ann, 999, [0], [])
    assert wf.get_item(store, ann, item["item_id"])["labels"]["revision"] == 0  # nothing was written


def test_time_spent_and_flags(store, users):
    ann = users[0]
    now = utcnow()
    item = wf.next_item(store, ann, now=now)["item_id"]
    wf.toggle_token(store, ann, item, 0, now=now + timedelta(seconds=5))
    state = wf.toggle_token(store, ann, item, 1, now=now + timedelta(hours=1))  # idle time is capped
    assert state["time_spent_ms"] == 5_000 + int(wf.IDLE_CAP.total_seconds() * 1000)
    flag = wf.add_flag(store, ann, item, "unsure", "is that a circle?")
    assert flag["kind"] == "unsure"
    with pytest.raises(Invalid):
        wf.add_flag(store, ann, item, "whatever")


def test_progress_and_listing(store, users):
    from capscope.annotation import browse

    ann, bob, _ = users
    for user, labels in ((ann, [1]), (bob, [2])):
        item = wf.next_item(store, user)["item_id"]
        wf.save_labels(store, user, item, labels, [], "submitted")
    report = browse.progress(store, ann)
    assert report["me"]["submitted"] == 1 and report["me"]["available"] == 3
    assert report["everyone"]["items_complete"] == 1 and report["everyone"]["judgements_submitted"] == 2
    page = browse.list_items(store, sort="disagreement", descending=True, page_size=2)
    assert page["total"] == 4 and len(page["items"]) == 2
    assert page["items"][0]["item_id"] == 1 and page["items"][0]["disagreement"] == 2
    assert browse.list_items(store, status="complete")["total"] == 1
    assert browse.list_items(store, search="number 3")["items"][0]["id"] == "cap00003"


def test_listing_by_annotator_and_by_stored_score(store, users, tmp_path):
    from capscope.annotation import browse
    from capscope.annotation.importer import import_predictions

    ann, bob, _ = users
    wf.next_item(store, ann)  # ann holds item 1
    rows = [{"id": f"cap{i:05d}", "metrics": {"infometic": {"scores": {"overall": float(s)}}}}
            for i, s in enumerate([0.5, 2.0, 1.0, 3.0])]
    assert import_predictions(store, write_jsonl(tmp_path / "scored.jsonl", rows)).added == 4
    assert [i["id"] for i in browse.list_items(store, annotator="ann")["items"]] == ["cap00000"]
    assert browse.list_items(store, annotator="bob")["total"] == 0
    page = browse.list_items(store, score=("infometic", "overall"), descending=True)
    assert [i["score"] for i in page["items"]] == [3.0, 2.0, 1.0, 0.5]
    kept = browse.list_items(store, score=("infometic", "overall"), score_range=(0.9, 2.5))
    assert [i["id"] for i in kept["items"]] == ["cap00002", "cap00001"] and kept["total"] == 2


def test_an_imported_score_file_keeps_the_word_scale_its_rows_record(store, tmp_path):
    """A file scored elsewhere with a fine-tuned checkpoint says, in each row's
    model block, the scale its words were decided at; the stored predictions keep it."""
    from capscope.annotation.importer import import_predictions
    from capscope.db import Caption, Prediction

    fitted = {"clip": "x", "metric_options": {"infometic": {"word_threshold_scale": 0.45}}}
    rows = [{"id": "cap00000", "model": fitted, "metrics": {"infometic": {"token_scores": [0.01, 0.2]},
                                                            "hice": {"token_scores": [0.3, 0.1]}}},
            {"id": "cap00001", "model": {"clip": "x"}, "metrics": {"infometic": {"token_scores": [0.01, 0.2]}}}]
    assert import_predictions(store, write_jsonl(tmp_path / "scored.jsonl", rows)).added == 2
    with store.read() as session:
        kept = {(c, m): w for c, m, w in session.execute(
            select(Caption.external_id, Prediction.metric, Prediction.word_scale)
            .join(Caption, Prediction.caption_id == Caption.id))}
    assert kept == {("cap00000", "infometic"): 0.45, ("cap00000", "hice"): None, ("cap00001", "infometic"): None}
