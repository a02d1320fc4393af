"""REST API (docs/formats.md §8): auth and roles, the item / labels / export calls,
and the shape of /api/score."""
import base64
import io
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation.users import add_user
from capscope.db import Store, User

ANN, BOB, ADMIN = ("ann", "ann-password-1"), ("bob", "bob-password-1"), ("boss", "boss-password-1")


class FakeScorer:
    """Stands in for capscope.metrics.scorer.Scorer in the API-shape tests only:
    the real engine needs model weights this test must not download or build.
    The real scorer is tested with the engine; here we test what the API does
    around it (decoding, validation, passing the arguments, returning the row)."""

    unavailable: dict = {}  # the rest of capscope.server.scoring.ServedScorer
    demo, beta, nlp = True, 0.1, None

    def __init__(self, metrics):
        self.metrics = {m: None for m in metrics}
        self.calls = []

    def score(self, image, caption, references=None, regions=None, tokens=None, only=None):
        self.calls.append((image.size, caption, references, only))
        if caption == "raise":
            raise ValueError("the engine refused this caption")
        return {"id": "0", "image": None, "caption": caption,
                "tokens": [{"text": w, "start": 0, "end": len(w), "semantic": True} for w in caption.split()],
                "regions": [], "metrics": {m: {"scores": {}} for m in only or self.metrics},
                "model": {"clip": "fake", "regions": "none", "text": "fake", "demo": True}, "error": None}


@pytest.fixture()
def api(tmp_path):
    from capscope.server.api import create_app

    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path, n_images=2, n_captions=3, annotators_per_item=1)
    add_user(store, *ANN)
    add_user(store, *BOB)
    add_user(store, *ADMIN, role="admin")
    scorers = []

    def factory(metrics):
        scorers.append(FakeScorer(metrics))
        return scorers[-1]

    client = TestClient(create_app(store=store, scorer_factory=factory), raise_server_exceptions=False)
    client.scorers = scorers
    client.store = store
    return client


def png_base64(size=(32, 24)) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_health_and_openapi_need_no_credentials(api):
    assert api.get("/api/health").json()["status"] == "ok"
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/api/score", "/api/items/next", "/api/items/{item_id}/labels", "/api/export"} <= set(paths)


@pytest.mark.parametrize("method,url", [("get", "/api/items/next"), ("get", "/api/export"),
                                        ("post", "/api/score"), ("put", "/api/items/1/labels"),
                                        ("get", "/api/progress")])
def test_no_credentials_is_401(api, method, url):
    response = api.request(method, url)
    assert response.status_code == 401 and "detail" in response.json()
    assert response.headers["www-authenticate"].startswith("Basic")
    assert api.request(method, url, auth=("ann", "wrong")).status_code == 401
    for raw in (b"Basic \xff\xfe", b"Basic " + base64.b64encode(b"\xff\xfe:\xfd"), b"Basic ###"):
        assert api.request(method, url, headers={"Authorization": raw}).status_code == 401


@pytest.mark.parametrize("url", ["/api/export", "/api/items", "/api/agreement", "/api/items/1/gold",
                                 "/api/items/1/gold/history"])
def test_annotator_on_admin_calls_is_403(api, url):
    assert api.get(url, auth=ANN).status_code == 403


def test_passwords_are_hashed(api):
    with api.store.read() as session:
        stored = session.scalars(select(User.password_hash)).all()
    assert all(h.startswith("$argon2id$") and ANN[1] not in h and ADMIN[1] not in h for h in stored)
    assert len(set(stored)) == 3  # salted


def test_label_an_item_then_nothing_left(api):
    item = api.get("/api/items/next", auth=ANN).json()
    assert set(item) >= {"item_id", "image_url", "caption", "tokens", "regions"}
    assert api.get(item["image_url"], auth=ANN).headers["content-type"] == "image/png"
    assert api.get(item["image_url"], auth=BOB).status_code == 403  # not bob's item
    body = {"incorrect_tokens": [1, 3], "mentioned_regions": [0], "status": "submitted"}
    url = f"/api/items/{item['item_id']}/labels"
    first, second = api.put(url, json=body, auth=ANN), api.put(url, json=body, auth=ANN)
    assert first.status_code == second.status_code == 200 and first.json() == second.json()
    assert len(api.get(f"/api/items/{item['item_id']}/history", auth=ANN).json()) == 2
    assert api.put(url, json=body, auth=BOB).status_code == 403
    taken = [api.get("/api/items/next", auth=ANN).json()["item_id"] for _ in range(1)]
    api.put(f"/api/items/{taken[0]}/labels", json={"status": "submitted"}, auth=ANN)
    third = api.get("/api/items/next", auth=BOB).json()["item_id"]
    api.put(f"/api/items/{third}/labels", json={"status": "submitted"}, auth=BOB)
    assert api.get("/api/items/next", auth=ANN).status_code == 204
    back = api.get(f"/api/items/previous?before={taken[0]}", auth=ANN)
    assert back.status_code == 200 and back.json()["item_id"] == item["item_id"]
    assert api.get(f"/api/items/previous?before={item['item_id']}", auth=ANN).status_code == 204
    assert api.get("/api/items/previous?before=0", auth=ANN).status_code == 422


def test_undo_progress_and_flags(api):
    item = api.get("/api/items/next", auth=ANN).json()["item_id"]
    api.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [0]}, auth=ANN)
    api.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [0, 2]}, auth=ANN)
    assert api.post(f"/api/items/{item}/undo", auth=ANN, headers={"X-Requested-With": "test"}).json()["incorrect_tokens"] == [0]
    assert api.post(f"/api/items/{item}/flags", json={"kind": "bad_image"}, auth=ANN).status_code == 200
    progress = api.get("/api/progress", auth=ANN).json()
    assert progress["me"]["in_progress"] == 1 and progress["everyone"]["items"] == 3
    listing = api.get("/api/items?status=flagged", auth=ADMIN).json()
    assert listing["total"] == 1 and listing["items"][0]["item_id"] == item


def test_export_is_streamed_captokeneval(api):
    item = api.get("/api/items/next", auth=ANN).json()["item_id"]
    api.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [1], "status": "submitted"}, auth=ANN)
    response = api.get("/api/export?format=captokeneval", auth=ADMIN)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    assert "attachment" in response.headers["content-disposition"]
    rows = [json.loads(line) for line in response.text.splitlines()]
    assert len(rows) == 3
    labelled = next(r for r in rows if r["tokens"][0].get("votes"))
    assert labelled["tokens"][1] == {**labelled["tokens"][1], "label": "incorrect",
                                     "votes": {"incorrect": 1, "total": 1}}
    assert api.get("/api/export?format=csv", auth=ADMIN).text.startswith("dataset,item_id")
    json.loads(api.get("/api/export?format=coco", auth=ADMIN).text)
    assert api.get("/api/agreement", auth=ADMIN).status_code == 200
    bundle = api.get("/api/export?format=captokeneval&images=true", auth=ADMIN)
    assert bundle.status_code == 200 and bundle.headers["content-type"] == "application/zip"
    import zipfile

    with zipfile.ZipFile(io.BytesIO(bundle.content)) as archive:
        names = set(archive.namelist())
        rows = [json.loads(line) for line in archive.read("capscope-all/captokeneval.jsonl").splitlines()]
    assert len(rows) == 3 and all(f"capscope-all/{row['image']}" in names for row in rows)
    assert api.get("/api/export?format=csv&images=true", auth=ADMIN).status_code == 422


def test_adjudication_history(api):
    item = api.get("/api/items/1", auth=ADMIN).json()
    n_tokens, n_regions = len(item["tokens"]), len(item["regions"])
    assert api.get("/api/items/1/gold/history", auth=ADMIN).json() == []
    for label in ("incorrect", "correct"):
        body = {"token_labels": [label] * n_tokens, "region_labels": [None] * n_regions}
        assert api.put("/api/items/1/gold", json=body, auth=ADMIN).status_code == 200
    history = api.get("/api/items/1/gold/history", auth=ADMIN).json()
    assert [(h["revision"], h["adjudicator"], h["token_labels"][0]) for h in history] == [
        (1, "boss", "incorrect"), (2, "boss", "correct")]


def test_score_shape_with_an_injected_scorer(api):
    body = {"image": png_base64(), "caption": "a green box", "references": ["a box"], "metrics": ["clip-s"]}
    response = api.post("/api/score", json=body, auth=ANN)
    assert response.status_code == 200, response.text
    row = response.json()
    assert set(row) >= {"tokens", "regions", "metrics", "model", "error"} and "clip-s" in row["metrics"]
    assert api.scorers[0].calls == [((32, 24), "a green box", ["a box"], ["clip-s"])]
    data_url = {"image": "data:image/png;base64," + png_base64(), "caption": "x"}
    response = api.post("/api/score", json=data_url, auth=ANN)
    assert response.status_code == 200 and list(response.json()["metrics"]) == ["infometic"]  # the default
    assert len(api.scorers) == 1  # one scorer per server, whatever the metric set
    assert api.post("/api/score", json={**data_url, "caption": "raise"}, auth=ANN).status_code == 422
