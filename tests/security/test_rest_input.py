"""Every REST operation, sent what an attacker would send: never a 5xx, never
an echo of what could not be encoded, and the roles as before. On eb11b64 a
lone surrogate in any JSON string gave a 500."""
from __future__ import annotations

import json
import random

import pytest

from security_support import ADMIN, ANN, basic

ANYONE = {"GET /api/health"}
ADMIN_ONLY = {
    "GET /api/agreement", "GET /api/datasets/{name}/queue", "PUT /api/datasets/{name}/queue", "GET /api/export",
    "GET /api/items", "GET /api/items/{item_id}/gold", "PUT /api/items/{item_id}/gold",
    "GET /api/items/{item_id}/gold/history", "POST /api/gold/majority", "GET /api/models", "POST /api/models/train",
    "GET /api/models/jobs/{job_id}", "POST /api/models/jobs/{job_id}/cancel", "POST /api/models/default/activate",
    "POST /api/models/{version_id}/activate", "GET /api/diagnose",
    "PUT /api/items/{item_id}/control", "GET /api/datasets/{name}/controls", "PUT /api/datasets/{name}/controls",
    "GET /api/datasets/{name}/annotators", "POST /api/datasets/{name}/gold", "GET /api/releases",
    "POST /api/datasets/{name}/releases", "PUT /api/datasets/{name}/review",
}
SURROGATE_BODIES = [
    ("PUT", "/api/items/{item}/labels", b'{"incorrect_tokens": [], "status": "\\ud800"}'),
    ("POST", "/api/score", b'{"image": "iVBORw0K", "caption": "a \\udfff dog"}'),
    ("POST", "/api/items/{item}/flags", b'{"kind": "comment", "comment": "\\ud83d"}'),
    ("PUT", "/api/items/{item}/labels", b'{"\\ud800": 1}'),
]


def operations(http) -> list[tuple[str, str, dict]]:
    schema = http.get("/openapi.json").json()
    return [(method.upper(), path, spec) for path, item in schema["paths"].items() for method, spec in item.items()]


def concrete(path: str, value: str = "1") -> str:
    for name in ("item_id", "image_id", "version_id", "job_id", "name", "index"):
        path = path.replace("{" + name + "}", value)
    return path


def test_the_roles_hold_for_all_47_operations(http):
    ops = operations(http)
    assert len(ops) == 47  # a new operation: say here who may call it
    for method, path, _ in ops:
        key, url = f"{method} {path}", concrete(path)
        anonymous = http.request(method, url, headers={"X-Requested-With": "t"})
        assert anonymous.status_code == (200 if key in ANYONE else 401), key
        if key in ADMIN_ONLY:
            answer = http.request(method, url, headers={**basic(ANN), "X-Requested-With": "t"})
            assert answer.status_code == 403, key


@pytest.mark.parametrize("method, path, body", SURROGATE_BODIES)
def test_a_lone_surrogate_is_422_never_500(http, method, path, body):
    item = http.get("/api/items/next", headers=basic(ANN)).json()["item_id"]
    answer = http.request(method, path.format(item=item), content=body,
                          headers={**basic(ANN), "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert "surrogate" in answer.json()["detail"]


def test_validation_errors_do_not_echo_the_input(http):
    item = http.get("/api/items/next", headers=basic(ANN)).json()["item_id"]
    secret = "<script>alert(1)</script>" * 10
    answer = http.put(f"/api/items/{item}/labels", json={"status": secret}, headers=basic(ANN))
    assert answer.status_code == 422
    assert "script" not in answer.text and "input" not in answer.json()["detail"][0]


def hostile_values(rng: random.Random) -> list:
    return [None, True, -1, 0, 2**63, -(2**63), 1e308, "", "x" * 5000, "../../etc/passwd", "\x00", "%s%n",
            [], [None], {}, {"a": []}, [[[[[[[[[[[]]]]]]]]]]], rng.random(), "é" * 100, ["1"] * 100]


def hostile_bodies(spec: dict, schema: dict, rng: random.Random) -> list[bytes]:
    """The operation's JSON body with each field given each hostile value, and some whole bodies that are wrong."""
    bodies = [b"", b"null", b"[]", b"{", b'"x"', b"{}", b"[" * 200 + b"]" * 200]
    ref = (((spec.get("requestBody") or {}).get("content") or {}).get("application/json") or {}).get("schema") or {}
    name = (ref.get("$ref") or "").rsplit("/", 1)[-1]
    fields = schema.get("components", {}).get("schemas", {}).get(name, {}).get("properties", {})
    for field in fields:
        for value in hostile_values(rng):
            bodies.append(json.dumps({field: value}).encode())
    return bodies


@pytest.mark.slow
def test_fuzzing_every_operation_finds_no_server_error(http):
    """Every operation as an admin (the widest surface): hostile path values,
    query values and JSON bodies. Bounded: a few hundred requests."""
    rng = random.Random(0)
    schema = http.get("/openapi.json").json()
    errors = []
    for method, path, spec in operations(http):
        if path in ("/api/models/train", "/api/models/default/activate", "/api/models/{version_id}/activate"):
            bodies = [b"{", b"[]", b'{"dataset": 5}', b'{"init": "x"}']  # nothing that could start a job
        else:
            bodies = hostile_bodies(spec, schema, rng) if method != "GET" else [b""]
        for value in ("0", "-1", "99999999999999999999", "%00", "..%2F..%2Fetc", "%ED%A0%80", "x" * 300):
            answer = http.request(method, concrete(path, value), headers={**basic(ADMIN), "X-Requested-With": "t"})
            errors += [(method, path, value, answer.status_code)] if answer.status_code >= 500 else []
        params = [p["name"] for p in spec.get("parameters", []) if p["in"] == "query"]
        for name in params:
            for value in ("", "-1", "x" * 5000, "%00", "\u00e9", "1e999", "[]"):
                answer = http.request(method, concrete(path), params={name: value},
                                      headers={**basic(ADMIN), "X-Requested-With": "t"})
                errors += [(method, path, name, answer.status_code)] if answer.status_code >= 500 else []
        for body in bodies:
            answer = http.request(method, concrete(path), content=body,
                                  headers={**basic(ADMIN), "Content-Type": "application/json"})
            errors += [(method, path, body[:40], answer.status_code)] if answer.status_code >= 500 else []
    assert errors == []
