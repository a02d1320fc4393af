"""One request, one reading: the guards read a body and a caller as the app
behind them does. On a15ad8a a body in UTF-16 or after a UTF-8 byte-order mark
skipped the request guard (JSON's readers take both), so a Gradio event could
name a URL as an uploaded file; and `Basic`, `basic` or padded spellings of one
user's credentials were each a caller of their own to the per-caller cap."""
from __future__ import annotations

import base64
import json
import secrets

import httpx
import pytest

from capscope.server.callers import Caller, basic_credentials
from capscope.server.guards import InFlightCap
from capscope.server.request_bodies import as_utf8
from security_support import ANN, basic, file_data, file_inputs, gradio_config, ui_login

ENCODINGS = ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_body_in_any_encoding_is_checked_as_the_app_reads_it(team, encoding):
    client = ui_login(team, ANN)
    index, types = file_inputs(gradio_config(client))[0]
    value = file_data("http://127.0.0.1:9/x.png")
    data = [[value] if t == "file" else value if t == "image" else None for t in types]
    body = json.dumps({"data": data, "fn_index": index, "session_hash": secrets.token_hex(8)}).encode(encoding)
    for path in ("/gradio_api/run/predict", "/gradio_api/queue/join"):
        answer = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 403, (encoding, path, answer.status_code, answer.text)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_lone_surrogate_is_refused_in_any_encoding(http, encoding):
    body = '{"caption": "\\ud800", "image": ""}'.encode(encoding)
    answer = http.post("/api/score", content=body, headers={**basic(ANN), "Content-Type": "application/json"})
    assert answer.status_code == 422, (encoding, answer.text)


def test_a_body_in_another_encoding_reaches_the_app_as_utf8(http):
    """Not refused for its encoding: a REST save in UTF-16 is saved (and its text decoded once)."""
    item = http.get("/api/items/next", headers=basic(ANN)).json()["item_id"]
    body = json.dumps({"incorrect_tokens": [1], "status": "draft"}).encode("utf-16")
    answer = http.put(f"/api/items/{item}/labels", content=body,
                      headers={**basic(ANN), "Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["incorrect_tokens"] == [1]


def test_text_that_is_not_its_encoding_is_one_400():
    body, problem = as_utf8(b"\xff\xfe" + b"\x00\xd8")  # UTF-16 with a lone high surrogate
    assert problem is not None and problem[0] == 400
    assert as_utf8(b'{"a": 1}') == (b'{"a": 1}', None)
    assert as_utf8('\ufeff{"a": "\u00e9"}'.encode("utf-8")) == ('{"a": "\u00e9"}'.encode("utf-8"), None)


def spellings(name: str, password: str) -> list[str]:
    token = base64.b64encode(f"{name}:{password}".encode()).decode()
    return [f"Basic {token}", f"basic {token}", f"BASIC {token}", f"Basic  {token}"]


def test_every_spelling_of_basic_credentials_is_one_user():
    assert {basic_credentials(header) for header in [*spellings(*ANN), " Basic " + spellings(*ANN)[0][6:]]} == {ANN}
    for header in ("Bearer x", "Basic", "Basic !!!", "Basic " + base64.b64encode(b"no-colon").decode(), None):
        assert basic_credentials(header) is None


def test_the_per_caller_cap_counts_a_user_once_however_the_header_is_spelled(http):
    """Every spelling of ann's credentials signs her in, and the cap's key is her name."""
    for header in spellings(*ANN):
        answer = http.put("/api/items/1/labels", content=b"{", headers={"Authorization": header,
                                                                         "Content-Type": "application/json"})
        assert answer.status_code != 401, header
    scope = {"capscope.caller": Caller("user", ANN[0])}
    assert InFlightCap.caller(scope) == "user:ann"


def test_an_upload_is_a_multipart_form(team):
    client = ui_login(team, ANN)
    answer = client.post("/gradio_api/upload", json={"files": ["x"]})
    assert answer.status_code == 415
    assert client.post("/gradio_api/upload", files={"files": ("a.txt", b"hello")}).status_code == 200


def test_a_json_body_of_too_many_values_is_refused_before_it_is_parsed(http):
    body = b"[" + b"0," * 200_000 + b"0]"
    answer = http.post("/api/score", content=body, headers={**basic(ANN), "Content-Type": "application/json"})
    assert answer.status_code == 413, answer.text
