"""What a browser on another site can make the server do. On eb11b64, reached
by a host name, CORS echoed any Origin with credentials (preflights too), no
answer forbade framing or sniffing, and a body-less state-changing REST POST
was accepted from a cross-site form."""
from __future__ import annotations

import re

import httpx
import pytest

from security_support import ADMIN, ANN, basic

EVIL = "http://evil.example"


@pytest.mark.parametrize("path", ["/api/health", "/", "/config", "/api/items/next", "/gradio_api/info"])
def test_every_answer_forbids_framing_sniffing_and_scripts_but_the_pages_own(http, path):
    answer = http.get(path, headers=basic(ANN))
    policy = {name: value for name, _, value in (part.strip().partition(" ")
                                                 for part in answer.headers["content-security-policy"].split(";"))}
    assert policy["frame-ancestors"] == "'none'" and policy["object-src" if path == "/" else "default-src"] == "'none'"
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["x-content-type-options"] == "nosniff"
    if path == "/":  # the page: its own scripts by a nonce written into each of its script tags, nothing else
        nonce = policy["script-src"].split("'nonce-")[1].split("'")[0]
        tags = re.findall(r"<script[^>]*>", answer.text)
        assert tags and all(f'nonce="{nonce}"' in tag for tag in tags)
        assert "'unsafe-inline'" not in policy["script-src"] and policy["base-uri"] == "'none'"
        assert "<base" not in answer.text and policy["frame-src"] == "'none'"
        assert http.get(path, headers=basic(ANN)).headers["content-security-policy"] != answer.headers[
            "content-security-policy"]  # a fresh nonce each time


def test_the_rest_documentation_runs_swagger_ui_and_nothing_else(http):
    """/api/docs (docs/formats.md): FastAPI's Swagger UI page, its bundle from the CDN and the inline call
    that starts it by a nonce; any other script, and every other site but for its styles and icons, refused."""
    answer = http.get("/api/docs")
    policy = dict(part.strip().partition(" ")[::2] for part in answer.headers["content-security-policy"].split(";"))
    nonce = policy["script-src"].split("'nonce-")[1].split("'")[0]
    assert policy["script-src"] == f"'nonce-{nonce}'" and policy["default-src"] == "'none'"
    tags = re.findall(r"<script[^>]*>", answer.text)
    assert len(tags) == 2 and all(f'nonce="{nonce}"' in tag for tag in tags)
    assert policy["connect-src"] == "'self'" and policy["base-uri"] == "'none'"
    assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"


@pytest.mark.parametrize("path", ["/api/items/next", "/api/me", "/config", "/gradio_api/info"])
def test_no_origin_is_echoed(http, path):
    """Reached by a host name (as behind the Docker image's 0.0.0.0), a foreign page gets no CORS grant."""
    headers = {**basic(ANN), "Origin": EVIL, "Host": "capscope.example:7860"}
    answer = http.get(path, headers=headers)
    assert "access-control-allow-origin" not in answer.headers
    assert "access-control-allow-credentials" not in answer.headers
    preflight = http.options(path, headers={"Origin": EVIL, "Host": "capscope.example:7860",
                                            "Access-Control-Request-Method": "PUT",
                                            "Access-Control-Request-Headers": "authorization,content-type"})
    assert preflight.headers.get("access-control-allow-origin") is None


def test_a_configured_origin_is_granted(team_root):
    """`capscope serve --cors-origin URL`: that site, and only it, may call with credentials."""
    from fastapi.testclient import TestClient

    from capscope.server.api import create_app

    app = create_app(f"sqlite:///{team_root / 'cors.db'}", cors_origins=("https://labels.example",))
    with TestClient(app) as client:
        granted = client.options("/api/me", headers={"Origin": "https://labels.example",
                                                     "Access-Control-Request-Method": "GET"})
        assert granted.headers["access-control-allow-origin"] == "https://labels.example"
        assert granted.headers["access-control-allow-credentials"] == "true"
        refused = client.options("/api/me", headers={"Origin": EVIL, "Access-Control-Request-Method": "GET"})
        assert "access-control-allow-origin" not in refused.headers


def item_of(http, user) -> int:
    answer = http.get("/api/items/next", headers=basic(user))
    assert answer.status_code == 200
    return answer.json()["item_id"]


def test_cross_site_forms_change_nothing(http):
    """A form on another site posting with the browser's cached Basic credentials."""
    item = item_of(http, ANN)
    form = {**basic(ANN), "Content-Type": "application/x-www-form-urlencoded"}
    for headers in ({**form, "Origin": EVIL}, {**form, "Origin": "null"}, {**form, "Sec-Fetch-Site": "cross-site"},
                    form):  # the last: no Origin at all, still not JSON
        answer = http.post(f"/api/items/{item}/undo", content=b"a=1", headers=headers)
        assert answer.status_code in (403, 415), (headers, answer.status_code)
    admin = {**basic(ADMIN), "Origin": EVIL, "Content-Type": "application/json"}
    assert http.post("/api/gold/majority", headers=admin).status_code == 403
    assert http.post("/login", data={"username": ANN[0], "password": ANN[1]},
                     headers={"Origin": EVIL}).status_code == 403  # no login forced on a victim's browser


def test_same_site_and_scripts_still_work(http):
    item = item_of(http, ANN)
    same_site = {**basic(ANN), "Origin": str(http.base_url).rstrip("/")}
    assert http.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [0]}, headers=same_site).status_code == 200
    marked = {**basic(ANN), "X-Requested-With": "capscope"}  # a script's body-less POST
    assert http.post(f"/api/items/{item}/undo", headers=marked).status_code == 200
    assert http.post(f"/api/items/{item}/undo", headers=basic(ANN)).status_code == 415


def test_gradio_fetches_no_url(http):
    client = httpx.Client(base_url=str(http.base_url), timeout=30)
    client.post("/login", data={"username": ANN[0], "password": ANN[1]})
    for url in ("http://127.0.0.1:9/secret", "https://example.com/x.png", "//example.com/x.png"):
        assert client.get(f"/gradio_api/file={url}").status_code == 403
