"""Model suggestions through REST (`GET /api/items/{id}?suggestions=true`), the same ones Annotate
shows (app/server/suggestions.py): before, they existed only in the web UI."""
from fastapi.testclient import TestClient

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation.importer.predictions import import_prediction_rows
from capscope.annotation.users import add_user
from capscope.db import Store

ANN = ("ann", "ann-password-1")


def test_an_item_with_stored_predictions_comes_with_the_models_suggestions(tmp_path):
    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path, n_images=1, n_captions=1, annotators_per_item=1)
    add_user(store, *ANN)
    from capscope.server.api import create_app

    client = TestClient(create_app(store=store, scorer_factory=lambda metrics: None), raise_server_exceptions=False)
    item = client.get("/api/items/next", auth=ANN).json()
    assert "suggestions" not in client.get(f"/api/items/{item['item_id']}", auth=ANN).json()
    semantic = [i for i, t in enumerate(item["tokens"]) if t["semantic"]]
    scores = [0.5 if t["semantic"] else None for t in item["tokens"]]
    scores[semantic[0]] = 0.001  # far under any cut: the one word the model calls wrong
    row = {"id": item["id"], "caption": item["caption"], "tokens": item["tokens"], "error": None,
           "regions": [{"box": r["box"]} for r in item["regions"]], "model": {"demo": True},
           "metrics": {"infometic": {"scores": {"overall": 1.0}, "token_scores": scores,
                                     "region_scores": [0.9, 0.001]}}}
    assert not import_prediction_rows(store, enumerate([row], 1), item["dataset"]).errors
    answer = client.get(f"/api/items/{item['item_id']}?suggestions=true", auth=ANN)
    assert answer.status_code == 200, answer.text
    suggestions = answer.json()["suggestions"]
    assert suggestions["incorrect_tokens"] == [semantic[0]] and suggestions["mentioned_regions"] == [0]
    assert suggestions["metric"] == "infometic"
