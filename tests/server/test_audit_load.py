"""1,000 labels from 20 concurrent annotators through a real `capscope serve`,
with the audit log on: every label is kept, the log holds one sign-in per
annotator (a REST client sends its password with every request; saves are not
audited), and the save latencies come back for the p95 that issue 72 compares
with the server before the log (`python tests/server/test_audit_load.py URL`
prints it for whichever capscope is on the path)."""
from __future__ import annotations

import csv
import io
import random
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from annotation_support import fresh_pg_database, prepare_load, running_server, sqlite_url

CLIENTS = 20
LABELS_EACH = 50  # 1,000 submitted judgements in all
CAPTIONS = 400  # 3 annotators each: 1,200 slots for 1,000 submissions and the skips
ADMIN = ("admin", "admin-password-1")


def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def annotate(base: str, index: int, final: dict, saves: list, failures: list) -> None:
    """One annotator: a draft, the submission and a retry of it per item, each save timed."""
    rng = random.Random(index)
    auth = (f"ann{index:02d}", f"ann-password-{index:02d}")
    with httpx.Client(base_url=base, auth=auth, timeout=60) as client:
        def save(url: str, body: dict) -> None:
            started = time.perf_counter()
            answer = client.put(url, json=body)
            saves.append(time.perf_counter() - started)
            if answer.status_code != 200:
                failures.append(f"{auth[0]}: {url} -> {answer.status_code} {answer.text[:200]}")

        submitted = 0
        while submitted < LABELS_EACH and not failures:
            answer = client.get("/api/items/next")
            if answer.status_code != 200:
                failures.append(f"{auth[0]}: next -> {answer.status_code}")
                return
            item = answer.json()
            url, n_tokens = f"/api/items/{item['item_id']}/labels", len(item["tokens"])
            if rng.random() < 0.08:
                save(url, {"status": "skipped"})
                continue
            save(url, {"incorrect_tokens": rng.sample(range(n_tokens), 2), "status": "draft"})
            labels = {"incorrect_tokens": sorted(rng.sample(range(n_tokens), rng.randint(0, 3))),
                      "mentioned_regions": sorted(rng.sample(range(len(item["regions"])), 1))}
            save(url, {**labels, "status": "submitted"})
            save(url, {**labels, "status": "submitted"})  # a retry changes nothing
            final[(auth[0], item["item_id"])] = labels
            submitted += 1


def run_load(db_url: str, folder: Path) -> dict:
    """{"saves": [seconds], "final": {(annotator, item): labels}, "csv": the export, "elapsed": s}."""
    prepare_load(db_url, folder, CAPTIONS, CLIENTS)
    final, saves, failures = {}, [], []
    with running_server(db_url) as base:
        threads = [threading.Thread(target=annotate, args=(base, i, final, saves, failures)) for i in range(CLIENTS)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        exported = httpx.get(base + "/api/export", params={"format": "csv"}, auth=ADMIN, timeout=120).text
    assert not failures, failures[:5]
    return {"saves": saves, "final": final, "csv": exported, "elapsed": elapsed}


def check_every_label_kept(exported: str, final: dict) -> None:
    kept = defaultdict(lambda: {"incorrect_tokens": [], "mentioned_regions": []})
    judged = set()
    for row in csv.DictReader(io.StringIO(exported)):
        key = (row["annotator"], int(row["item_id"]))
        judged.add(key)
        if row["label"] in ("incorrect", "mentioned"):
            kept[key]["incorrect_tokens" if row["label"] == "incorrect" else "mentioned_regions"].append(
                int(row["index"]))
    assert len(final) == CLIENTS * LABELS_EACH and judged == set(final)
    for key, labels in final.items():
        assert {k: sorted(v) for k, v in kept[key].items()} == labels, key


def check_the_log(db_url: str) -> None:
    from capscope.annotation import audit
    from capscope.db import Store

    store = Store(db_url)
    try:
        signins = audit.events(store, action="sign-in", page_size=100)["events"]
        assert sorted(e["actor"] for e in signins) == sorted({ADMIN[0], *(f"ann{i:02d}" for i in range(CLIENTS))})
        users_added, imports, exports = CLIENTS + 1, 1, 1
        assert audit.events(store)["total"] == len(signins) + users_added + imports + exports
    finally:
        store.dispose()


def _load_with_the_log(db_url: str, folder: Path) -> None:
    result = run_load(db_url, folder)
    check_every_label_kept(result["csv"], result["final"])
    check_the_log(db_url)
    print(f"\n{len(result['saves'])} saves from {CLIENTS} annotators in {result['elapsed']:.1f} s: "
          f"save p95 {p95(result['saves']) * 1000:.1f} ms")


@pytest.mark.slow
def test_a_thousand_labels_under_twenty_annotators_are_kept_with_the_log_on_sqlite(tmp_path):
    _load_with_the_log(sqlite_url(tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_thousand_labels_under_twenty_annotators_are_kept_with_the_log_on_postgres(tmp_path):
    with fresh_pg_database() as url:
        _load_with_the_log(url, tmp_path)


if __name__ == "__main__":  # the figure alone, for any capscope on the path (the one before the log too)
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        url = sys.argv[1] if len(sys.argv) > 1 else sqlite_url(Path(scratch))
        result = run_load(url, Path(scratch))
        check_every_label_kept(result["csv"], result["final"])
        print(f"save p95 {p95(result['saves']) * 1000:.1f} ms, median "
              f"{sorted(result['saves'])[len(result['saves']) // 2] * 1000:.1f} ms over {len(result['saves'])} saves "
              f"in {result['elapsed']:.1f} s")
