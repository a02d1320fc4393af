"""Model versions on a server (app/server/training.py, annotation/model_versions.py):
fine-tuning through the API records a version with its figures and parent;
its checkpoint loads through the Scorer; cancelled and failed jobs leave
nothing behind; activation swaps the scorer under concurrent scoring without
losing a request, survives a restart, and re-scores the queued items under the
version's tag; admin only.

The model is the bundled demo model (real weights, a few MB); fine-tuning runs
a handful of steps on a few demo-world scenes imported into SQLite."""
import base64
import io
import json
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from sqlalchemy import select

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation import model_versions as mv
from capscope.annotation.users import add_user
from capscope.db import Prediction, Store

ADMIN, ANN = ("boss", "boss-password-1"), ("ann", "ann-password-1")
DATASET = "world"
SCRIPT = {"X-Requested-With": "capscope-tests"}  # a body-less POST says it comes from a script, not a form


def factory(metrics, infometic_checkpoint=None):
    """The server's own default factory, InfoMetIC only (the other metrics' weights are not here)."""
    from capscope.server.scoring import default_factory

    return default_factory(["infometic"], infometic_checkpoint=infometic_checkpoint)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store with a labelled demo-world dataset, a dataset without labels, two users."""
    from capscope.annotation.importer import ImportOptions, import_captokeneval
    from capscope.demo.dataset import write_demo_data

    root = tmp_path_factory.mktemp("model-versions")
    patch = pytest.MonkeyPatch()
    patch.setenv("CAPSCOPE_CACHE", str(root / "cache"))  # no released checkpoint: the demo model is the default
    patch.delenv("CAPSCOPE_INFOMETIC_CHECKPOINT", raising=False)
    patch.delenv("CAPSCOPE_NO_DEMO", raising=False)
    patch.delenv("CAPSCOPE_DEMO_MODEL", raising=False)
    write_demo_data(root / "demo", 4, seed=3, progress=False)
    url = sqlite_url(root)
    store = Store(url)
    import_captokeneval(store, root / "demo" / "captokeneval.jsonl",
                        ImportOptions(dataset=DATASET, annotators_per_item=2, regions="none", progress=False))
    import_small_dataset(store, root / "plain", n_images=1, n_captions=2, annotators_per_item=1)  # "default"
    add_user(store, *ADMIN, role="admin")
    add_user(store, *ANN)
    yield {"root": root, "url": url, "store": store, "models": root / "models"}
    patch.undo()


def serve(world) -> TestClient:
    from capscope.server.api import create_app

    return TestClient(create_app(store=Store(world["url"]), scorer_factory=factory, models_dir=world["models"]),
                      raise_server_exceptions=False)


def train(client, **body) -> dict:
    response = client.post("/api/models/train", json={"dataset": DATASET, "init": "demo", "steps": 5, **body},
                           auth=ADMIN)
    assert response.status_code == 202, response.text
    job = response.json()["job"]
    assert job["status"] == "running"
    return client.app.state.training.wait(job["id"], timeout=300)


def versions(world) -> list:
    from types import SimpleNamespace

    from capscope.annotation.model_versions import list_versions

    return [SimpleNamespace(**v) for v in list_versions(world["store"])]


def checkpoint_files(world) -> list:
    folder = world["models"]
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def demo_sha() -> str:
    from capscope.common.checksums import file_sha256
    from capscope.metrics.loading import demo_model_path

    return file_sha256(demo_model_path())


@pytest.fixture(scope="module")
def trained(world):
    """One fine-tuned version, trained through the API (not active)."""
    client = serve(world)
    job = train(client, check_dataset=DATASET, augment=True)  # checked on its own labels: any will do
    assert job["status"] == "done", job
    return client.get(f"/api/models/jobs/{job['id']}", auth=ADMIN).json()["job"]


def png_base64() -> str:
    image = Image.new("RGB", (64, 48), (200, 40, 40))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def row_shas(row: dict) -> set:
    return {entry["sha256"] for entry in row["model"]["checkpoints"].values()}


# ---------------------------------------------------------------- training

@pytest.mark.slow
def test_training_through_the_api_records_a_version(world, trained):
    client = serve(world)
    listing = client.get("/api/models", auth=ADMIN).json()
    assert listing["active"] is None
    (version,) = [v for v in listing["versions"] if v["id"] == trained["version_id"]]
    assert version["parent_sha256"] == demo_sha() and version["parent_id"] is None
    assert version["dataset"] == DATASET and version["active"] is False
    assert version["labels"]["dataset"] == DATASET and version["labels"]["train"]["items"] > 0
    for side in ("before", "after"):
        assert {"incorrect_token_f1", "incorrect_token_auroc", "text_accuracy"} <= set(version["figures"][side])
    assert version["figures"]["training"]["steps"] == 5 and version["figures"]["training"]["augment"]
    check = version["figures"]["check"]
    assert check["dataset"] == DATASET and check["before"]["n_items"] == check["after"]["n_items"] == 8
    assert trained["check_dataset"] == DATASET
    assert "path" not in version and version["file"].endswith(".pt")
    assert trained["fraction"] == 1.0 and trained["step"] == 5 and trained["loss"] is not None
    started = client.get("/api/audit", params={"action": "training started"}, auth=ADMIN).json()["events"]
    assert started and started[-1]["target"] == DATASET and started[-1]["actor"] == ADMIN[0]


@pytest.mark.slow
def test_the_checkpoint_loads_through_the_scorer(world, trained):
    from capscope.common.checksums import file_sha256
    from capscope.metrics.scorer import Scorer

    (row,) = [v for v in versions(world) if v.id == trained["version_id"]]
    assert Path(row.path).parent == world["models"].resolve() and file_sha256(row.path) == row.sha256
    scorer = Scorer(["infometic"], regions="given", infometic_checkpoint=row.path)
    result = scorer.score(Image.new("RGB", (64, 64), (10, 120, 200)), "a blue square",
                          regions=[{"box": [0, 0, 32, 32]}])
    assert result["metrics"]["infometic"]["scores"] and row_shas(result) == {row.sha256}


@pytest.mark.slow
def test_a_cancelled_job_leaves_nothing(world, trained):
    client = serve(world)
    before, files = [v.id for v in versions(world)], checkpoint_files(world)
    response = client.post("/api/models/train", json={"dataset": DATASET, "init": "demo", "steps": 100000},
                           auth=ADMIN)
    job_id = response.json()["job"]["id"]
    assert client.post(f"/api/models/jobs/{job_id}/cancel", auth=ADMIN, headers=SCRIPT).status_code == 200
    job = client.app.state.training.wait(job_id, timeout=300)
    assert job["status"] == "cancelled" and job["version_id"] is None
    assert [v.id for v in versions(world)] == before and checkpoint_files(world) == files
    assert client.get("/api/models", auth=ADMIN).json()["job"]["status"] == "cancelled"


@pytest.mark.slow
def test_a_failing_job_leaves_nothing_and_keeps_the_active_version(world, trained, monkeypatch):
    import capscope.train.finetune as finetune_module

    client = serve(world)
    assert client.post(f"/api/models/{trained['version_id']}/activate", json={"rescore": False},
                       auth=ADMIN).status_code == 200
    before, files = [v.id for v in versions(world)], checkpoint_files(world)

    def broken(config, evaluate_gold=None, fit_word_scale=None):
        Path(config.out).write_bytes(b"half a checkpoint")  # written, then the run fails
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(finetune_module, "finetune", broken)
    job = train(client)
    assert job["status"] == "failed" and "the disk is full" in job["error"]
    assert [v.id for v in versions(world)] == before and checkpoint_files(world) == files
    assert client.get("/api/models", auth=ADMIN).json()["active"] == trained["version_id"]
    from capscope.annotation.model_versions import activate_version

    activate_version(world["store"], None)  # back to the default model for the other tests


def test_one_job_at_a_time(world, monkeypatch):
    import capscope.train.finetune as finetune_module

    client = serve(world)
    release = threading.Event()

    def slow(config, evaluate_gold=None, fit_word_scale=None):
        while not release.is_set():
            if config.should_stop():
                raise finetune_module.Cancelled()
            time.sleep(0.01)
        raise RuntimeError("stopped by the test")

    monkeypatch.setattr(finetune_module, "finetune", slow)
    first = client.post("/api/models/train", json={"dataset": DATASET, "steps": 5}, auth=ADMIN)
    assert first.status_code == 202
    second = client.post("/api/models/train", json={"dataset": DATASET, "steps": 5}, auth=ADMIN)
    assert second.status_code == 409 and "still running" in second.json()["detail"]
    release.set()
    assert client.app.state.training.wait(first.json()["job"]["id"], 60)["status"] == "failed"


def test_the_panel_and_the_api_pass_holdout_and_augment_to_the_fine_tuning(world, monkeypatch):
    import capscope.train.finetune as finetune_module
    from capscope.ui.admin import start_training

    client = serve(world)
    seen = []

    def record(config, evaluate_gold=None, fit_word_scale=None):
        seen.append((config.holdout, config.augment))
        raise RuntimeError("recorded")

    monkeypatch.setattr(finetune_module, "finetune", record)
    training = client.app.state.training
    assert f"on **{DATASET}**" in start_training(training, DATASET, None, 5, None, 0, True)
    training.wait(training.last()["id"], 60)
    assert training.last()["holdout"] == 0 and training.last()["augment"] is True
    response = client.post("/api/models/train", json={"dataset": DATASET, "steps": 5, "holdout": 0.5}, auth=ADMIN)
    assert response.status_code == 202 and response.json()["job"]["augment"] is False
    training.wait(response.json()["job"]["id"], 60)
    assert client.post("/api/models/train", json={"dataset": DATASET, "augment": "yes"}, auth=ADMIN).status_code == 422
    assert seen == [(0.0, True), (0.5, False)]


# ---------------------------------------------------------------- activation

@pytest.mark.slow
def test_activation_under_concurrent_scoring_loses_no_request(world, trained):
    client = serve(world)
    new_sha = next(v.sha256 for v in versions(world) if v.id == trained["version_id"])
    body = {"image": png_base64(), "caption": "a red circle", "metrics": ["infometic"]}
    assert row_shas(client.post("/api/score", json=body, auth=ANN).json()) == {demo_sha()}  # built: the default
    results, stop = [], threading.Event()

    def hammer():
        while not stop.is_set():
            response = client.post("/api/score", json=body, auth=ANN)
            results.append((response.status_code, row_shas(response.json()) if response.status_code == 200 else None))

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    activated = client.post(f"/api/models/{trained['version_id']}/activate", json={"rescore": False}, auth=ADMIN)
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert activated.status_code == 200 and activated.json()["active"] == trained["version_id"]
    assert results and all(status == 200 for status, _ in results)
    assert {sha for _, shas in results for sha in shas} <= {demo_sha(), new_sha}
    assert results[-1][1] == {new_sha}
    assert row_shas(client.post("/api/score", json=body, auth=ANN).json()) == {new_sha}


@pytest.mark.slow
def test_activation_survives_a_restart_and_rescores_the_queue(world, trained):
    from capscope.annotation.model_versions import activate_version, queued_items
    from capscope.metrics.images import read_image
    from capscope.annotation.queue import queue_view, set_queue_order

    store = world["store"]
    activate_version(store, None)
    set_queue_order(store, DATASET, "uncertainty", token_rule="relative")
    client = serve(world)
    response = client.post(f"/api/models/{trained['version_id']}/activate", auth=ADMIN, headers=SCRIPT)
    assert response.status_code == 200, response.text
    tag = response.json()["model_version"]
    assert tag.startswith(f"v{trained['version_id']}:") and response.json()["rescoring"]["dataset"] == DATASET
    status = client.app.state.activations.wait_rescore(120)
    assert status["state"] == "done" and status["scored"] == status["total"] > 0, status
    with store.read() as session:
        tags = set(session.scalars(select(Prediction.model_version)))
        mine = [(p.metric, bool(p.token_scores), p.uncertainty is not None)
                for p in session.scalars(select(Prediction).where(Prediction.model_version == tag))]
    assert tags == {tag} and len(mine) == status["scored"]
    assert set(mine) == {("infometic", True, True)}
    assert queue_view(store, DATASET)["ranked"] == status["scored"]
    # scored in pages, as one pair alone would be
    first = queued_items(store, DATASET, 1)[0]
    alone = client.app.state.models.score(read_image(first["image"]), first["caption"], first["references"],
                                          regions=first["regions"], tokens=first["tokens"], metrics=["infometic"])
    with store.read() as session:
        paged = session.scalars(select(Prediction.token_scores).where(Prediction.model_version == tag,
                                                                      Prediction.caption_id == first["caption_id"])).one()
    assert paged == pytest.approx(alone["metrics"]["infometic"]["token_scores"], abs=1e-5)
    # the annotator's item view shows the version's predictions
    item = client.get("/api/items/next", params={"dataset": DATASET, "predictions": True}, auth=ANN).json()
    assert [p["model_version"] for p in item["predictions"]] == [tag]

    restarted = serve(world)  # a new process on the same database
    assert restarted.get("/api/models", auth=ADMIN).json()["active"] == trained["version_id"]
    body = {"image": png_base64(), "caption": "a red circle", "metrics": ["infometic"]}
    new_sha = next(v.sha256 for v in versions(world) if v.id == trained["version_id"])
    assert row_shas(restarted.post("/api/score", json=body, auth=ANN).json()) == {new_sha}
    assert restarted.app.state.models.version == tag
    activate_version(store, None)
    set_queue_order(store, DATASET, "sequential", token_rule="relative")


@pytest.mark.slow
def test_going_back_to_the_default_model(world, trained):
    """After a version, the default model again: scored with, kept across a
    restart, and its predictions of the queue stored and shown as its own."""
    import capscope.ui.annotate_drawing as annotate_drawing
    from sqlalchemy import delete

    from capscope.annotation.model_versions import DEFAULT_TAG, activate_version
    from capscope.server import suggestions
    from capscope.server.scoring import Models
    from capscope.annotation.users import get_user

    store = world["store"]
    client = serve(world)
    body = {"image": png_base64(), "caption": "a red circle", "metrics": ["infometic"]}
    assert client.post(f"/api/models/{trained['version_id']}/activate", json={"rescore": False},
                       auth=ADMIN).status_code == 200
    try:
        response = client.post("/api/models/default/activate", auth=ADMIN, headers=SCRIPT)
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["active"] is None and result["model_version"] == DEFAULT_TAG
        assert result["rescoring"]["dataset"] == DATASET  # the replaced version's dataset
        status = client.app.state.activations.wait_rescore(120)
        assert status["state"] == "done" and status["scored"] == status["total"] > 0, status
        assert row_shas(client.post("/api/score", json=body, auth=ANN).json()) == {demo_sha()}
        assert client.get("/api/models", auth=ADMIN).json()["active"] is None
        with store.read() as session:
            stored = session.scalars(select(Prediction).where(Prediction.model_version == DEFAULT_TAG)).all()
            assert len(stored) == status["scored"] and all(p.uncertainty is not None for p in stored)
            caption_id = stored[0].caption_id
        restarted = serve(world)
        assert row_shas(restarted.post("/api/score", json=body, auth=ANN).json()) == {demo_sha()}
        assert restarted.app.state.models.version is None
        suggestion = suggestions.Suggestions(store, Models()).stored(
            get_user(store, ADMIN[0]), {"item_id": caption_id, "tokens": [], "regions": []})
        assert suggestion[3] == DEFAULT_TAG
        assert annotate_drawing.suggestion_source(suggestion[3]) == "the server's default model"
    finally:
        activate_version(store, None)
        with store.write() as session:
            session.execute(delete(Prediction).where(Prediction.model_version == DEFAULT_TAG))


# ---------------------------------------------------------------- access and bad input

@pytest.mark.parametrize("method,url", [("get", "/api/models"), ("post", "/api/models/train"),
                                        ("get", "/api/models/jobs/1"), ("post", "/api/models/jobs/1/cancel"),
                                        ("post", "/api/models/1/activate"), ("post", "/api/models/default/activate")])
def test_admin_only(world, method, url):
    client = serve(world)
    assert client.request(method, url).status_code == 401
    response = client.request(method, url, auth=ANN, json={"dataset": DATASET})
    assert response.status_code == 403 and "admin" in response.json()["detail"]


@pytest.mark.parametrize("method,url,body,status,says", [
    ("post", "/api/models/train", {"dataset": "nowhere"}, 404, "no dataset"),
    ("post", "/api/models/train", {"dataset": "default", "steps": 5}, 422, "no labels"),
    ("post", "/api/models/train", {"dataset": DATASET, "init": 999}, 404, "no model version"),
    ("post", "/api/models/train", {"dataset": DATASET, "check_dataset": "nowhere"}, 404, "no dataset 'nowhere'"),
    ("post", "/api/models/train", {"dataset": DATASET, "check_dataset": "default", "steps": 5}, 422,
     "no labels to check on"),
    ("post", "/api/models/train", {"dataset": DATASET, "init": "best"}, 422, None),
    ("post", "/api/models/train", {"dataset": DATASET, "init": 2**63}, 422, None),  # past SQLite's integers: was a 500
    ("post", "/api/models/train", {"dataset": DATASET, "init": 10**30}, 422, None),
    ("post", "/api/models/train", {"dataset": DATASET, "steps": 0}, 422, None),
    ("post", "/api/models/train", {"dataset": DATASET, "minutes": -1}, 422, None),
    ("post", "/api/models/train", {"dataset": DATASET, "holdout": 1.5}, 422, None),
    ("post", "/api/models/999/activate", None, 404, "no model version"),
    ("post", "/api/models/0/activate", None, 422, None),
    ("post", "/api/models/abc/activate", None, 422, None),
    ("get", "/api/models/jobs/nope", None, 404, "no training job"),
    ("post", "/api/models/jobs/nope/cancel", None, 404, "no training job"),
])
def test_bad_input_is_4xx_with_a_reason(world, method, url, body, status, says):
    client = serve(world)
    response = client.request(method, url, auth=ADMIN, **({"json": body} if body is not None else {"headers": SCRIPT}))
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert says is None or says in json.dumps(detail)
    assert not checkpoint_files(world) or all(name.endswith((".pt", ".json")) for name in checkpoint_files(world))


# ---------------------------------------------------------------- the Admin tab's Models panel

@pytest.mark.slow
def test_models_panel_logic(world, trained):
    from capscope.ui.page import build_ui
    from capscope.ui.admin import activate_click, job_line, start_training, version_choices, versions_rows

    client = serve(world)
    training, activations = client.app.state.training, client.app.state.activations
    (row,) = [r for r in versions_rows(world["store"]) if r[0] == trained["version_id"]]
    assert row[2] == demo_sha()[:12] and row[3] == DATASET and " → " in row[4] and row[9] == ""
    fitted = mv.get_version(world["store"], trained["version_id"])["figures"]["word_threshold"]
    assert row[8] == f"× {fitted['scale']:g}" and len(fitted["f1"]) == 15
    assert row[6] == DATASET and " → " in row[7]  # the check dataset and its F1
    assert f"version {trained['version_id']} added" in job_line(trained)
    assert "no labels" in start_training(training, "default", 1, 5)
    assert training.last() is None  # nothing started
    assert activate_click(activations, 999).startswith("Not activated: no model version 999")
    assert version_choices(world["store"])[-1] == ("the default model", "default")
    assert activate_click(activations, "default") == "The default model is active again."
    assert activations.rescoring() is None  # no version was active: no dataset to score again
    assert build_ui(world["store"], client.app.state.models, training=training, activations=activations)


def test_annotate_suggestions_follow_the_newest_prediction(world, monkeypatch):
    from sqlalchemy import delete

    from capscope.annotation.model_versions import queued_items, store_version_predictions
    from capscope.server import suggestions
    from capscope.server.scoring import Models
    from capscope.annotation.users import get_user

    store = world["store"]
    item = queued_items(store, DATASET, 1)[0]
    row = {"metrics": {"infometic": {"token_scores": [0.5] * len(item["tokens"])}}}
    store_version_predictions(store, "v8:older", [(item["caption_id"], row)])
    time.sleep(0.01)
    store_version_predictions(store, "v9:newer", [(item["caption_id"], row)])
    seen = []
    monkeypatch.setattr(suggestions, "decided", lambda item, stored, metric, rule, scale: seen.append(stored) or "x")
    try:
        suggestions.Suggestions(store, Models()).stored(get_user(store, ADMIN[0]),
                                                        {"item_id": item["caption_id"], "tokens": item["tokens"]})
    finally:
        with store.write() as session:
            session.execute(delete(Prediction).where(Prediction.model_version.in_(["v8:older", "v9:newer"])))
    assert [s["model_version"] for s in seen] == ["v9:newer"]


def test_stored_predictions_keep_the_word_threshold_scale_their_rows_record(world, monkeypatch):
    """A version's rows (and an imported file's) say the scale their words were
    decided at; the prediction keeps it, its uncertainty is measured against it,
    and Annotate decides its words at it, whichever version is active."""
    from sqlalchemy import delete

    from capscope.annotation.model_versions import queued_items, store_version_predictions
    from capscope.server import suggestions
    from capscope.server.scoring import Models
    from capscope.annotation.uncertainty import prediction_uncertainty
    from capscope.annotation.users import get_user

    store = world["store"]
    item = queued_items(store, DATASET, 1)[0]
    scores = [0.04] * len(item["tokens"])
    fitted = {"metric_options": {"infometic": {"word_threshold_scale": 0.55}}}
    store_version_predictions(store, "v998:0123456789ab", [(item["caption_id"], {
        "model": fitted, "metrics": {"infometic": {"token_scores": scores}, "hice": {"token_scores": scores}}})])
    with store.read() as session:
        stored = {metric: (scale, uncertainty) for metric, scale, uncertainty in session.execute(
            select(Prediction.metric, Prediction.word_scale, Prediction.uncertainty)
            .where(Prediction.model_version == "v998:0123456789ab"))}
    semantic = [t["semantic"] for t in item["tokens"]]
    assert stored["infometic"][0] == 0.55 and stored["hice"][0] is None
    assert stored["infometic"][1] == pytest.approx(
        prediction_uncertainty("infometic", scores, [], semantic, "relative", 0.55))
    assert stored["infometic"][1] != pytest.approx(
        prediction_uncertainty("infometic", scores, [], semantic, "relative", 1.0))
    scales = []
    monkeypatch.setattr(suggestions, "decided", lambda item, stored, metric, rule, scale: scales.append(scale) or "x")

    class ActiveElsewhere:   # another version is active
        token_rule = "relative"
        version = "v999:0123456789ab"

    try:
        for models in (Models(), ActiveElsewhere()):
            suggestions.Suggestions(store, models).stored(get_user(store, ADMIN[0]),
                                                          {"item_id": item["caption_id"], "tokens": item["tokens"]})
    finally:
        with store.write() as session:
            session.execute(delete(Prediction).where(Prediction.model_version == "v998:0123456789ab"))
    assert scales == [0.55, 0.55]


@pytest.mark.parametrize("model, expected", [
    ({"metric_options": {"infometic": {"word_threshold_scale": 0.6}}}, 0.6),
    ({"metric_options": {"infometic": {"word_threshold_scale": 1}}}, None),      # the rule's own threshold
    ({"metric_options": {"clip4dm": {"epsilon": -5e-5, "layers": 3}}}, None),
    ({"metric_options": {"infometic": {"word_threshold_scale": -1}}}, None),     # not a scale: ignored
    ({"metric_options": {"infometic": {"word_threshold_scale": "0.6"}}}, None),
    ({"metric_options": {"infometic": {"word_threshold_scale": True}}}, None),
    ({"metric_options": {"infometic": {"word_threshold_scale": 10**400}}}, None),  # float() overflowed
    ({}, None), (None, None),
])
def test_a_rows_recorded_word_scale(model, expected):
    from capscope.annotation.importer.predictions import recorded_word_scale

    assert recorded_word_scale(model, "infometic") == expected


def test_rescoring_reads_the_queue_a_page_at_a_time_up_to_the_limit(world):
    from sqlalchemy import delete

    from capscope.annotation.model_versions import queued_count, queued_items, rescore_queued

    store = world["store"]
    queued = [item["caption_id"] for item in queued_items(store, DATASET, 100)]
    assert queued_count(store, DATASET) == len(queued) >= 6
    progress, pages = [], []

    def score_page(items):
        pages.append([item["caption_id"] for item in items])
        return [{"error": "cannot read image"} if item["caption_id"] == queued[1]
                else {"metrics": {"infometic": {"token_scores": [0.5] * len(item["tokens"])}}} for item in items]

    try:
        first = rescore_queued(store, DATASET, "v7:paged", score_page, limit=5, chunk=2,
                               on_progress=lambda done, total: progress.append((done, total)))
        assert first == {"total": 5, "scored": 4, "failed": 1, "stopped": False}
        assert pages == [queued[:2], queued[2:4], queued[4:5]] and progress == [(2, 5), (4, 5), (5, 5)]
        pages.clear()
        every = rescore_queued(store, DATASET, "v7:paged", score_page, limit=None, chunk=3)
        asked = [caption for page in pages for caption in page]
        assert every["total"] == len(queued) and asked == queued   # every page, each caption once, by id
        assert all(len(page) <= 3 for page in pages)
        pages.clear()
        stopped = rescore_queued(store, DATASET, "v7:stopped", score_page, limit=None, chunk=3,
                                 should_stop=lambda: len(pages) == 1)   # stopped after the first page
        assert stopped == {"total": len(queued), "scored": 2, "failed": 1, "stopped": True}
        with store.read() as session:
            stored = set(session.scalars(select(Prediction.caption_id).where(Prediction.model_version == "v7:paged")))
            kept = set(session.scalars(select(Prediction.caption_id).where(Prediction.model_version == "v7:stopped")))
        assert stored == set(queued) - {queued[1]}
        assert kept == {queued[0], queued[2]}   # the page scored before the stop is stored
    finally:
        with store.write() as session:
            session.execute(delete(Prediction).where(Prediction.model_version.in_(["v7:paged", "v7:stopped"])))
