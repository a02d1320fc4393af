"""The audit log: a row for each sign-in (ok and failed), sign-out, change of a
user, import, export, gold written, adjudication, training started and model
activated; admins read it (filtered, paged) and export it; nobody changes it
through capscope. On a15ad8a there was none: a team could not tell afterwards
who did what."""
from __future__ import annotations

import json
import secrets

import httpx
import pytest

from annotation_support import fresh_pg_database, make_images, sqlite_url, write_jsonl
from capscope.annotation import audit
from capscope.cli import main
from capscope.db import Store
from security_support import ADMIN, ANN, basic, ui_login


def logged(http, **filters) -> list[dict]:
    answer = http.get("/api/audit", params={"page_size": 500, **filters}, headers=basic(ADMIN))
    assert answer.status_code == 200, answer.text
    return answer.json()["events"]


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_each_action_leaves_a_row_with_who_when_and_where(team, http, tmp_path):
    name = f"aud{secrets.token_hex(3)}"
    password = "audit-password-1"
    db = ["--db", team.store.url]
    assert main(["users", "add", name, "--password-file", str(_file(tmp_path, password)), *db]) == 0
    assert main(["users", "disable", name, *db]) == 0
    assert main(["users", "enable", name, *db]) == 0
    ui = ui_login(team, (name, password))
    ui.get("/logout")
    httpx.post(team.url + "/login", data={"username": name, "password": "not the password"})
    assert http.get("/api/me", headers=basic((name, "wrong password"))).status_code == 401
    names = make_images(tmp_path / "images", 1)
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": "a1", "image": names[0], "caption": "a red square."}])
    dataset = f"audited-{secrets.token_hex(3)}"
    assert main(["import", "--captions", str(rows), "--images", str(tmp_path / "images"), "--dataset", dataset,
                 "--regions", "none", *db]) == 0
    assert http.get("/api/export", params={"dataset": dataset, "format": "csv"}, headers=basic(ADMIN)).status_code \
        == 200
    assert http.post("/api/gold/majority", params={"dataset": dataset, "min_judgements": 1},
                     headers={**basic(ADMIN), "X-Requested-With": "test"}).status_code == 200
    item = http.get("/api/items", params={"dataset": dataset}, headers=basic(ADMIN)).json()["items"][0]
    detail = http.get(f"/api/items/{item['item_id']}", headers=basic(ADMIN)).json()
    gold = {"token_labels": ["correct"] * len(detail["tokens"]), "region_labels": [None] * len(detail["regions"])}
    assert http.put(f"/api/items/{item['item_id']}/gold", json=gold, headers=basic(ADMIN)).status_code == 200
    assert http.post("/api/models/default/activate", json={"rescore": False}, headers=basic(ADMIN)).status_code == 200

    events = logged(http)
    def one(action, **fields):
        found = [e for e in events if e["action"] == action and all(e[k] == v for k, v in fields.items())]
        assert found, (action, fields, [e["action"] for e in events[:30]])
        return found[0]

    cli = one("user added", target=name)["actor"]
    assert cli.startswith("command line")
    one("user disabled", target=name, actor=cli)
    one("user enabled", target=name, actor=cli)
    assert one("sign-in", actor=name)["address"] == "127.0.0.1"
    one("sign-out", actor=name)
    assert {e["details"]["by"] for e in events if e["action"] == "sign-in failed" and e["actor"] == name} == \
        {"web UI", "REST"}
    assert one("import", target=dataset)["details"]["added"] == 1
    assert one("export", target=dataset, actor=ADMIN[0])["details"] == {"format": "csv"}
    assert one("gold written", target=dataset, actor=ADMIN[0])["details"]["method"] == "majority"
    one("adjudication", target=f"item {item['item_id']}", actor=ADMIN[0])
    assert one("model activated", actor=ADMIN[0])["target"] == "default-model"
    assert all(e["at"] and e["id"] for e in events)


def test_admins_read_filter_page_and_export_it_and_nobody_changes_it(team, http):
    audit.record(team.store, "export", actor="someone", target="=cmd|' /C calc'!A0", details={"format": "csv"})
    assert http.get("/api/audit", headers=basic(ANN)).status_code == 403
    assert http.get("/api/audit").status_code == 401
    page = http.get("/api/audit", params={"action": "export", "page_size": 1}, headers=basic(ADMIN)).json()
    assert page["page_size"] == 1 and len(page["events"]) == 1 and page["total"] >= 1
    assert http.get("/api/audit", params={"action": "drop table"}, headers=basic(ADMIN)).status_code == 422
    lines = http.get("/api/audit/export", headers=basic(ADMIN)).text.splitlines()
    assert lines and all(json.loads(line)["action"] in audit.ACTIONS for line in lines)
    table = http.get("/api/audit/export", params={"format": "csv", "actor": "someone"}, headers=basic(ADMIN)).text
    assert "'=cmd|" in table  # a cell a spreadsheet would run is quoted
    assert table.splitlines()[0].startswith("id,at,actor,action")
    for method in ("PUT", "DELETE", "POST", "PATCH"):
        for path in ("/api/audit", "/api/audit/1", "/api/audit/export"):
            answer = http.request(method, path, headers={**basic(ADMIN), "X-Requested-With": "t"})
            assert answer.status_code in (404, 405), (method, path, answer.status_code)
    schema = http.get("/openapi.json").json()["paths"]
    assert set(schema["/api/audit"]) == {"get"} and set(schema["/api/audit/export"]) == {"get"}


def test_the_log_is_kept_on_sqlite_and_postgresql(tmp_path):
    urls = [sqlite_url(tmp_path)]
    with fresh_pg_database() as pg_url:
        for url in [*urls, pg_url]:
            store = Store(url)
            try:
                with audit.acting_as("boss", "192.0.2.1"):
                    audit.record(store, "gold written", target="d", details={"method": "majority", "items": 3})
                audit.record(store, "sign-in failed", actor="mallory", address="198.51.100.9")
                page = audit.events(store, page_size=1)
                assert page["total"] == 2 and page["events"][0]["actor"] == "mallory"
                first = audit.events(store, action="gold written")["events"][0]
                assert (first["actor"], first["address"], first["details"]["method"]) == ("boss", "192.0.2.1",
                                                                                          "majority")
                assert len(list(audit.iter_export(store, "csv", batch=1))) == 3  # a header and 2 rows
            finally:
                store.dispose()


def test_an_action_the_log_does_not_know_is_refused_and_a_row_stays_small(tmp_path):
    from pathlib import PurePosixPath

    store = Store(sqlite_url(tmp_path))
    with pytest.raises(ValueError):
        audit.record(store, "deleted everything")
    audit.record(store, "import", actor="x" * 5000, target="t" * 5000,
                 details={"file": PurePosixPath("a/b.jsonl"), "note": "n" * 5000})
    audit.record(store, "export", details={"file": PurePosixPath("a/b.jsonl")})
    small, big = audit.events(store)["events"]  # newest first
    assert len(big["actor"]) == 200 and len(big["target"]) == 300 and len(big["details"]["cut"]) == 2000
    assert small["details"] == {"file": "a/b.jsonl"}


def _file(folder, text: str):
    path = folder / "password.txt"
    path.write_text(text + "\n")
    return path


GOLD_ROW = {"id": "g1", "caption": "a red square.",
            "tokens": [{"text": "a", "start": 0, "end": 1, "semantic": False, "label": None},
                       {"text": "red", "start": 2, "end": 5, "semantic": True, "label": "incorrect"},
                       {"text": "square", "start": 6, "end": 12, "semantic": True, "label": "correct"},
                       {"text": ".", "start": 12, "end": 13, "semantic": False, "label": None}],
            "regions": [{"box": [4.0, 4.0, 30.0, 30.0], "mask": None, "label": "mentioned"}]}
SERVED_ONLY = {"sign-out", "training started", "model activated"}  # test_each_action_leaves_a_row_...


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_every_workflow_action_is_logged_on_sqlite_and_postgresql(backend, tmp_path):
    """Each action that the annotation layer or the REST sign-in performs adds one row with
    who and from where, on both databases; review decisions are accepted by `record`
    (tests/annotation/test_review.py makes real ones)."""
    import contextlib

    from fastapi.testclient import TestClient

    from capscope.annotation import agreement, controls, export, label_studio, queue, release, removed_regions, review
    from capscope.annotation.importer import ImportOptions, import_captions, import_captokeneval, import_predictions
    from capscope.annotation.users import add_user, set_active
    from capscope.server.api import create_app

    with (fresh_pg_database() if backend == "postgresql" else contextlib.nullcontext(sqlite_url(tmp_path))) as url:
        store = Store(url)
        try:
            names = make_images(tmp_path / "images", 1)
            captions = write_jsonl(tmp_path / "c.jsonl", [{"id": "c1", "image": names[0], "caption": "a red square."}])
            gold = write_jsonl(tmp_path / "g.jsonl", [{**GOLD_ROW, "image": names[0]}])
            predictions = write_jsonl(tmp_path / "p.jsonl", [{"id": "c1", "error": "not scored"}])
            options = ImportOptions(dataset="d", annotators_per_item=1, regions="none", progress=False)
            with audit.acting_as("boss", "192.0.2.7"):
                boss = add_user(store, "boss", "boss-password-1", "admin")
                add_user(store, "ann", "ann-password-1")
                add_user(store, "ann", "ann-password-2", "admin", replace=True)
                set_active(store, "ann", False)
                set_active(store, "ann", True)
                import_captions(store, captions, tmp_path / "images", options)
                import_captokeneval(store, gold, ImportOptions(dataset="g", progress=False), tmp_path / "images")
                import_predictions(store, predictions, "d")
                list(export.iter_export(store, "csv", "d"))
                tasks = list(label_studio.tasks(store, "d", token_rule="relative"))
                label_studio.import_export_rows(store, tasks, "d")
                agreement.gold_from_majority(store, "d", min_judgements=1)
                agreement.adjudicate(store, boss, 1, [None] * 4, [None])
                controls.set_control(store, 2, True)
                controls.set_control(store, 2, False)
                controls.set_control_settings(store, "d", 0.2)
                release.make_release(store, "d", "v1", tmp_path / "release")
                review.set_review(store, boss, "d", True)
                queue.set_queue_order(store, "d", "random", 3, token_rule="relative")
                removed_regions.remove_region(store, boss, 2, 0)  # the gold item's one region
                audit.record(store, "review decision", target="item 1", details={"decision": "accepted"})
            with TestClient(create_app(store=store)) as client:
                assert client.get("/api/me", auth=("ann", "ann-password-2")).status_code == 200
                assert client.get("/api/me", auth=("ann", "ann-password-1")).status_code == 401
            rows = list(map(json.loads, audit.iter_export(store, "jsonl")))
        finally:
            store.dispose()
    assert {row["action"] for row in rows} == set(audit.ACTIONS) - SERVED_ONLY
    by_action = {}
    for row in rows:
        by_action.setdefault(row["action"], []).append(row)
    for action, found in by_action.items():
        if action.startswith("sign-in"):
            assert [(r["actor"], r["address"]) for r in found] == [("ann", "testclient")], action
        else:
            assert {(r["actor"], r["address"]) for r in found} == {("boss", "192.0.2.7")}, action
    assert by_action["role changed"][0]["details"] == {"from": "annotator", "to": "admin"}
    assert sorted(r["details"]["method"] for r in by_action["gold written"]) == ["import", "majority"]
    assert sorted(r["details"]["kind"] for r in by_action["import"]) == ["captions", "captokeneval", "label studio",
                                                                         "predictions"]
    assert sorted(r["details"]["format"] for r in by_action["export"]) == ["csv", "label studio"]


def test_nothing_in_capscope_changes_or_deletes_a_row():
    """The log's module only adds rows, and no other module of capscope touches its table."""
    import re
    from pathlib import Path

    import capscope.annotation.audit as audit_module

    assert not re.search(r"\b(update|delete|merge)\b", Path(audit_module.__file__).read_text().lower())
    roots = [Path(__import__(name, fromlist=["x"]).__file__).parent for name in
             ("capscope", "capscope.annotation", "capscope.db", "capscope.metrics")]
    mentions = re.compile(r"\bAuditEvent\b|[\"']audit_events[\"']")  # the model or its table
    touching = {path.name for root in roots for path in root.rglob("*.py")
                if "migrations" not in path.parts and mentions.search(path.read_text())}
    assert touching == {"audit.py", "models.py", "__init__.py"}
