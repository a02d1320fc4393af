"""The review stage (annotation/review.py and its REST calls): an annotator submits, a
reviewer sends back with a comment, the annotator corrects and submits again, the
reviewer accepts; who may review; what counts as a vote while a judgement waits."""
import contextlib

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from annotation_support import fresh_pg_database, import_small_dataset, sqlite_url
from capscope.annotation import audit, review
from capscope.annotation import workflow as wf
from capscope.annotation.refusals import Forbidden, Invalid
from capscope.annotation.users import add_user
from capscope.annotation.votes import load_item
from capscope.db import Assignment, LabelRevision, Store

ANN, BOB, REV, ADMIN = (("ann", "ann-password-1"), ("bob", "bob-password-1"), ("rev", "rev-password-1"),
                        ("boss", "boss-password-1"))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    with (fresh_pg_database() if request.param == "postgresql"
          else contextlib.nullcontext(sqlite_url(tmp_path))) as url:
        store = Store(url)
        try:
            import_small_dataset(store, tmp_path, n_images=2, n_captions=3, annotators_per_item=2)
            yield store
        finally:
            store.dispose()


@pytest.fixture()
def people(store):
    return {"ann": add_user(store, *ANN), "bob": add_user(store, *BOB),
            "rev": add_user(store, *REV, role="reviewer"), "boss": add_user(store, *ADMIN, role="admin")}


def judgement_id(store, user, item_id) -> int:
    with store.read() as session:
        return session.scalar(select(Assignment.id).where(Assignment.user_id == user.id,
                                                          Assignment.caption_id == item_id))


def test_submit_return_resubmit_accept_and_the_history_shows_every_step(store, people):
    ann, rev, boss = people["ann"], people["rev"], people["boss"]
    review.set_review(store, boss, "default", True)
    item = wf.next_item(store, ann)["item_id"]
    wf.save_labels(store, ann, item, [1], [0], "submitted")
    seen = review.next_for_review(store, rev)
    assert seen["item_id"] == item and seen["annotator"] == "ann" and seen["review"]["status"] == "pending"
    assert seen["labels"]["incorrect_tokens"] == [1] and seen["labels"]["mentioned_regions"] == [0]
    assert "control" not in seen and "control" not in wf.get_item(store, ann, item)

    done = review.decide(store, rev, seen["assignment_id"], "return", "  word 3 is wrong too  ")
    assert done["decision"] == "returned" and done["labels"]["status"] == "draft"
    mine = wf.next_item(store, ann)  # handed back first, with the comment
    assert mine["item_id"] == item
    assert mine["review"] == {"status": "returned", "comment": "word 3 is wrong too", "reviewer": "rev",
                              "reviewed_at": mine["review"]["reviewed_at"]}
    assert review.returned_to(store, ann)[0]["comment"] == "word 3 is wrong too"
    assert review.next_for_review(store, rev) is None  # nothing pending while it is back with ann

    wf.toggle_token(store, ann, item, 3)
    wf.submit(store, ann, item)
    again = review.next_for_review(store, rev)
    assert again["review"]["status"] == "pending"
    assert again["since_returned"] == {"incorrect_tokens": {"added": [3], "removed": []}}
    review.decide(store, rev, again["assignment_id"], "accept")

    steps = [(h["action"], h["by"], h["comment"], h["status"]) for h in wf.history(store, ann, item)]
    assert [s for s in steps if s[0] != "edit" and s[0] != "start"] == [
        ("submitted", "ann", None, "submitted"),
        ("returned", "rev", "word 3 is wrong too", "draft"),
        ("resubmitted", "ann", None, "submitted"),
        ("accepted", "rev", None, "submitted")]
    assert wf.get_item(store, ann, item)["review"]["status"] == "accepted"
    decisions = audit.events(store, action="review decision")["events"]
    assert [(e["actor"], e["details"]["decision"]) for e in reversed(decisions)] == [("rev", "returned"),
                                                                                     ("rev", "accepted")]


def test_pending_judgements_are_no_votes_until_reviewed(store, people):
    ann, bob, rev, boss = people["ann"], people["bob"], people["rev"], people["boss"]
    review.set_review(store, boss, "default", True)
    item = wf.next_item(store, ann)["item_id"]
    assert wf.next_item(store, bob)["item_id"] == item
    wf.save_labels(store, ann, item, [1], [], "submitted")
    wf.save_labels(store, bob, item, [1, 2], [], "submitted")
    assert load_item(store, item).judgements == []
    review.decide(store, rev, judgement_id(store, ann, item), "accept")
    assert [j.user for j in load_item(store, item).judgements] == ["ann"]
    # with review off, every submitted judgement counts, as before; on again, pending ones wait again
    review.set_review(store, boss, "default", False)
    assert [j.user for j in load_item(store, item).judgements] == ["ann", "bob"]
    review.set_review(store, boss, "default", True)
    assert [j.user for j in load_item(store, item).judgements] == ["ann"]


def test_without_review_nothing_changes(store, people):
    ann = people["ann"]
    item = wf.next_item(store, ann)["item_id"]
    wf.save_labels(store, ann, item, [2], [], "submitted")
    assert wf.get_item(store, ann, item)["review"] is None
    assert [h["action"] for h in wf.history(store, ann, item)] == ["start", "edit"]
    assert [j.incorrect_tokens for j in load_item(store, item).judgements] == [{2}]
    assert review.next_for_review(store, people["rev"]) is None


def test_a_correction_becomes_the_labels_and_shows_its_diff(store, people):
    ann, rev, boss = people["ann"], people["rev"], people["boss"]
    review.set_review(store, boss, "default", True)
    item = wf.next_item(store, ann)["item_id"]
    wf.save_labels(store, ann, item, [1, 2], [0], "submitted")
    assignment = judgement_id(store, ann, item)
    done = review.decide(store, rev, assignment, "correct", "word 2 is right",
                         incorrect_tokens=[1, 4], mentioned_regions=[0, 1])
    assert done["diff"] == {"incorrect_tokens": {"added": [4], "removed": [2]},
                            "mentioned_regions": {"added": [1], "removed": []}}
    labels = wf.get_item(store, ann, item)["labels"]
    assert (labels["incorrect_tokens"], labels["mentioned_regions"], labels["status"]) == ([1, 4], [0, 1],
                                                                                           "submitted")
    assert not labels["can_undo"]  # the annotator's undo does not take the correction back
    judgement = load_item(store, item).judgements[0]
    assert (judgement.incorrect_tokens, judgement.mentioned_regions) == ({1, 4}, {0, 1})
    last = wf.history(store, ann, item)[-1]
    assert (last["action"], last["by"], last["comment"], last["incorrect_tokens"]) == ("corrected", "rev",
                                                                                      "word 2 is right", [1, 4])
    # the annotator edits it afterwards: it goes back to review
    wf.toggle_token(store, ann, item, 1)
    assert wf.get_item(store, ann, item)["review"]["status"] == "pending"
    assert load_item(store, item).judgements == []


def test_who_may_review_and_bad_decisions_change_nothing(store, people):
    ann, bob, rev, boss = people["ann"], people["bob"], people["rev"], people["boss"]
    item = wf.next_item(store, ann)["item_id"]
    wf.save_labels(store, ann, item, [1], [], "submitted")
    early = judgement_id(store, ann, item)
    with pytest.raises(Forbidden, match="review is off"):  # a reviewer, but the dataset has no review
        review.decide(store, rev, early, "accept")
    with pytest.raises(Forbidden):
        review.set_review(store, rev, "default", True)
    review.set_review(store, boss, "default", True)
    with pytest.raises(Invalid, match="not waiting for review"):  # submitted before review was on: it counts
        review.decide(store, rev, early, "accept")
    wf.toggle_token(store, ann, item, 2)  # and stays unreviewed when edited
    assert wf.get_item(store, ann, item)["review"] is None
    assert wf.next_item(store, bob)["item_id"] == item
    wf.save_labels(store, bob, item, [1, 2], [], "submitted")
    assignment = judgement_id(store, bob, item)
    with pytest.raises(Forbidden, match="reviewer or admin"):
        review.decide(store, ann, assignment, "accept")
    with pytest.raises(Forbidden):
        review.next_for_review(store, ann)
    with pytest.raises(Invalid, match="needs a comment"):
        review.decide(store, rev, assignment, "return", "   ")
    with pytest.raises(Invalid, match="out of range"):
        review.decide(store, rev, assignment, "correct", incorrect_tokens=[99])
    with pytest.raises(Invalid, match="changes nothing"):
        review.decide(store, rev, assignment, "correct", incorrect_tokens=[1, 2])
    with pytest.raises(Invalid, match="at most"):
        review.decide(store, rev, assignment, "return", "x" * (review.MAX_COMMENT_CHARS + 1))
    with pytest.raises(Invalid, match="only with the decision correct"):
        review.decide(store, rev, assignment, "accept", incorrect_tokens=[1])
    with store.read() as session:
        assert session.get(Assignment, assignment).review_status == "pending"
        revisions = session.scalar(select(LabelRevision.revision).where(LabelRevision.assignment_id == assignment)
                                   .order_by(LabelRevision.revision.desc()).limit(1))
    assert audit.events(store, action="review decision")["total"] == 0
    # a reviewer who labelled an item never reviews their own judgement
    own = wf.next_item(store, rev)["item_id"]
    wf.submit(store, rev, own)
    assert review.next_for_review(store, rev)["annotator"] == "bob"
    assert review.next_for_review(store, rev, after=assignment) is None
    assert review.pending_count(store, rev) == 1 and review.pending_count(store, boss) == 2
    with pytest.raises(Forbidden, match="your own"):
        review.decide(store, rev, judgement_id(store, rev, own), "accept")
    review.decide(store, boss, judgement_id(store, rev, own), "accept")  # an admin reviews too
    review.decide(store, rev, assignment, "accept")
    with pytest.raises(Invalid, match="it is accepted"):
        review.decide(store, rev, assignment, "accept")
    with store.read() as session:
        assert session.scalar(select(LabelRevision.revision).where(LabelRevision.assignment_id == assignment)
                              .order_by(LabelRevision.revision.desc()).limit(1)) == revisions + 1


def test_a_returned_draft_keeps_its_slot_past_its_lease(store, people):
    from datetime import timedelta

    from capscope.db import utcnow

    ann, bob, rev, boss = people["ann"], people["bob"], people["rev"], people["boss"]
    review.set_review(store, boss, "default", True)
    item = wf.next_item(store, ann)["item_id"]
    assert wf.next_item(store, bob)["item_id"] == item  # both slots of the item taken
    wf.submit(store, ann, item)
    wf.submit(store, bob, item)
    review.decide(store, rev, judgement_id(store, ann, item), "return", "look again", lease_seconds=60)
    later = utcnow() + timedelta(hours=2)
    assert wf.next_item(store, rev, now=later)["item_id"] != item  # ann's slot is still ann's
    assert wf.next_item(store, ann, now=later)["item_id"] == item


# ---------------------------------------------------------------- REST

@pytest.fixture()
def api(store, people):
    from capscope.server.api import create_app

    client = TestClient(create_app(store=store), raise_server_exceptions=False)
    client.store = store
    return client


def test_rest_four_steps_and_refusals(api):
    assert api.put("/api/datasets/default/review", json={"review": True}, auth=REV).status_code == 403
    assert api.put("/api/datasets/nowhere/review", json={"review": True}, auth=ADMIN).status_code == 404
    assert api.put("/api/datasets/default/review", json={"review": "yes"}, auth=ADMIN).status_code == 422
    assert api.get("/api/review/next", auth=REV).status_code == 204
    switched = api.put("/api/datasets/default/review", json={"review": True}, auth=ADMIN)
    assert switched.json() == {"dataset": "default", "review": True}

    item = api.get("/api/items/next", auth=ANN).json()
    url = f"/api/items/{item['item_id']}/labels"
    assert api.put(url, json={"incorrect_tokens": [1], "mentioned_regions": [0], "status": "submitted"},
                   auth=ANN).status_code == 200
    pending = api.get("/api/review/next?dataset=default", auth=REV)
    assert pending.status_code == 200 and pending.json()["item_id"] == item["item_id"]
    judgement = pending.json()["assignment_id"]
    decide = f"/api/review/{judgement}"
    assert api.get("/api/review/next", auth=ANN).status_code == 403
    assert api.get(decide, auth=ANN).status_code == 403
    assert api.post(decide, json={"decision": "accept"}, auth=ANN).status_code == 403
    assert api.post(decide, json={"decision": "return", "comment": ""}, auth=REV).status_code == 422
    assert api.post(decide, json={"decision": "return"}, auth=REV).status_code == 422
    assert api.post(decide, json={"decision": "maybe"}, auth=REV).status_code == 422
    assert api.post(decide, json={"decision": "return", "comment": "x" * 5000}, auth=REV).status_code == 422
    assert api.post(decide, json={"decision": "correct", "incorrect_tokens": list(range(20_000))},
                    auth=REV).status_code == 422
    assert api.post("/api/review/999999", json={"decision": "accept"}, auth=REV).status_code == 404
    assert api.get(f"/api/images/{item['image_id']}", auth=REV).status_code == 200  # the reviewer sees the picture

    sent = api.post(decide, json={"decision": "return", "comment": "region 2 is mentioned too"}, auth=REV)
    assert sent.status_code == 200 and sent.json()["review"]["status"] == "returned"
    assert api.post(decide, json={"decision": "accept"}, auth=REV).status_code == 422  # not pending now
    back = api.get("/api/items/next", auth=ANN).json()
    assert back["item_id"] == item["item_id"]
    assert back["review"]["comment"] == "region 2 is mentioned too" and back["review"]["reviewer"] == "rev"
    assert api.get("/api/review/returned", auth=ANN).json()[0]["item_id"] == item["item_id"]
    assert api.put(url, json={"incorrect_tokens": [1], "mentioned_regions": [0, 1], "status": "submitted"},
                   auth=ANN).status_code == 200
    assert api.get("/api/review/returned", auth=ANN).json() == []
    accepted = api.post(decide, json={"decision": "accept", "comment": "good"}, auth=REV)
    assert accepted.status_code == 200 and accepted.json()["decision"] == "accepted"

    history = api.get(f"/api/items/{item['item_id']}/history", auth=ANN).json()
    steps = [(h["action"], h["by"], h["comment"]) for h in history if h["action"] not in ("start", "edit")]
    assert steps == [("submitted", "ann", None), ("returned", "rev", "region 2 is mentioned too"),
                     ("resubmitted", "ann", None), ("accepted", "rev", "good")]
    full = api.get(decide, auth=REV).json()
    assert full["history"] == history and full["review"]["status"] == "accepted"
    datasets = api.get("/api/review/datasets", auth=REV).json()
    assert datasets == [{"dataset": "default", "review": True, "pending": 0, "returned": 0}]
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/api/review/next", "/api/review/{assignment_id}", "/api/datasets/{name}/review"} <= set(paths)


def test_rest_correction(api):
    api.put("/api/datasets/default/review", json={"review": True}, auth=ADMIN)
    item = api.get("/api/items/next", auth=ANN).json()["item_id"]
    api.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [2], "status": "submitted"}, auth=ANN)
    judgement = api.get("/api/review/next", auth=REV).json()["assignment_id"]
    done = api.post(f"/api/review/{judgement}", json={"decision": "correct", "incorrect_tokens": [3],
                                                      "links": [[3, 0]]}, auth=REV)
    assert done.status_code == 200
    assert done.json()["diff"] == {"incorrect_tokens": {"added": [3], "removed": [2]},
                                   "links": {"added": [[3, 0]], "removed": []}}
    labels = api.get(f"/api/items/{item}", auth=ANN).json()["labels"]
    assert labels["incorrect_tokens"] == [3] and labels["links"] == [[3, 0]]
