"""Every kind of bad input gets a 4xx with a JSON `detail`, never a 5xx, and
nothing already saved is lost."""
import base64
import io

import pytest

from test_api_basic import ADMIN, ANN, BOB, api, png_base64  # noqa: F401  (fixture)


def _png_bytes() -> bytes:
    return base64.b64decode(png_base64())


def _gif_base64() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("P", (8, 8)).save(buffer, format="GIF")
    return base64.b64encode(buffer.getvalue()).decode()


def score_cases():
    ok = {"image": png_base64(), "caption": "a box"}
    return [
        ("not base64", {**ok, "image": "%%%not base64%%%"}, 422),
        ("not an image", {**ok, "image": base64.b64encode(b"hello world").decode()}, 422),
        ("truncated png", {**ok, "image": base64.b64encode(_png_bytes()[:40]).decode()}, 422),
        ("gif", {**ok, "image": _gif_base64()}, 422),
        ("empty caption", {**ok, "caption": "  "}, 422),
        ("100k caption", {**ok, "caption": "word " * 20_000}, 422),
        ("unknown metric", {**ok, "metrics": ["bleu-9000"]}, 422),
        ("empty metric list", {**ok, "metrics": []}, 422),
        ("too many references", {**ok, "references": ["r"] * 51}, 422),
        ("caption not a string", {**ok, "caption": 5}, 422),
        ("missing image", {"caption": "a box"}, 422),
    ]


@pytest.mark.parametrize("name,body,status", score_cases(), ids=[c[0] for c in score_cases()])
def test_bad_score_requests(api, name, body, status):
    response = api.post("/api/score", json=body, auth=ANN)
    assert response.status_code == status, (name, response.text)
    assert "detail" in response.json()


def test_oversize_bodies_and_images(api, monkeypatch):
    import capscope.server.api as server
    from capscope.common import limits

    huge = b'{"image": "' + b"A" * (server.MAX_SCORE_BODY_BYTES + 10) + b'", "caption": "x"}'
    response = api.post("/api/score", content=huge, headers={"content-type": "application/json"}, auth=ANN)
    assert response.status_code == 413 and "detail" in response.json()

    def chunks():  # no Content-Length: the limit is counted while reading
        for _ in range(40):
            yield b"0" * 50_000

    response = api.put("/api/items/1/labels", content=chunks(), headers={"content-type": "application/json"},
                       auth=ANN)
    assert response.status_code == 413
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 100)
    response = api.post("/api/score", json={"image": png_base64(), "caption": "x"}, auth=ANN)
    assert response.status_code == 413 and "pixels" in response.json()["detail"]


def label_cases():
    return [
        ("index out of range", {"incorrect_tokens": [999]}, 422),
        ("negative index", {"incorrect_tokens": [-1]}, 422),
        ("region out of range", {"mentioned_regions": [2]}, 422),
        ("huge index", {"incorrect_tokens": [2**70]}, 422),
        ("float index", {"incorrect_tokens": [1.5]}, 422),
        ("string index", {"incorrect_tokens": ["1"]}, 422),
        ("bool index", {"incorrect_tokens": [True]}, 422),
        ("bad status", {"status": "finished"}, 422),
        ("not a list", {"incorrect_tokens": 3}, 422),
        ("too many indices", {"incorrect_tokens": list(range(10_001))}, 422),
    ]


@pytest.mark.parametrize("name,body,status", label_cases(), ids=[c[0] for c in label_cases()])
def test_bad_label_requests_keep_saved_labels(api, name, body, status):
    item = api.get("/api/items/next", auth=ANN).json()["item_id"]
    saved = api.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [1]}, auth=ANN).json()
    response = api.put(f"/api/items/{item}/labels", json=body, auth=ANN)
    assert response.status_code == status, (name, response.text)
    assert "detail" in response.json()
    assert api.get(f"/api/items/{item}", auth=ANN).json()["labels"] == saved


@pytest.mark.parametrize("name,raw", [("malformed json", b'{"incorrect_tokens": [1,'),
                                      ("not utf-8", b'{"status": "dr\xff\xfeft"}'),
                                      ("not an object", b"[1, 2, 3]"),
                                      ("empty", b"")])
def test_malformed_bodies(api, name, raw):
    item = api.get("/api/items/next", auth=ANN).json()["item_id"]
    response = api.put(f"/api/items/{item}/labels", content=raw, headers={"content-type": "application/json"},
                       auth=ANN)
    assert 400 <= response.status_code < 500, (name, response.text)
    assert "detail" in response.json()


@pytest.mark.parametrize("method,url,body,who,status", [
    ("put", "/api/items/999/labels", {}, ANN, 404),
    ("put", "/api/items/0/labels", {}, ANN, 422),
    ("put", "/api/items/-3/labels", {}, ANN, 422),
    ("put", "/api/items/abc/labels", {}, ANN, 422),
    ("put", f"/api/items/{2**80}/labels", {}, ANN, 422),
    ("get", "/api/items/999", None, ADMIN, 404),
    ("get", "/api/images/999", None, ANN, 404),
    ("post", "/api/items/1/flags", {"kind": "nonsense"}, ADMIN, 422),
    ("post", "/api/items/1/flags", {"kind": "comment", "comment": "x" * 6000}, ADMIN, 422),
    ("put", "/api/items/1/gold", {"token_labels": ["maybe"], "region_labels": []}, ADMIN, 422),
    ("put", "/api/items/1/gold", {"token_labels": [], "region_labels": []}, ADMIN, 422),
    ("get", "/api/export?format=xml", None, ADMIN, 422),
    ("get", "/api/items?sort=random", None, ADMIN, 422),
    ("get", "/api/items?page=0", None, ADMIN, 422),
    ("get", "/api/items/1/history", None, BOB, 404),
])
def test_other_bad_requests(api, method, url, body, who, status):
    response = api.request(method, url, json=body, auth=who)
    assert response.status_code == status, response.text
    assert "detail" in response.json()


def test_server_stays_up_after_everything(api):
    for _, body, _ in score_cases():
        assert api.post("/api/score", json=body, auth=ANN).status_code < 500
    assert api.get("/api/health").status_code == 200
    assert api.post("/api/score", json={"image": png_base64(), "caption": "fine"}, auth=ANN).status_code == 200
