"""20 concurrent annotators, each labelling 30 items through the REST API of a
real `capscope serve` process, lose no label: every submitted judgement is in
the export exactly once, with the labels last sent (SQLite file and PostgreSQL)."""
from __future__ import annotations

import csv
import io
import json
import random
import threading
import time
from collections import Counter, defaultdict

import httpx
import pytest

from annotation_support import fresh_pg_database, prepare_load, running_server, sqlite_url

CLIENTS = 20
ITEMS_EACH = 30
ANNOTATORS_PER_ITEM = 3
CAPTIONS = 240  # 720 slots for 600 submissions plus skips: the queue runs nearly dry


def _annotate(base: str, index: int, final: dict, failures: list, seen_items: dict) -> None:
    rng = random.Random(index)
    auth = (f"ann{index:02d}", f"ann-password-{index:02d}")
    submitted = 0
    with httpx.Client(base_url=base, auth=auth, timeout=60) as client:
        while submitted < ITEMS_EACH:
            response = client.get("/api/items/next")
            if response.status_code != 200:
                failures.append(f"{auth[0]}: next -> {response.status_code} {response.text[:200]}")
                return
            item = response.json()
            seen_items[auth[0]].append(item["item_id"])
            n_tokens, n_regions = len(item["tokens"]), len(item["regions"])
            url = f"/api/items/{item['item_id']}/labels"
            if rng.random() < 0.08:
                client.put(url, json={"incorrect_tokens": [0], "status": "draft"})
                _check(client.put(url, json={"status": "skipped"}), failures, auth[0])
                continue
            draft = {"incorrect_tokens": rng.sample(range(n_tokens), 2), "mentioned_regions": [0]}
            _check(client.put(url, json=draft), failures, auth[0])  # a draft, saved as the annotator clicks
            labels = {"incorrect_tokens": sorted(rng.sample(range(n_tokens), rng.randint(0, 3))),
                      "mentioned_regions": sorted(rng.sample(range(n_regions), rng.randint(0, n_regions)))}
            _check(client.put(url, json={**labels, "status": "submitted"}), failures, auth[0])
            _check(client.put(url, json={**labels, "status": "submitted"}), failures, auth[0])  # a retry
            final[(auth[0], item["item_id"])] = labels
            submitted += 1


def _check(response, failures: list, who: str) -> None:
    if response.status_code != 200:
        failures.append(f"{who}: {response.request.method} {response.request.url.path} -> "
                        f"{response.status_code} {response.text[:200]}")


def _run_load(db_url: str, tmp_path) -> dict:
    prepare_load(db_url, tmp_path, CAPTIONS, CLIENTS, ANNOTATORS_PER_ITEM)
    final: dict = {}
    failures: list = []
    seen_items: dict = defaultdict(list)
    with running_server(db_url) as base:
        threads = [threading.Thread(target=_annotate, args=(base, i, final, failures, seen_items))
                   for i in range(CLIENTS)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        admin = ("admin", "admin-password-1")
        csv_text = httpx.get(base + "/api/export?format=csv", auth=admin, timeout=120).text
        jsonl_text = httpx.get(base + "/api/export?format=captokeneval", auth=admin, timeout=120).text
    assert not failures, failures[:5]
    print(f"\n{CLIENTS} clients x {ITEMS_EACH} items: {len(final)} submitted in {elapsed:.1f} s")
    _check_no_item_twice(seen_items)
    _check_csv(csv_text, final)
    _check_captokeneval(jsonl_text, final)
    return {"elapsed": elapsed}


def _check_no_item_twice(seen_items: dict) -> None:
    for user, items in seen_items.items():
        assert len(items) == len(set(items)), f"{user} was given an item twice"


def _check_csv(text: str, final: dict) -> None:
    rows = list(csv.DictReader(io.StringIO(text)))
    keys = Counter((r["annotator"], int(r["item_id"]), r["kind"], int(r["index"])) for r in rows)
    assert max(keys.values()) == 1, "a label appears twice in the export"
    exported = defaultdict(lambda: {"incorrect_tokens": [], "mentioned_regions": []})
    judgements = set()
    for r in rows:
        key = (r["annotator"], int(r["item_id"]))
        judgements.add(key)
        if r["label"] == "incorrect":
            exported[key]["incorrect_tokens"].append(int(r["index"]))
        elif r["label"] == "mentioned":
            exported[key]["mentioned_regions"].append(int(r["index"]))
    assert len(final) == CLIENTS * ITEMS_EACH
    assert judgements == set(final), "submitted judgements missing from (or extra in) the export"
    for key, labels in final.items():
        assert {k: sorted(v) for k, v in exported[key].items()} == labels, key


def _check_captokeneval(text: str, final: dict) -> None:
    by_item = defaultdict(list)
    for (_, item_id), labels in final.items():
        by_item[item_id].append(labels)
    rows = [json.loads(line) for line in text.splitlines()]
    assert len(rows) == CAPTIONS
    totals = 0
    for row in rows:
        item_id = int(row["id"][3:]) + 1  # cap00000 was imported first: item 1
        sent = by_item.get(item_id, [])
        assert len(sent) <= ANNOTATORS_PER_ITEM, "an item got more judgements than it needs"
        for i, token in enumerate(row["tokens"]):
            expected = sum(i in labels["incorrect_tokens"] for labels in sent)
            assert token.get("votes", {"incorrect": 0, "total": 0}) == (
                {"incorrect": expected, "total": len(sent)} if sent else {"incorrect": 0, "total": 0})
        totals += len(sent)
    assert totals == CLIENTS * ITEMS_EACH


@pytest.mark.slow
def test_twenty_clients_lose_nothing_sqlite(tmp_path):
    _run_load(sqlite_url(tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
def test_twenty_clients_lose_nothing_postgres(tmp_path):
    with fresh_pg_database() as url:
        _run_load(url, tmp_path)
