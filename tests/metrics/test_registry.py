"""The metric registry and the typed result row: a metric registered here (a
caption-length metric, one class and one entry) is found by the command line,
the REST API, `evaluate` and the UI; rows serialise as they always have, with
the reproducibility fields in the `model` block."""
import base64
import hashlib
import io
import json

import pytest
import torch
from PIL import Image

from capscope.metrics import registry
from capscope.metrics.registry import MetricSpec, Needs, get_spec, metric_names, register, unregister
from capscope.metrics.result import MetricResult, ModelInfo, PhraseScore, PieceScore, ScoreRow

NAME = "caption-length"


class CaptionLength:
    """Words and characters of the caption: needs nothing from the image."""

    name = NAME
    backbone = None

    def compute(self, pairs, images):
        assert images == [None] * len(pairs)
        return [MetricResult.global_only({"words": len(p.tokens), "chars": len(p.caption)}, len(p.tokens))
                for p in pairs]


def caption_length_spec(build=lambda parts: CaptionLength()) -> MetricSpec:
    return MetricSpec(name=NAME, title="Caption length", kind="global", score_keys=("words", "chars"),
                      primary_key="words", needs=Needs(image=False, pixels=False), build=build)


@pytest.fixture()
def caption_length():
    register(caption_length_spec())
    yield NAME
    unregister(NAME)


def png(path=None, size=(40, 30)):
    image = Image.new("RGB", size, (200, 30, 30))
    if path is None:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return base64.b64encode(buffer.getvalue()).decode()
    image.save(path)
    return path


# ---------------------------------------------------------------- the built-in entries

def test_builtin_specs():
    assert {n: get_spec(n).primary_key for n in metric_names()} == {
        "infometic": "overall", "infoclip": "overall", "clip-s": "clip_s", "pac-s": "pac_s", "hice": "hice",
        "clip4dm": "f_clip_s"}
    assert metric_names(kind="token") == ("infometic", "infoclip", "hice", "clip4dm")
    assert get_spec("clip4dm").threshold == -5e-5 and not get_spec("clip4dm").follows_token_rule
    assert metric_names(kind="global") == ("clip-s", "pac-s")
    assert get_spec("hice").threshold == 0.2 and get_spec("infometic").threshold == 0.1
    assert get_spec("infometic").follows_token_rule and not get_spec("hice").follows_token_rule
    assert get_spec("clip-s").ref_keys == ("ref_clip_s",) and not get_spec("infometic").needs.pixels
    assert registry.metric_title("pac-s") == "PAC-S" and registry.metric_title("unknown") == "unknown"


def test_unknown_metric_is_one_line():
    from capscope.metrics.scorer import Scorer

    with pytest.raises(ValueError, match=r"unknown metric 'nope'; choose from infometic, infoclip, clip-s"):
        get_spec("nope")
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        Scorer(["nope"])


def test_bad_specs_are_refused(caption_length):
    with pytest.raises(ValueError, match="primary key 'length'"):
        MetricSpec(name="x", title="X", kind="global", score_keys=("words",), primary_key="length", build=None)
    with pytest.raises(ValueError, match="kind 'phrase'"):
        MetricSpec(name="x", title="X", kind="phrase", score_keys=("a",), primary_key="a", build=None)
    with pytest.raises(ValueError, match="already registered"):
        register(caption_length_spec())


def test_names_bound_at_import_stay_live(caption_length):
    from capscope.commands.options import METRICS

    assert NAME in METRICS and NAME in registry.METRIC_NAMES and tuple(METRICS)[-1] == NAME
    unregister(NAME)
    assert NAME not in METRICS
    register(caption_length_spec())


# ---------------------------------------------------------------- a new metric, everywhere

def test_cli_choices_come_from_the_registry(caption_length, tmp_path, capsys):
    from capscope.cli import build_parser, main

    args = build_parser().parse_args(["score", "--input", "in.jsonl", "--output", "out.jsonl", "--metric", NAME])
    assert args.metrics == [NAME]
    unregister(NAME)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["score", "--input", "in.jsonl", "--output", "out.jsonl", "--metric", NAME])
    capsys.readouterr()
    register(caption_length_spec())

    png(tmp_path / "red.png")
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "1", "image": "red.png", "caption": "a green circle"}) + "\n")
    assert main(["score", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                 "--metric", NAME, "--regions", "given"]) == 0
    row = json.loads((tmp_path / "out.jsonl").read_text())
    assert row["metrics"][NAME]["scores"] == {"words": 3, "chars": 14}
    assert row["metrics"][NAME]["token_correct"] == [None, None, None] and row["error"] is None
    assert row["model"]["clip"] == "none" and row["model"]["checkpoints"] == {}


def test_api_validates_against_the_registry(caption_length, tmp_path):
    from fastapi.testclient import TestClient

    from annotation_support import sqlite_url
    from capscope.annotation.users import add_user
    from capscope.db import Store
    from capscope.metrics.scorer import Scorer
    from capscope.server.api import create_app

    store = Store(sqlite_url(tmp_path))
    add_user(store, "ann", "ann-password-1")
    app = create_app(store=store, scorer_factory=lambda metrics: Scorer([NAME], regions="given"))
    client = TestClient(app, raise_server_exceptions=False)
    body = {"image": png(), "caption": "a green circle", "metrics": [NAME]}
    response = client.post("/api/score", json=body, auth=("ann", "ann-password-1"))
    assert response.status_code == 200, response.text
    assert response.json()["metrics"][NAME]["scores"] == {"words": 3, "chars": 14}
    refused = client.post("/api/score", json={**body, "metrics": ["no-such"]}, auth=("ann", "ann-password-1"))
    assert refused.status_code == 422 and NAME in refused.json()["detail"]


def gold_items(folder) -> list[dict]:
    """A clean caption and its polluted twin; 6 labelled semantic words, 1 incorrect."""
    png(folder / "scene.png")

    def token(text, start, semantic, label=None):
        return {"text": text, "start": start, "end": start + len(text), "semantic": semantic, "label": label}

    clean = {"id": "s0-clean", "image": "scene.png", "caption": "a red circle and a blue square",
             "twin": "s0-polluted", "polluted": False, "regions": [],
             "tokens": [token("a", 0, False), token("red", 2, True, "correct"), token("circle", 6, True, "correct"),
                        token("and", 13, False), token("a", 17, False), token("blue", 19, True, "correct"),
                        token("square", 24, True, "correct")]}
    polluted = {"id": "s0-polluted", "image": "scene.png", "caption": "a green circle", "twin": "s0-clean",
                "polluted": True, "regions": [],
                "tokens": [token("a", 0, False), token("green", 2, True, "incorrect"),
                           token("circle", 8, True, "correct")]}
    return [clean, polluted]


def test_evaluate_ranks_by_the_primary_key(caption_length, tmp_path):
    from capscope.bench.evaluate import evaluate_gold, overall_key
    from capscope.metrics.scorer import Scorer

    items = gold_items(tmp_path)
    figures = evaluate_gold(Scorer([NAME], regions="given"), NAME, items, tmp_path, token_rule="paper", beta=0.1)
    assert overall_key(NAME) == "words"
    assert figures["n_items"] == 2 and figures["n_errors"] == 0
    assert figures["foil"] == {"foil_accuracy": 1.0, "n_pairs": 1}   # 7 words above 3
    assert figures["text_accuracy"] == pytest.approx(5 / 6)           # undecided words count as correct
    assert figures["incorrect_token_f1"] == 0.0 and figures["vision_accuracy"] is None


def test_ui_titles_and_thresholds(caption_length):
    from capscope.ui import caption_shading, inspect_views

    row = {"caption": "a cat", "tokens": [], "metrics": {NAME: {"scores": {"words": 2}}}}
    assert inspect_views.scores_rows(row, None) == [["Caption length", "words", 2.0, None, "", "", ""]]  # no notes
    assert caption_shading.decision_threshold("hice") == 0.2
    assert caption_shading.decision_threshold("hice", {"features": {"threshold": 0.4218}}) == 0.4218
    assert caption_shading.decision_threshold(NAME) == 0.1


# ---------------------------------------------------------------- the typed row

def test_failed_row_is_the_documented_error_row():
    row = ScoreRow.failed({"id": "7", "image": "a.png", "caption": "x", "other": 1}, "line 3: bad").to_dict()
    assert row == {"id": "7", "image": "a.png", "caption": "x", "tokens": [], "regions": [], "metrics": {},
                   "model": None, "error": "line 3: bad"}
    assert list(row) == ["id", "image", "caption", "tokens", "regions", "metrics", "model", "error"]
    assert ScoreRow.failed(None, "not JSON").to_dict()["id"] is None


def test_metric_result_keys_in_order():
    info = MetricResult({"overall": 1.5}, [0.2, None], [True, None], [0.3], [True], 0.7,
                        pieces=[PieceScore("red", 0, 0.2)]).to_dict()
    assert list(info) == ["scores", "token_scores", "token_correct", "region_scores", "region_mentioned",
                          "null_score", "pieces"]
    assert info["pieces"] == [{"text": "red", "token": 0, "score": 0.2}]
    hice = MetricResult({"hice": 0.1}, [0.3], [False], phrases=[PhraseScore("red", [0], 0.3, False)],
                        features={"threshold": 0.2}).to_dict()
    assert list(hice)[-2:] == ["phrases", "features"]
    assert hice["phrases"] == [{"text": "red", "tokens": [0], "score": 0.3, "correct": False}]
    assert list(MetricResult.global_only({"clip_s": 0.5}, 2).to_dict()) == list(info)[:-1]
    assert list(ModelInfo("c", "given", "t", False).to_dict())[:4] == ["clip", "regions", "text", "demo"]


def test_files_a_metric_loads_are_hashed_into_the_row(tmp_path):
    weights = tmp_path / "toy-weights.bin"
    weights.write_bytes(b"toy checkpoint bytes")

    def build(parts):
        parts.record_file("toy", weights)
        return CaptionLength()

    register(caption_length_spec(build))
    try:
        from capscope.metrics.scorer import Scorer

        scorer = Scorer([NAME], regions="given", beta=0.05, token_rule="relative", device="cpu")
        model = scorer.score(Image.new("RGB", (20, 20)), "a cat")["model"]
    finally:
        unregister(NAME)
    assert model["checkpoints"] == {"toy": {"file": "toy-weights.bin",
                                            "sha256": hashlib.sha256(b"toy checkpoint bytes").hexdigest()}}
    assert (model["beta"], model["token_rule"], model["device"], model["dtype"]) == (0.05, "relative", "cpu", "float32")
    assert model["prompt"] == "A photo depicts "


@pytest.mark.slow
def test_released_checkpoint_digest_and_versions(released_checkpoint):
    import open_clip
    import PIL

    from capscope.metrics.scorer import Scorer

    scorer = Scorer(["infometic"], infometic_checkpoint=str(released_checkpoint), regions="given", device="cpu")
    row = scorer.score(Image.new("RGB", (64, 48), (20, 90, 200)), "a blue square", regions=[{"box": [4, 4, 40, 40]}])
    model = row["model"]
    assert model["checkpoints"] == {"infometic": {"file": "best_model.pth",
                                                  "sha256": hashlib.sha256(released_checkpoint.read_bytes()).hexdigest()}}
    assert model["open_clip"] == open_clip.__version__ and model["pillow"] == PIL.__version__
    assert model["torch"] in torch.__version__ and model["demo"] is False and model["dtype"] == "float32"


def test_every_built_in_score_key_says_what_it_is_its_range_and_which_way_is_better():
    """The registry is the one place a score's meaning is written (issue 71): the UI's table reads it."""
    from capscope.metrics.registry import SPECS, key_note

    for name in ("infometic", "infoclip", "clip-s", "pac-s", "hice", "clip4dm"):
        spec = SPECS[name]
        for key in spec.score_keys + spec.ref_keys:
            note = key_note(name, key)
            assert note is not None, (name, key)
            assert note.meaning and note.range and note.better in ("higher", "closer to 0"), (name, key)
    assert key_note("clip4dm", "f_clip_s").better == "closer to 0"
    assert key_note("clip-s", "clip_s").range.startswith("0 to 2.5")
    assert key_note("nope", "x") is None and key_note("clip-s", "nope") is None
