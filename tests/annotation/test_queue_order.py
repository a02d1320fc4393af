"""The annotation queue's order per dataset (annotation/queue.py): sequential,
seeded random, model uncertainty with one caption per image per round, and
disagreement; leases, several annotators per item and `previous_item` under
them; the REST API, the command line and the Admin tab's handlers."""
from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from annotation_support import fresh_pg_database, make_images, sqlite_url, write_jsonl
from capscope.annotation import browse, queue
from capscope.annotation import workflow as wf
from capscope.annotation.refusals import Invalid, NotFound
from capscope.annotation.uncertainty import verdict_entropy
from capscope.annotation.users import add_user
from capscope.db import Caption, Dataset, Prediction, Store, utcnow

T = 0.1  # InfoMetIC's threshold
RULE = "relative"  # the token rule the uncertainty order decides by here


def import_rows(store: Store, folder, n: int, dataset: str = "default", per_item: int = 1, n_images: int = 3,
                prefix: str = "cap"):
    """`n` captions over `n_images` images (caption i on image i % n_images), ids prefix00000..."""
    from capscope.annotation.importer import ImportOptions, import_captions

    names = make_images(folder / "images", n_images)
    rows = [{"id": f"{prefix}{i:05d}", "image": names[i % n_images],
             "caption": f"a small red square and a blue circle number {i}.",
             "regions": [{"box": [4, 4, 30, 30]}, {"box": [30, 10, 60, 40]}]} for i in range(n)]
    report = import_captions(store, write_jsonl(folder / f"{dataset}-{prefix}.jsonl", rows), folder / "images",
                             ImportOptions(dataset=dataset, annotators_per_item=per_item, regions="none",
                                           progress=False))
    assert report.added == n, report.summary()


def predict(store: Store, caption_id: int, tokens, regions=(), metric="infometic", version="v1",
            uncertainty=None, at: datetime | None = None, word_scale: float | None = None) -> None:
    with store.write() as session:
        session.add(Prediction(caption_id=caption_id, metric=metric, model_version=version,
                               token_scores=list(tokens), region_scores=list(regions), uncertainty=uncertainty,
                               word_scale=word_scale, created_at=at or utcnow()))


def external_ids(store: Store) -> dict[int, str]:
    with store.read() as session:
        return dict(session.execute(select(Caption.id, Caption.external_id)).all())


def claims(store: Store, user, n: int, **kw) -> list[int]:
    """The first `n` items `user` is given, each submitted before the next."""
    given = []
    for _ in range(n):
        item = wf.next_item(store, user, **kw)
        if item is None:
            break
        given.append(item["item_id"])
        wf.submit(store, user, item["item_id"])
    return given


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    """An empty store on SQLite, and on PostgreSQL where CAPSCOPE_TEST_PG_URL names a server."""
    if request.param == "sqlite":
        yield Store(sqlite_url(tmp_path))
        return
    with fresh_pg_database() as url:
        store = Store(url)
        try:
            yield store
        finally:
            store.dispose()


@pytest.fixture()
def users(store):
    return [add_user(store, name, "long-enough-secret") for name in ("ann", "bob", "cat", "dan")]


# ---------------------------------------------------------------- sequential and random

def test_default_is_sequential_and_unknown_order_is_refused(store, tmp_path, users):
    import_rows(store, tmp_path, 6)
    view = queue.queue_view(store, "default")
    assert (view["order"], view["seed"], view["next"], view["ranked"]) == ("sequential", 0, [1, 2, 3, 4, 5, 6], 0)
    with pytest.raises(Invalid, match="sequential, random, uncertainty, disagreement"):
        queue.set_queue_order(store, "default", "shuffled", token_rule=RULE)
    with pytest.raises(Invalid, match="seed"):
        queue.set_queue_order(store, "default", "random", seed=-1, token_rule=RULE)
    with pytest.raises(NotFound):
        queue.set_queue_order(store, "nope", "random", token_rule=RULE)
    assert claims(store, users[0], 3) == [1, 2, 3]


def test_random_order_is_fixed_by_the_seed(store, tmp_path, users):
    import_rows(store, tmp_path, 8)
    first = queue.set_queue_order(store, "default", "random", seed=7, token_rule=RULE)["next"]
    # the permutation itself is part of the contract: same seed, same order, on any database
    assert first == [7, 1, 4, 5, 6, 3, 8, 2]
    ids = external_ids(store)
    assert first == sorted(ids, key=lambda i: queue.random_rank(7, ids[i]))
    assert queue.set_queue_order(store, "default", "sequential", token_rule=RULE)["next"] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert queue.set_queue_order(store, "default", "random", seed=7, token_rule=RULE)["next"] == first
    other = queue.set_queue_order(store, "default", "random", seed=8, token_rule=RULE)["next"]
    assert sorted(other) == sorted(first) and other != first
    queue.set_queue_order(store, "default", "random", seed=7, token_rule=RULE)
    assert claims(store, users[0], 8) == first  # next_item hands them out in that order


def test_captions_added_later_come_after_the_ranked_ones_until_refreshed(store, tmp_path):
    import_rows(store, tmp_path, 6)
    ranked = queue.set_queue_order(store, "default", "random", seed=3, token_rule=RULE)["next"]
    import_rows(store, tmp_path, 3, prefix="late")  # ids 7, 8, 9: no rank yet
    view = queue.queue_view(store, "default")
    assert view["next"] == ranked + [7, 8, 9] and view["ranked"] == 6
    refreshed = queue.refresh_queue(store, "default", token_rule=RULE)["next"]
    assert refreshed != ranked + [7, 8, 9]
    assert [i for i in refreshed if i <= 6] == ranked  # the others keep their relative order
    ids = external_ids(store)
    assert refreshed == sorted(ids, key=lambda i: queue.random_rank(3, ids[i]))


def test_ranks_are_written_in_chunks_and_only_where_they_change(store, tmp_path, monkeypatch):
    import_rows(store, tmp_path, 8)
    monkeypatch.setattr(queue, "CHUNK", 3)
    writes = []
    run_write = store.run_write
    monkeypatch.setattr(store, "run_write", lambda work, *a: writes.append(work) or run_write(work, *a))
    assert queue.set_queue_order(store, "default", "random", seed=7, token_rule=RULE)["next"] \
        == [7, 1, 4, 5, 6, 3, 8, 2]
    assert len(writes) == 1 + 3  # the order, then 8 ranks in chunks of 3
    writes.clear()
    queue.refresh_queue(store, "default", token_rule=RULE)
    assert writes == []  # nothing changed, nothing written
    assert queue.set_queue_order(store, "default", "sequential", token_rule=RULE)["ranked"] == 0
    assert len(writes) == 1 + 3


# ---------------------------------------------------------------- uncertainty

def entropy(p: float) -> float:
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def test_verdict_entropy_by_hand():
    # p = sigmoid(2 ln(share / threshold)) = 1 / (1 + (share / threshold) ** -2)
    assert verdict_entropy(0.05, 0.05) == pytest.approx(1.0)
    assert verdict_entropy(0.1, 0.05) == pytest.approx(entropy(0.8)) == pytest.approx(0.721928, abs=1e-6)
    assert verdict_entropy(0.025, 0.05) == pytest.approx(entropy(0.2))  # half the threshold: as sure as twice it
    assert verdict_entropy(0.0, 0.05) == pytest.approx(0.0, abs=1e-12)


def test_item_uncertainty_counts_semantic_words_and_regions_under_the_token_rule():
    semantic = [False, True, True, True]
    # two semantic words scored: the relative threshold is min(0.1, 0.1 * 5 / 2) = 0.1; "a" is not judged
    relative = {"token_rule": RULE, "word_scale": 1.0}
    assert queue.item_uncertainty("infometic", [0.9, T, 0.2, None], [T], semantic=semantic, **relative) \
        == pytest.approx((1 + entropy(0.8) + 1) / 3)
    # ten semantic words: 0.05 under the relative rule (0.1 is twice it), beta under the paper's
    ten = [T] * 10
    assert queue.item_uncertainty("infometic", ten, [], semantic=[True] * 10, **relative) == pytest.approx(entropy(0.8))
    assert queue.item_uncertainty("infometic", ten, [], semantic=[True] * 10, token_rule="paper", word_scale=1.0) \
        == pytest.approx(1.0)
    # other metrics: the closeness to their own threshold on its scale
    assert queue.item_uncertainty("clip4dm", [-5e-5, 5e-5], [], **relative) == pytest.approx((1 + math.exp(-2)) / 2)
    assert queue.item_uncertainty("infometic", [], [], stored=0.4, **relative) == 0.4
    assert queue.item_uncertainty("infometic", [None], [], **relative) is None
    assert queue.item_uncertainty("infometic", [0.3], [], semantic=[False], **relative) is None


def test_stored_uncertainty_judges_the_caption_s_semantic_words(store, tmp_path):
    from capscope.annotation.importer.predictions import upsert_predictions

    import_rows(store, tmp_path, 1)
    # "a" (not semantic) on the threshold is left out: "red" alone is seen, at twice beta
    with store.write() as session:
        upsert_predictions(session, 1, "v1", {"infometic": {"token_scores": [T, None, 2 * T], "region_scores": []}})
    with store.read() as session:
        assert session.scalar(select(Prediction.uncertainty)) == pytest.approx(entropy(0.8))


def scores_on_red(score: float) -> list:
    """Token scores of "a small red square ..." with `score` on "red" alone: one word seen, threshold beta."""
    return [None, None, score, None]


@pytest.fixture()
def scored(store, tmp_path):
    """7 captions over 3 images (1, 4, 7 | 2, 5 | 3, 6) with InfoMetIC predictions of version v1; 7 has none."""
    import_rows(store, tmp_path, 7, per_item=2)
    for caption_id, score in {1: T, 4: 0.11, 5: 0.105, 2: 0.15, 3: 0.3, 6: 0.2}.items():
        predict(store, caption_id, scores_on_red(score), at=datetime(2024, 1, 1))
    return store


def test_uncertainty_closest_first_one_caption_per_image_per_round(scored):
    # by uncertainty alone: 1, 5, 4, 2, 6, 3; round by round: the images' best (1, 5, 6), then their
    # second (4, 2, 3); no prediction last
    assert queue.set_queue_order(scored, "default", "uncertainty", token_rule=RULE)["next"] == [1, 5, 6, 4, 2, 3, 7]
    assert queue.interleave_by_image([(1, 10, 1.0), (4, 10, 0.9), (5, 20, 0.95), (6, 30, 0.3), (2, 20, 0.6)]) \
        == [1, 5, 6, 4, 2]
    assert queue.interleave_by_image([(9, 1, 0.5), (3, 2, 0.5), (5, 1, 0.5)]) == [3, 5, 9]  # ties by id


def test_uncertainty_reads_regions_the_model_version_and_infometic_first(scored):
    # 7's word alone (0.986) would put it after 4 (0.994) on their image; its regions on the threshold lift it
    # (0.995)
    predict(scored, 7, scores_on_red(0.115), [T, T], at=datetime(2024, 1, 1))
    assert queue.set_queue_order(scored, "default", "uncertainty", token_rule=RULE)["next"] == [1, 5, 6, 7, 2, 3, 4]
    # a newer version turns the order round (7 has none: its v1 counts); the old one is still asked for by name
    for caption_id, score in {1: 0.4, 2: T, 3: 0.11, 4: 0.3, 5: 0.5, 6: 0.12}.items():
        predict(scored, caption_id, scores_on_red(score), version="v2", at=datetime(2024, 2, 1))
    assert queue.refresh_queue(scored, "default", token_rule=RULE)["next"] == [2, 7, 3, 6, 4, 5, 1]
    assert queue.refresh_queue(scored, "default", model_version="v1", token_rule=RULE)["next"] == [1, 5, 6, 7, 2, 3, 4]
    assert queue.refresh_queue(scored, "default", model_version="v2", token_rule=RULE)["next"] == [2, 3, 4, 6, 1, 5, 7]
    # another metric's newer, surer-looking prediction does not displace InfoMetIC's
    predict(scored, 5, [], metric="clip-s", version="v3", uncertainty=0.0, at=datetime(2024, 3, 1))
    predict(scored, 7, [], metric="clip4dm", version="v3", uncertainty=0.99, at=datetime(2024, 3, 1))
    assert queue.refresh_queue(scored, "default", model_version="v3", token_rule=RULE)["next"] == [7, 5, 1, 2, 3, 4, 6]
    assert queue.refresh_queue(scored, "default", token_rule=RULE)["next"] == [2, 7, 3, 6, 4, 5, 1]


def test_uncertainty_judges_words_at_the_scale_their_prediction_records(store, tmp_path):
    import_rows(store, tmp_path, 2, n_images=2)
    # "red" alone is seen: its threshold is beta, times the prediction's 0.5 (a fine-tuned version's fitted
    # scale). Caption 1 sits on 0.05, caption 2 on 0.1: at scale 1 caption 2 would come first
    predict(store, 1, scores_on_red(0.05), version="v1:abababababab", word_scale=0.5)
    predict(store, 2, scores_on_red(T), version="v1:abababababab", word_scale=0.5)
    ordered = queue.set_queue_order(store, "default", "uncertainty", model_version="v1:abababababab", token_rule=RULE)
    assert ordered["next"] == [1, 2]
    predict(store, 1, scores_on_red(0.05), version="imported")
    predict(store, 2, scores_on_red(T), version="imported")
    assert queue.refresh_queue(store, "default", model_version="imported", token_rule=RULE)["next"] == [2, 1]

def test_disagreement_puts_split_items_first_and_follows_new_labels(store, tmp_path, users):
    ann, bob, cat, dan = users
    import_rows(store, tmp_path, 6, per_item=4)
    plan = {ann: {1: ([0], []), 2: ([1], []), 3: ([0, 2], [0]), 5: ([1], [])},
            bob: {1: ([], []), 2: ([1], []), 3: ([], [])}}
    for user, labels in plan.items():  # sequential queue: 1..6, skipping what they leave alone
        while (item := wf.next_item(store, user)) is not None:
            if item["item_id"] in labels:
                wf.save_labels(store, user, item["item_id"], *labels[item["item_id"]], status="submitted")
            else:
                wf.skip(store, user, item["item_id"])
    # split units: 3 on item 3, 1 on item 1; then nobody's items 4, 6; then the agreed 2 and single 5
    assert queue.set_queue_order(store, "default", "disagreement", token_rule=RULE)["next"] == [3, 1, 4, 6, 2, 5]
    figures = {row["item_id"]: row["disagreement"] for row in browse.list_items(store)["items"]}
    assert figures == {1: 1, 2: 0, 3: 3, 4: 0, 5: 0, 6: 0}  # the Explore list's measure
    assert wf.next_item(store, cat)["item_id"] == 3
    wf.save_labels(store, cat, 3, [0], [], status="submitted")
    wf.save_labels(store, cat, wf.next_item(store, cat)["item_id"], [], [], status="submitted")  # item 1
    assert wf.next_item(store, cat)["item_id"] == 4
    wf.skip(store, cat, 4)
    assert wf.next_item(store, cat)["item_id"] == 6
    wf.skip(store, cat, 6)
    wf.save_labels(store, cat, wf.next_item(store, cat)["item_id"], [], [], status="submitted")  # item 2: now split
    assert queue.queue_view(store, "default")["next"] == [3, 1, 2, 4, 6, 5]
    assert claims(store, dan, 3) == [3, 1, 2]


# ---------------------------------------------------------------- leases, slots, previous

def test_expired_lease_frees_the_slot_and_a_held_one_does_not(store, tmp_path, users):
    ann, bob, cat, _ = users
    import_rows(store, tmp_path, 6, per_item=1)
    order = queue.set_queue_order(store, "default", "random", seed=3, token_rule=RULE)["next"]
    now = utcnow()
    assert wf.next_item(store, ann, lease_seconds=60, now=now)["item_id"] == order[0]
    assert wf.next_item(store, bob, lease_seconds=60, now=now)["item_id"] == order[1]
    held = now + timedelta(seconds=59)
    assert wf.next_item(store, cat, lease_seconds=60, now=held)["item_id"] == order[2]
    wf.skip(store, cat, order[2])
    later = now + timedelta(seconds=61)  # ann and bob walked away
    assert wf.next_item(store, cat, now=later)["item_id"] == order[0]
    assert queue.queue_view(store, "default", now=later)["next"] == [order[1], order[2], *order[3:]]


def test_each_item_goes_to_annotators_needed_users_in_queue_order(scored, users):
    ann, bob, cat, _ = users
    order = queue.set_queue_order(scored, "default", "uncertainty", token_rule=RULE)["next"]
    assert claims(scored, ann, 2) == order[:2]
    assert claims(scored, bob, 1) == order[:1]
    assert claims(scored, cat, 2) == [order[1], order[2]]  # order[0] has its two
    assert queue.queue_view(scored, "default")["next"] == order[2:]


def test_previous_item_walks_back_through_a_random_queue(store, tmp_path, users):
    ann = users[0]
    import_rows(store, tmp_path, 6)
    order = queue.set_queue_order(store, "default", "random", seed=11, token_rule=RULE)["next"]
    assert claims(store, ann, 3) == order[:3]
    assert wf.previous_item(store, ann)["item_id"] == order[2]
    assert wf.previous_item(store, ann, order[2])["item_id"] == order[1]
    assert wf.previous_item(store, ann, order[1])["item_id"] == order[0]
    assert wf.previous_item(store, ann, order[0]) is None


def test_without_a_dataset_each_dataset_keeps_its_own_order(store, tmp_path, users):
    ann, bob, cat, dan = users
    import_rows(store, tmp_path, 4, dataset="a", per_item=4)
    import_rows(store, tmp_path, 3, dataset="b", per_item=4, prefix="b")
    shuffled = queue.set_queue_order(store, "a", "random", seed=5, token_rule=RULE)["next"]
    assert shuffled != [1, 2, 3, 4]
    assert claims(store, ann, 7) == shuffled + [5, 6, 7]  # datasets one after another, each in its order
    queue.set_queue_order(store, "b", "disagreement", token_rule=RULE)
    given = []
    while (item := wf.next_item(store, bob)) is not None:
        given.append(item["item_id"])
        wf.save_labels(store, bob, item["item_id"], [0] if item["item_id"] == 6 else [], [], status="submitted")
    assert given == shuffled + [5, 6, 7]  # nothing split in b yet
    assert claims(store, cat, 7) == shuffled + [6, 5, 7]  # bob and ann split on item 6
    queue.set_queue_order(store, "b", "random", seed=5, token_rule=RULE)  # one order everywhere: one ranking over both
    ids = external_ids(store)
    assert claims(store, dan, 7) == sorted(ids, key=lambda i: queue.random_rank(5, ids[i]))


def test_upgrade_gives_existing_datasets_the_sequential_queue(tmp_path):
    store = Store(sqlite_url(tmp_path))
    store.downgrade("0002")
    with store.write() as session:
        session.execute(text("INSERT INTO datasets (id, name, created_at) VALUES (1, 'old', '2024-01-01 00:00:00')"))
    store.upgrade()
    with store.read() as session:
        assert session.execute(select(Dataset.queue_order, Dataset.queue_seed)).one() == ("sequential", 0)


# ---------------------------------------------------------------- PostgreSQL

@pytest.mark.postgres
def test_postgres_orders_match_sqlite_and_concurrent_claims_stay_single(tmp_path):
    def orders(store: Store, folder) -> list[list[str]]:
        import_rows(store, folder, 9, per_item=1)
        for caption_id, score in enumerate([T, 0.2, 0.11, 0.3, 0.15, 0.5, 0.12, 0.25], start=1):
            predict(store, caption_id, [score], [score])
        ids = external_ids(store)
        found = []
        for order, seed in (("random", 7), ("uncertainty", 0), ("sequential", 0)):
            view = queue.set_queue_order(store, "default", order, seed, token_rule=RULE)
            found.append([ids[i] for i in view["next"]])
        return found

    sqlite_orders = orders(Store(sqlite_url(tmp_path)), tmp_path / "sqlite")
    with fresh_pg_database() as url:
        store = Store(url)
        try:
            assert orders(store, tmp_path / "pg") == sqlite_orders
            queue.set_queue_order(store, "default", "random", seed=7, token_rule=RULE)
            people = [add_user(store, f"u{i}", "long-enough-secret") for i in range(9)]
            given: dict[str, int] = {}

            def claim(user):
                given[user.name] = wf.next_item(store, user)["item_id"]

            threads = [threading.Thread(target=claim, args=(user,)) for user in people]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(given.values()) == list(range(1, 10))  # nine claims, nine different items
        finally:
            store.dispose()


# ---------------------------------------------------------------- REST API, command line, Admin tab

@pytest.fixture()
def api(store, tmp_path):
    from capscope.server.api import create_app

    import_rows(store, tmp_path, 5)
    add_user(store, "ann", "ann-password-1")
    add_user(store, "boss", "boss-password-1", role="admin")
    return TestClient(create_app(store=store), raise_server_exceptions=False)


def test_api_sets_and_shows_the_queue(api):
    boss = ("boss", "boss-password-1")
    got = api.get("/api/datasets/default/queue", auth=boss)
    assert got.status_code == 200
    assert got.json() == {"dataset": "default", "order": "sequential", "seed": 0, "ranked": 0, "next": [1, 2, 3, 4, 5]}
    put = api.put("/api/datasets/default/queue", json={"order": "random", "seed": 7}, auth=boss)
    assert put.status_code == 200
    expected = queue.queue_view(api.app.state.store, "default")
    assert put.json() == expected and expected["order"] == "random" and expected["seed"] == 7
    assert api.get("/api/datasets/default/queue", auth=boss).json() == expected
    assert api.put("/api/datasets/default/queue", json={"order": "sequential"}, auth=boss).json()["next"] \
        == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("body, status", [({"order": "bogus"}, 422), ({"order": "random", "seed": -3}, 422),
                                          ({"order": "random", "seed": "x"}, 422), ({}, 422),
                                          ({"order": "random", "seed": 2**40}, 422)])
def test_api_refuses_bad_orders_with_a_detail(api, body, status):
    response = api.put("/api/datasets/default/queue", json=body, auth=("boss", "boss-password-1"))
    assert response.status_code == status and response.json()["detail"]
    if body.get("order") == "bogus":
        assert "sequential, random, uncertainty, disagreement" in response.json()["detail"]


def test_api_queue_is_for_admins_and_known_datasets(api):
    for call in (lambda **kw: api.get("/api/datasets/default/queue", **kw),
                 lambda **kw: api.put("/api/datasets/default/queue", json={"order": "random"}, **kw)):
        assert call(auth=("ann", "ann-password-1")).status_code == 403
        assert call().status_code == 401
    assert api.get("/api/datasets/nope/queue", auth=("boss", "boss-password-1")).status_code == 404
    missing = api.put("/api/datasets/nope/queue", json={"order": "random"}, auth=("boss", "boss-password-1"))
    assert missing.status_code == 404 and "nope" in missing.json()["detail"]


def test_cli_sets_and_prints_the_queue(store, tmp_path, capsys):
    from capscope.cli import main

    import_rows(store, tmp_path, 8)
    url = store.url
    assert main(["queue", "--dataset", "default", "--db", url]) == 0
    assert capsys.readouterr().out.splitlines() == ["dataset default: order sequential, seed 0, 0 items ranked",
                                                    "next: 1 2 3 4 5 6 7 8"]
    assert main(["queue", "--dataset", "default", "--order", "random", "--seed", "7", "--show", "3", "--db", url]) == 0
    assert capsys.readouterr().out.splitlines() == ["dataset default: order random, seed 7, 8 items ranked",
                                                    "next: 7 1 4"]
    assert main(["queue", "--dataset", "default", "--order", "bogus", "--db", url]) == 2
    assert "sequential, random, uncertainty, disagreement" in capsys.readouterr().err
    assert main(["queue", "--dataset", "nope", "--db", url]) == 2
    assert queue.queue_view(store, "default")["order"] == "random"


def test_admin_tab_applies_and_shows_the_order(store, tmp_path):
    from capscope.ui import admin as ui_admin

    import_rows(store, tmp_path, 4)
    text_ = ui_admin.apply_queue_order(store, "default", "random", 7.0, RULE)
    view = queue.queue_view(store, "default")
    assert text_ == ui_admin.queue_text(view) and "order **random**, seed 7" in text_
    assert ui_admin.show_queue(store, "default") == ("random", 7, text_)
    assert ui_admin.apply_queue_order(store, "default", "bogus", 0, RULE).startswith("**Not applied:**")
    assert ui_admin.apply_queue_order(store, "", "random", 0, RULE).startswith("**Not applied:**")


def test_explore_shows_each_item_s_newest_uncertainty(store, tmp_path):
    import_rows(store, tmp_path, 2)
    predict(store, 1, [], uncertainty=0.9, at=datetime(2024, 1, 1))
    predict(store, 1, [], version="v2", uncertainty=0.1, at=datetime(2024, 2, 1))  # activated later: it counts
    predict(store, 1, [], metric="hice", version="v2", uncertainty=0.7, at=datetime(2024, 2, 1))  # same import
    predict(store, 2, [], uncertainty=0.5, at=datetime(2024, 1, 1))
    listed = browse.list_items(store, sort="uncertainty", descending=True)["items"]
    assert [(row["item_id"], row["uncertainty"]) for row in listed] == [(2, 0.5), (1, 0.1)]
