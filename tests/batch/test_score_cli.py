"""`capscope score` and `capscope features` end to end on generated PNGs."""
import json
import subprocess
import sys

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image, ImageDraw

from capscope.cli import main

CAPTION = "a small red circle and a large blue square."


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, clip_checkpoint, released_checkpoint):
    root = tmp_path_factory.mktemp("score")
    rows = []
    for i in range(3):
        image = Image.new("RGB", (224, 160), (230, 228, 215))
        draw = ImageDraw.Draw(image)
        draw.ellipse((10 + 5 * i, 20, 70, 80), fill=(220, 30, 30))
        draw.rectangle((120, 40, 200, 120), fill=(40, 70, 220))
        image.save(root / f"img{i}.png")
        rows.append({"id": f"p{i}", "image": f"img{i}.png", "caption": CAPTION, "references": ["a red circle."]})
    rows.append({"id": "given", "image": "img0.png", "caption": "a red circle",
                 "regions": [{"box": [10, 20, 70, 80]}, {"box": [120, 40, 200, 120]}]})
    rows.append({"id": "missing", "image": "nope.png", "caption": "a cat"})
    rows.append({"id": "long", "image": "img1.png", "caption": "x" * 5001})
    (root / "corrupt.png").write_bytes(b"\x89PNG not really")
    rows.append({"id": "corrupt", "image": "corrupt.png", "caption": "a cat"})
    lines = [json.dumps(r) for r in rows] + ["{broken", '{"image": "img0.png", "caption": "no id"}']
    (root / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    torch.manual_seed(2)
    pacs = open_clip.create_model("ViT-B-32-quickgelu", pretrained=None)
    torch.save({"state_dict": pacs.state_dict()}, root / "pacs.pth")
    return root, clip_checkpoint, released_checkpoint


def model_args(workdir):
    root, clip, infometic = workdir
    return ["--clip-model", "ViT-B-32", "--clip-pretrained", str(clip), "--infometic-checkpoint", str(infometic),
            "--pacs-checkpoint", str(root / "pacs.pth"), "--device", "cpu"]


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_row(row):
    caption = row["caption"]
    for t in row["tokens"]:
        assert caption[t["start"] : t["end"]] == t["text"]
    for name, m in row["metrics"].items():
        assert len(m["token_scores"]) == len(row["tokens"]) == len(m["token_correct"])
        if name in ("infoclip", "infometic"):
            assert len(m["region_scores"]) == len(row["regions"]) == len(m["region_mentioned"])
            assert sum(m["region_scores"]) + m["null_score"] == pytest.approx(1, abs=1e-4)
            assert all(p["token"] is None or 0 <= p["token"] < len(row["tokens"]) for p in m["pieces"])
            for t, c in zip(row["tokens"], m["token_correct"]):
                assert (c is None) or t["semantic"]
    for r in row["regions"]:
        x0, y0, x1, y1 = r["box"]
        assert 0 <= x0 < x1 <= 224 and 0 <= y0 < y1 <= 160


@pytest.mark.slow
def test_score_all_metrics_classic_regions(workdir):
    root = workdir[0]
    out = root / "out.jsonl"
    code = main(["score", "--input", str(root / "pairs.jsonl"), "--output", str(out), "--regions", "classic",
                 "--metric", "clip-s", "pac-s", "infoclip", "infometic", *model_args(workdir)])
    assert code == 0
    rows = read(out)
    assert [r["id"] for r in rows] == ["p0", "p1", "p2", "given", "missing", "long", "corrupt", None, None]
    for row in rows[:4]:
        assert row["error"] is None, row["error"]
        assert set(row["metrics"]) == {"clip-s", "pac-s", "infoclip", "infometic"}
        check_row(row)
    assert set(rows[0]["metrics"]["clip-s"]["scores"]) == {"clip_s", "ref_clip_s"}
    assert set(rows[0]["metrics"]["infometic"]["scores"]) == {"precision", "recall", "overall", "overall_plus"}
    assert rows[0]["model"]["regions"] == "classic" and rows[3]["model"]["regions"] == "given"
    assert [r["box"] for r in rows[3]["regions"]] == [[10, 20, 70, 80], [120, 40, 200, 120]]
    assert "not found" in rows[4]["error"] and "5001 characters" in rows[5]["error"]
    assert "cannot read image" in rows[6]["error"]
    assert "JSON" in rows[7]["error"] and "id" in rows[8]["error"]
    # resuming skips every id already written and adds nothing
    before = out.read_text()
    main(["score", "--input", str(root / "pairs.jsonl"), "--output", str(out), "--metric", "clip-s", *model_args(workdir)])
    assert out.read_text().startswith(before)
    assert [r["id"] for r in read(out)][len(rows):] == [None, None]  # only the id-less rows again


@pytest.mark.slow
def test_a_finished_run_loads_no_model(workdir, monkeypatch, caplog):
    from capscope.batch import pipeline
    from capscope.metrics.config import ScorerConfig

    root = workdir[0]
    pairs, out = root / "two.jsonl", root / "finished.jsonl"
    pairs.write_text("".join(json.dumps({"id": f"p{i}", "image": f"img{i}.png", "caption": CAPTION}) + "\n"
                             for i in (0, 1)))
    out.write_text("".join(json.dumps({"id": f"p{i}", "error": None}) + "\n" for i in (0, 1)))
    monkeypatch.setattr(pipeline, "build_scorer", lambda config: pytest.fail("a scorer was built"))
    before = out.read_text()
    with caplog.at_level("INFO"):
        assert pipeline.score_file(ScorerConfig(("clip-s",)), pairs, out) == (0, 0)
    assert out.read_text() == before and "nothing to score" in caplog.text


@pytest.mark.slow
def test_given_regions_through_a_real_process(workdir):
    root = workdir[0]
    out = root / "given.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "capscope.cli", "score", "--input", str(root / "pairs.jsonl"), "--output", str(out),
         "--regions", "given", "--metric", "infometic", *model_args(workdir)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read(out)
    assert rows[3]["error"] is None and len(rows[3]["regions"]) == 2
    assert rows[0]["regions"] == []  # no boxes given: the image alone, null slot only
    assert rows[0]["metrics"]["infometic"]["null_score"] == pytest.approx(1.0)
    assert "pairs/s" in proc.stderr


@pytest.mark.slow
def test_features_round_trip_equals_scoring_from_pixels(workdir):
    root = workdir[0]
    feats = root / "feats"
    assert main(["features", "--input", str(root / "pairs.jsonl"), "--out", str(feats), "--regions", "classic",
                 *model_args(workdir)]) == 0
    saved = np.load(feats / "p0.npz")
    assert saved["feat"].shape[1] == 512 and saved["global_bbox"].tolist() == [0, 0, 224, 160]
    assert len(saved["clustered_bbox"]) <= 20
    from_pixels, from_file = root / "px.jsonl", root / "ff.jsonl"
    args = ["--metric", "infometic", "--regions", "classic", *model_args(workdir)]
    main(["score", "--input", str(root / "pairs.jsonl"), "--output", str(from_pixels), *args])
    index = [json.loads(line) for line in (feats / "pairs.jsonl").read_text().splitlines()]
    for row in index:
        row.pop("image")
    (feats / "only_features.jsonl").write_text("\n".join(json.dumps(r) for r in index) + "\n")
    main(["score", "--input", str(feats / "only_features.jsonl"), "--output", str(from_file), *args])
    px = {r["id"]: r for r in read(from_pixels)}
    scored = read(from_file)
    assert [r["id"] for r in scored] == ["p0", "p1", "p2", "given", "long"]  # images that could be read
    for row in scored[:4]:
        assert row["error"] is None and row["image"] is None
        assert {r["source"] for r in row["regions"]} <= {"features"}
        a, b = row["metrics"]["infometic"]["scores"], px[row["id"]]["metrics"]["infometic"]["scores"]
        assert a["overall"] == pytest.approx(b["overall"], abs=1e-4)


@pytest.mark.slow
def test_features_report_unusable_regions_per_row_and_go_on(workdir, capsys):
    root = workdir[0]
    image = json.loads((root / "pairs.jsonl").read_text().splitlines()[0])["image"]
    rows = [{"id": "flat", "image": image, "regions": [{"box": [5, 5, 5, 5]}]},
            {"id": "junk", "image": image, "regions": "everywhere"},
            {"id": "fine", "image": image, "regions": [{"box": [0, 0, 50, 40]}]}]
    (root / "odd_regions.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    feats = root / "feats_odd"
    assert main(["features", "--input", str(root / "odd_regions.jsonl"), "--out", str(feats),
                 *model_args(workdir)]) == 0
    assert [json.loads(line)["id"] for line in (feats / "pairs.jsonl").read_text().splitlines()] == ["fine"]
    errors = capsys.readouterr().err
    assert "line 1: bad regions" in errors and "line 2: bad regions" in errors


@pytest.mark.slow
def test_features_rows_refuse_pixel_metrics(workdir):
    root = workdir[0]
    feats = root / "feats2"
    main(["features", "--input", str(root / "pairs.jsonl"), "--out", str(feats), *model_args(workdir)])
    row = {"id": "f", "features": "p0.npz", "caption": CAPTION}
    (feats / "one.jsonl").write_text(json.dumps(row) + "\n")
    out = feats / "o.jsonl"
    main(["score", "--input", str(feats / "one.jsonl"), "--output", str(out), "--metric", "clip-s", "infoclip",
          *model_args(workdir)])
    (result,) = read(out)
    assert "clip-s needs pixels" in result["error"] and "infoclip" in result["metrics"]


@pytest.mark.slow
def test_offline_a_new_user_is_told_what_is_missing_and_demo_is_whole(workdir, tmp_path, capsys, monkeypatch):
    """Never a mixed run: without --demo a weight that cannot be had stops the
    command before scoring, in one line; with --demo every row is the demo's."""
    root, _, _ = workdir
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("CAPSCOPE_INFOMETIC_CHECKPOINT", raising=False)
    out = tmp_path / "out.jsonl"
    pairs = tmp_path / "one.jsonl"
    pairs.write_text(json.dumps({"id": "1", "image": str(root / "img0.png"), "caption": CAPTION}) + "\n")
    args = ["score", "--input", str(pairs), "--output", str(out), "--metric", "infometic", "--device", "cpu",
            "--regions", "given"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "capscope models download infometic" in err and "--infometic-checkpoint" in err and "--demo" in err
    assert not out.exists()

    assert main([*args, "--demo"]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["metrics"]["infometic"]["token_correct"] and row["model"]["demo"] is True
