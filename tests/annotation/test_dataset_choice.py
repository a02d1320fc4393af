"""Annotate's dataset picker through the REST API (issue 71): without a choice the demo world's
items come last; a remembered choice decides what GET /api/items/next hands out."""
from fastapi.testclient import TestClient

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation.importer import ImportOptions, import_captions
from capscope.annotation.users import add_user
from capscope.db import Store

ANN = ("ann", "ann-password-1")


def test_the_demo_comes_last_and_a_chosen_dataset_is_remembered(tmp_path):
    from annotation_support import caption_rows, make_images, write_jsonl
    from capscope.server.api import create_app

    store = Store(sqlite_url(tmp_path))
    names = make_images(tmp_path / "demo-images", 2)
    import_captions(store, write_jsonl(tmp_path / "demo.jsonl", caption_rows(names, 3)), tmp_path / "demo-images",
                    ImportOptions(dataset="demo", annotators_per_item=1, regions="none", progress=False))
    import_small_dataset(store, tmp_path / "photos", n_images=2, n_captions=2, annotators_per_item=1)
    add_user(store, *ANN)
    client = TestClient(create_app(store=store, scorer_factory=lambda: None), raise_server_exceptions=False)
    first = client.get("/api/items/next", auth=ANN).json()
    assert first["dataset"] == "default"  # imported photos before the demo world, though imported later
    client.put(f"/api/items/{first['item_id']}/labels", json={"status": "submitted"}, auth=ANN)
    assert client.get("/api/me", auth=ANN).json()["dataset"] is None
    assert client.put("/api/me/dataset", json={"dataset": "nope"}, auth=ANN).status_code == 404
    assert client.put("/api/me/dataset", json={"dataset": "demo"}, auth=ANN).json() == {"dataset": "demo"}
    assert client.get("/api/me", auth=ANN).json()["dataset"] == "demo"
    item = client.get("/api/items/next", auth=ANN).json()
    assert item["dataset"] == "demo"  # the remembered choice
    client.put(f"/api/items/{item['item_id']}/labels", json={"status": "submitted"}, auth=ANN)
    assert client.get("/api/items/next", params={"dataset": "default"}, auth=ANN).json()["dataset"] == "default"
    client.put("/api/me/dataset", json={"dataset": None}, auth=ANN)
    assert client.get("/api/items/next", auth=ANN).json()["dataset"] == "default"


def test_the_annotate_picker_lists_the_demo_last_and_remembers(tmp_path):
    from capscope.ui.annotate_handlers import ALL_DATASETS, AnnotateHandlers
    from capscope.ui.annotator import Annotator

    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path / "photos", n_images=2, n_captions=2, annotators_per_item=1)
    from annotation_support import caption_rows, make_images, write_jsonl

    names = make_images(tmp_path / "demo-images", 2)
    import_captions(store, write_jsonl(tmp_path / "demo.jsonl", caption_rows(names, 2)), tmp_path / "demo-images",
                    ImportOptions(dataset="demo", annotators_per_item=1, regions="none", progress=False))
    add_user(store, *ANN)
    handlers = AnnotateHandlers(Annotator(store, clicks=None))

    class Request:
        username = "ann"

    shown = handlers.datasets(Request())
    assert shown["choices"] == [ALL_DATASETS, "default", "demo"] and shown["value"] == ALL_DATASETS
    outputs = handlers.choose_dataset(None, False, "demo", Request())
    assert "dataset demo" in outputs[1]
    assert handlers.datasets(Request())["value"] == "demo"
