"""One scorer per `capscope serve` process: the REST API and the UI's Inspect
handler share it, judge words by the one token rule the server was started
with (shown on the page, recorded in rows), and CLIP is built once.

The model is a demo-format checkpoint with random weights built here (the
demo fallback's real loading path); no pretrained CLIP can be had offline."""
import base64
import io

import pytest
from fastapi.testclient import TestClient
from PIL import Image, ImageDraw

from annotation_support import sqlite_url
from capscope.annotation.users import add_user
from capscope.db import Store
from ui_support import use_demo_checkpoint

USER = ("ann", "ann-password-1")
# twelve content words: under the paper's β = 0.1 a uniform share (1/12) already
# reads as wrong, under the relative rule (β·5/12) it does not
LONG_CAPTION = ("a small red circle, a large blue square, a green star and a purple triangle "
                "beside an orange shape.")


@pytest.fixture(scope="module")
def demo_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("one-scorer")
    patch = pytest.MonkeyPatch()
    use_demo_checkpoint(patch, root)
    yield root
    patch.undo()


def serve(folder, token_rule: str | None = None, scorer_factory=None) -> TestClient:
    from capscope.server.api import create_app

    folder.mkdir(parents=True, exist_ok=True)
    store = Store(sqlite_url(folder))
    add_user(store, *USER)
    options = {"token_rule": token_rule} if token_rule else {}
    return TestClient(create_app(store=store, scorer_factory=scorer_factory, **options),
                      raise_server_exceptions=False)


@pytest.fixture(scope="module")
def relative_server(demo_env):
    return serve(demo_env / "relative")


def scene() -> Image.Image:
    image = Image.new("RGB", (224, 224), (235, 232, 228))
    draw = ImageDraw.Draw(image)
    draw.ellipse((20, 20, 60, 60), fill=(220, 30, 30))
    draw.rectangle((120, 30, 200, 110), fill=(40, 70, 220))
    draw.polygon([(60, 200), (100, 130), (140, 200)], fill=(140, 50, 190))
    return image


def png_base64(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def api_row(client: TestClient, caption: str, metrics: list[str] | None = None) -> dict:
    body = {"image": png_base64(scene()), "caption": caption, **({"metrics": metrics} if metrics else {})}
    response = client.post("/api/score", json=body, auth=USER)
    assert response.status_code == 200, response.text
    return response.json()


def verdicts(row: dict, metric: str) -> tuple[list, list]:
    result = row["metrics"][metric]
    return result["token_correct"], result["region_mentioned"]


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_api_and_inspect_give_the_same_verdicts(relative_server):
    from capscope.ui import inspect_scoring

    models = relative_server.app.state.models
    metrics = [m for m in ("infometic", "infoclip", "hice") if m in models.available]
    assert "infometic" in metrics
    for caption in (LONG_CAPTION, "a red circle and a blue square."):
        from_api = api_row(relative_server, caption, metrics)
        from_page = inspect_scoring.score_caption(models, scene(), caption, "", None)
        assert from_page["tokens"] == from_api["tokens"] and from_page["regions"] == from_api["regions"]
        for metric in metrics:
            assert verdicts(from_page, metric) == verdicts(from_api, metric), metric


@pytest.mark.slow  # over 1.5 s here: the fast lane keeps under 5 minutes
def test_the_server_token_rule_decides_the_words(demo_env, relative_server):
    paper_server = serve(demo_env / "paper", token_rule="paper")
    relative, _ = verdicts(api_row(relative_server, LONG_CAPTION), "infometic")
    paper, _ = verdicts(api_row(paper_server, LONG_CAPTION), "infometic")
    # β·5/12 < β: every word correct under the paper's rule is correct under the
    # relative one, and with near-uniform shares some are wrong only under the paper's
    assert all(r for p, r in zip(paper, relative) if p)
    assert paper.count(False) > relative.count(False)
    assert relative_server.get("/api/health").json()["token_rule"] == "relative"
    assert paper_server.get("/api/health").json()["token_rule"] == "paper"


def test_rows_record_the_token_rule(relative_server):
    from capscope.ui import inspect_scoring

    assert api_row(relative_server, "a red circle.")["model"]["token_rule"] == "relative"
    row = inspect_scoring.score_caption(relative_server.app.state.models, scene(), "a red circle.", "", None)
    assert row["model"]["token_rule"] == "relative"


def test_clip_is_built_once_per_server(demo_env, monkeypatch):
    from capscope.ui import inspect_scoring
    from capscope.metrics import loading, scorer

    counts = {"clip": 0, "scorer": 0}
    create_open_clip, scorer_init = loading.create_open_clip, scorer.Scorer.__init__

    def counted_clip(*args, **kwargs):
        counts["clip"] += 1
        return create_open_clip(*args, **kwargs)

    def counted_scorer(self, *args, **kwargs):
        counts["scorer"] += 1
        scorer_init(self, *args, **kwargs)

    monkeypatch.setattr(loading, "create_open_clip", counted_clip)
    monkeypatch.setattr(scorer.Scorer, "__init__", counted_scorer)
    client = serve(demo_env / "counted")
    for metrics in (["clip-s"], None, ["infometic", "infoclip"], ["hice"]):
        api_row(client, "a red circle.", metrics)
    models = client.app.state.models
    row = inspect_scoring.score_caption(models, scene(), "a blue square.", "", None)
    models.region_matches(scene(), row, 0, "infoclip")
    # PAC-S has no checkpoint here: it is left out, and the rest still load once
    assert "pac-s" not in models.available and "not found" in models.unavailable["pac-s"]
    assert counts == {"clip": 1, "scorer": 1}


def test_a_metric_that_did_not_load_is_a_503_with_its_reason(demo_env):
    class FakeScorer:
        unavailable, demo = {}, True

        def __init__(self, metrics):
            self.metrics = {m: None for m in metrics}

    def factory(metrics):
        if "pac-s" in metrics:
            raise RuntimeError("PAC-S: checkpoint file pacs.pth not found (set --pacs-checkpoint)")
        return FakeScorer(metrics)

    client = serve(demo_env / "fake", scorer_factory=factory)
    response = client.post("/api/score", json={"image": png_base64(scene()), "caption": "a red circle.",
                                               "metrics": ["pac-s"]}, auth=USER)
    assert response.status_code == 503 and "pacs.pth not found" in response.json()["detail"]


def test_serve_passes_its_token_rule(monkeypatch, tmp_path):
    import uvicorn

    from capscope.cli import build_parser

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    monkeypatch.setenv("CAPSCOPE_NO_SEED", "1")
    args = build_parser().parse_args(["serve", "--db", sqlite_url(tmp_path), "--token-rule", "paper"])
    assert args.func(args) == 0
    assert served[0].state.models.token_rule == "paper"
    assert build_parser().parse_args(["serve"]).token_rule == "relative"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--token-rule", "loose"])


@pytest.mark.parametrize("given,limit", [(None, "default"), ("0", None), ("40", 40)])
def test_serve_passes_its_rescore_limit(monkeypatch, tmp_path, capsys, given, limit):
    import uvicorn

    from capscope.cli import build_parser
    from capscope.server.training import RESCORE_LIMIT

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    monkeypatch.setenv("CAPSCOPE_NO_SEED", "1")
    args = build_parser().parse_args(["serve", "--db", sqlite_url(tmp_path)]
                                     + (["--rescore-limit", given] if given else []))
    assert args.func(args) == 0
    assert served[0].state.activations.rescore_limit == (RESCORE_LIMIT if limit == "default" else limit)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    assert f"default {RESCORE_LIMIT};" in " ".join(capsys.readouterr().out.split())


def test_serve_refuses_a_negative_rescore_limit(tmp_path, capsys):
    from capscope.cli import main

    assert main(["serve", "--db", sqlite_url(tmp_path), "--rescore-limit", "-1"]) == 2
    assert "--rescore-limit must be 0" in capsys.readouterr().err


def test_the_page_shows_the_token_rule(tmp_path):
    from capscope.ui.page import build_ui
    from capscope.server.scoring import Models

    demo = build_ui(Store(sqlite_url(tmp_path)), Models(token_rule="paper"))
    notes = [block for block in demo.blocks.values() if getattr(block, "elem_id", None) == "cs-token-rule"]
    assert len(notes) == 1 and "**paper**" in notes[0].value and "β = 0.1" in notes[0].value
