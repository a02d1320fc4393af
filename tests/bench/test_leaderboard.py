"""`capscope evaluate --benchmark DIR` (issue 68, docs/formats.md "Leaderboard"):
a release folder written by hand as `capscope release` writes one, checked
before anything is scored, and its leaderboard: every metric's word and region
AUROC, AP and F1 with bootstrap intervals over images, by word type, and paired
differences; the bootstrap's sums against scikit-learn and hand-computed cases."""
from __future__ import annotations

import json

import numpy as np
import pytest

from capscope.cli import main
from capscope.metrics.loading import demo_model_path
from release_support import seal, write_release

SCENES = 5
METRICS = ["infometic", "hice"]


@pytest.fixture(scope="module")
def demo_world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("world")
    assert main(["demo-data", "--out", str(folder), "--n", str(SCENES), "--seed", "68"]) == 0
    items = [json.loads(line) for line in (folder / "captokeneval.jsonl").read_text().splitlines()]
    return folder, items


@pytest.fixture()
def release(demo_world, tmp_path):
    folder, items = demo_world
    return write_release(tmp_path / "demo-1.0", items, folder / "images", controls=(0,))


def evaluate(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["evaluate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------- bad input: one line, non-zero, nothing scored

def one_error_line(code: int, err: str) -> str:
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_a_missing_file_is_named(release, capsys):
    image = next((release / "images").iterdir())
    image.unlink()
    line = one_error_line(*evaluate(["--benchmark", str(release)], capsys)[::2])
    assert image.name in line and "missing" in line


def test_a_changed_file_is_named_by_its_sha256(release, capsys):
    with (release / "benchmark.parquet").open("ab") as handle:
        handle.write(b"\0")
    line = one_error_line(*evaluate(["--benchmark", str(release), "--metric", "infometic"], capsys)[::2])
    assert "benchmark.parquet" in line and "sha256" in line


def test_a_line_that_is_no_captokeneval_row_is_named_by_file_and_line(release, capsys):
    path = release / "benchmark.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[2])
    row["tokens"][0]["label"] = "wrong"
    lines[2] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    seal(release)                               # a release made broken, not changed after: the sha256 agree
    line = one_error_line(*evaluate(["--benchmark", str(release)], capsys)[::2])
    assert "benchmark.jsonl line 3" in line and "label" in line


def test_a_line_that_is_no_json_is_named(release, capsys):
    path = release / "benchmark.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    seal(release)
    line = one_error_line(*evaluate(["--benchmark", str(release)], capsys)[::2])
    assert f"benchmark.jsonl line {2 * SCENES + 1}" in line


def test_missing_metadata_is_one_line(release, capsys):
    (release / "metadata.json").unlink()
    line = one_error_line(*evaluate(["--benchmark", str(release), "--json"], capsys)[::2])
    assert "metadata.json" in line and "missing" in line


def test_an_image_the_metadata_does_not_list_is_refused(release, capsys):
    metadata = json.loads((release / "metadata.json").read_text())
    image = next(name for name in metadata["files"] if name.startswith("images/"))
    del metadata["files"][image]
    (release / "metadata.json").write_text(json.dumps(metadata))
    line = one_error_line(*evaluate(["--benchmark", str(release)], capsys)[::2])
    assert image in line and "not listed" in line


def test_a_file_or_no_folder_is_one_line(release, tmp_path, capsys):
    assert "is a file" in one_error_line(*evaluate(["--benchmark", str(release / "datasheet.md")], capsys)[::2])
    assert "no such" in one_error_line(*evaluate(["--benchmark", str(tmp_path / "none")], capsys)[::2])


def test_gold_and_benchmark_are_alternatives(release, capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--gold", str(release / "benchmark.jsonl"), "--benchmark", str(release)])
    code, _, err = evaluate(["--gold", str(release / "benchmark.jsonl"), "--metric", "infometic", "hice"], capsys)
    assert code == 2 and "one metric" in err


# ---------------------------------------------------------------- the leaderboard from the demo model

@pytest.fixture(scope="module")
def board(demo_world, tmp_path_factory):
    if not demo_model_path().is_file():
        pytest.skip("the demo model is not shipped")
    folder, items = demo_world
    return write_release(tmp_path_factory.mktemp("rel") / "demo-1.0", items, folder / "images", controls=(0,))


def test_the_leaderboard_of_a_release(board, capsys, demo_world):
    capsys.readouterr()
    assert main(["evaluate", "--benchmark", str(board), "--metric", "infometic", "hice", "--json", "--device", "cpu",
                 "--demo", "--draws", "200"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n_items"] == 2 * SCENES and result["n_images"] == SCENES
    assert result["controls"] == "included" and result["n_controls"] == 1
    assert result["benchmark"]["name"] == "demo" and result["benchmark"]["version"] == "1.0"
    assert list(result["metrics"]) == METRICS
    for metric, entry in result["metrics"].items():
        assert entry["n_errors"] == 0
        for level in ("words", "regions"):
            assert entry[level]["n_positive"] > 0
            for stat in ("auroc", "ap", "f1"):
                figure = entry[level][stat]
                lo, hi = figure["ci95"]
                assert lo - 1e-9 <= figure["value"] <= hi + 1e-9, (metric, level, stat, figure)
        assert set(entry["word_types"]) >= {"object", "attribute", "count", "action", "relation"}
        assert entry["word_types"]["attribute"]["n"] > 0           # the demo world's wrong words are colours and sizes
    assert result["metrics"]["infometic"]["words"]["auroc"]["value"] > 0.8
    assert {(d["a"], d["b"], d["level"]) for d in result["differences"]} == \
        {("infometic", "hice", "words"), ("infometic", "hice", "regions")}
    words = next(d for d in result["differences"] if d["level"] == "words")
    infometic, hice = result["metrics"]["infometic"]["words"], result["metrics"]["hice"]["words"]
    assert words["auroc"]["value"] == pytest.approx(infometic["auroc"]["value"] - hice["auroc"]["value"])

    # the point figures are `capscope evaluate --gold`'s on the same rows
    assert main(["evaluate", "--gold", str(board / "benchmark.jsonl"), "--metric", "infometic", "--json",
                 "--device", "cpu", "--demo"]) == 0
    gold = json.loads(capsys.readouterr().out)
    assert infometic["auroc"]["value"] == pytest.approx(gold["incorrect_token_auroc"])
    assert infometic["f1"]["value"] == pytest.approx(gold["incorrect_token_f1"])
    assert result["metrics"]["infometic"]["regions"]["auroc"]["value"] == pytest.approx(gold["region_auroc"])

    # the readable form, and the controls left out
    assert main(["evaluate", "--benchmark", str(board), "--metric", "infometic", "--device", "cpu", "--demo",
                 "--draws", "50", "--no-controls"]) == 0
    text = capsys.readouterr().out
    assert "demo 1.0" in text and "left out" in text and "words AUROC" in text and "attribute" in text


# ---------------------------------------------------------------- the figures and the bootstrap, by hand

def test_auroc_and_ap_of_three_scores_by_hand():
    from capscope.bench.leaderboard import Units, point_figures, ranking_draws

    units = Units(gold=np.array([True, False, True]), scores=np.array([0.9, 0.5, 0.3]),
                  decided=np.array([True, False, False]), image=np.array([0, 1, 2]))
    points = point_figures(units)
    # one positive above the negative, one below: 1/2; AP = 1/2 * 1 + 1/2 * 2/3
    assert points["auroc"] == pytest.approx(0.5) and points["ap"] == pytest.approx(5 / 6)
    assert points["f1"] == pytest.approx(2 / 3)                      # tp 1, fp 0, fn 1
    weights = np.array([[1.0, 1, 1], [2, 1, 1], [0, 3, 0], [1, 1, 0]])
    auroc, ap = ranking_draws(units, weights)
    assert auroc[:2] == pytest.approx([0.5, 2 / 3])                  # image 0 drawn twice: 2 of 3 pairs right
    assert ap[:2] == pytest.approx([5 / 6, 2 / 3 * 1 + 1 / 3 * 3 / 4])   # recall 2/3 at precision 1, 1/3 at 3/4
    assert np.isnan(auroc[2]) and np.isnan(ap[2])                    # only the negative drawn
    assert auroc[3] == 1.0 and ap[3] == 1.0


def test_ties_count_half_as_scikit_learn_does():
    from capscope.bench.leaderboard import Units, ranking_draws

    units = Units(gold=np.array([True, False, False, True]), scores=np.array([0.5, 0.5, 0.1, np.nan]),
                  decided=np.zeros(4, dtype=bool), image=np.array([0, 0, 1, 1]))
    auroc, ap = ranking_draws(units, np.ones((1, 2)))
    assert auroc[0] == pytest.approx(0.75) and ap[0] == pytest.approx(0.5)   # the unscored positive is left out


def test_weighted_sums_equal_scikit_learn_on_the_resampled_units():
    from sklearn.metrics import average_precision_score, roc_auc_score

    from capscope.bench.leaderboard import Units, f1_draws, image_draws, ranking_draws

    rng = np.random.default_rng(1)
    n, images = 300, 40
    gold = rng.random(n) < 0.3
    scores = np.round(rng.normal(size=n) + gold, 1)                  # rounded: many ties
    scores[rng.random(n) < 0.1] = np.nan
    units = Units(gold, scores, rng.random(n) < 0.4, rng.integers(0, images, n))
    weights = image_draws(images, 20, seed=3)
    assert (weights.sum(axis=1) == images).all()
    auroc, ap = ranking_draws(units, weights)
    f1 = f1_draws(units, weights)
    for d in range(len(weights)):
        rows = np.repeat(np.arange(n), weights[d, units.image].astype(int))
        scored = rows[~np.isnan(scores[rows])]
        assert auroc[d] == pytest.approx(roc_auc_score(gold[scored], scores[scored]))
        assert ap[d] == pytest.approx(average_precision_score(gold[scored], scores[scored]))
        tp = (gold[rows] & units.decided[rows]).sum()
        wrong = (gold[rows] != units.decided[rows]).sum()
        assert f1[d] == pytest.approx(2 * tp / (2 * tp + wrong))


def synthetic(n_images: int, seed: int = 0, noise: float = 1.0, perfect: bool = False):
    """Items of one caption each, "a red cat on a mat", with one wrong word in half of them,
    and two made-up metrics' predictions: "good" ranks with `noise`, "flat" at random."""
    rng = np.random.default_rng(seed)
    caption = "a red cat on a mat"
    spans = [(0, 1, False), (2, 5, True), (6, 9, True), (10, 12, True), (13, 14, False), (15, 18, True)]
    items, good, flat = [], [], []
    for k in range(n_images):
        wrong = k % 2 == 0 and 1 + k % 4 // 2 or None               # the colour or the object, in half the items
        tokens = [{"text": caption[s:e], "start": s, "end": e, "semantic": sem,
                   "label": None if not sem else "incorrect" if i == wrong else "correct"}
                  for i, (s, e, sem) in enumerate(spans)]
        regions = [{"box": [0, 0, 10, 10], "mask": None, "label": "mentioned"},
                   {"box": [5, 5, 20, 20], "mask": None, "label": "unmentioned"}]
        items.append({"id": str(k), "image": f"images/{k}.png", "caption": caption, "tokens": tokens,
                      "regions": regions})
        bad = np.array([t["label"] == "incorrect" for t in tokens])
        shift = 0.0 if perfect else noise
        correct = np.where(bad, -1.0, 1.0) + shift * rng.normal(size=len(tokens))
        good.append({"token_scores": correct.tolist(), "token_correct": (correct > 0).tolist(),
                     "region_scores": [1 + shift * rng.normal(), -1 + shift * rng.normal()],
                     "region_mentioned": [True, not perfect and bool(rng.random() < 0.2)]})
        flat.append({"token_scores": rng.normal(size=len(tokens)).tolist(), "token_correct": [True] * len(tokens),
                     "region_scores": rng.normal(size=2).tolist(), "region_mentioned": [True, True]})
    types = [[None, "attribute", "object", "relation", None, "object"]] * n_images
    return items, {"good": good, "flat": flat}, types


def test_a_perfect_metric_has_a_point_interval_and_a_random_one_does_not():
    from capscope.bench.leaderboard import leaderboard

    items, predictions, types = synthetic(12, perfect=True)
    board = leaderboard(items, predictions, types=types, draws=200, seed=0)
    good = board["metrics"]["good"]
    for level in ("words", "regions"):
        for stat in ("auroc", "ap", "f1"):
            assert good[level][stat] == {"value": 1.0, "ci95": [1.0, 1.0]}
    flat = board["metrics"]["flat"]["words"]["auroc"]
    assert flat["ci95"][0] < flat["value"] < flat["ci95"][1]
    assert good["word_types"]["attribute"]["n"] == 12 and good["word_types"]["attribute"]["n_positive"] == 3
    assert good["word_types"]["relation"]["auroc"] == {"value": None, "ci95": None}   # no wrong relation word
    assert good["word_types"]["count"]["n"] == 0
    words = next(d for d in board["differences"] if d["level"] == "words")
    assert (words["a"], words["b"]) == ("good", "flat") and words["auroc"]["ci95"][0] > 0


def test_intervals_shrink_as_the_release_grows():
    from capscope.bench.leaderboard import leaderboard

    def width(n: int, level: str, stat: str) -> float:
        items, predictions, types = synthetic(n, seed=n)
        lo, hi = leaderboard(items, predictions, types=types, draws=300)["metrics"]["good"][level][stat]["ci95"]
        return hi - lo

    for level, stat in (("words", "auroc"), ("words", "f1"), ("regions", "ap")):
        assert width(200, level, stat) < width(50, level, stat) < width(12, level, stat)


def test_the_draws_are_the_same_for_a_seed_and_every_metric():
    from capscope.bench.leaderboard import leaderboard

    items, predictions, types = synthetic(20, seed=5)
    first = leaderboard(items, predictions, types=types, draws=100, seed=7)
    again = leaderboard(items, {"flat": predictions["flat"], "good": predictions["good"]}, types=types, draws=100,
                        seed=7)
    assert first["metrics"] == again["metrics"]
    other = leaderboard(items, predictions, types=types, draws=100, seed=8)
    assert other["metrics"]["good"]["words"]["auroc"]["ci95"] != first["metrics"]["good"]["words"]["auroc"]["ci95"]


def test_the_word_types_are_diagnose_s():
    from capscope.bench.leaderboard import KINDS
    from capscope.diagnose.error_types import TYPES

    assert KINDS == TYPES


def test_a_release_made_by_capscope_release_is_evaluated_with_no_database(demo_world, tmp_path, capsys, monkeypatch):
    """`capscope import` then `capscope release`, the database removed, then the leaderboard:
    the point figures are `capscope evaluate --gold`'s on the same labels."""
    if not demo_model_path().is_file():
        pytest.skip("the demo model is not shipped")
    folder, _ = demo_world
    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    db = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["import", "--captokeneval", str(folder / "captokeneval.jsonl"), "--dataset", "world", "--db", db,
                 "--no-progress"]) == 0
    assert main(["release", "--dataset", "world", "--version", "2.0", "--out", str(tmp_path / "rel"), "--db", db]) == 0
    (tmp_path / "store.db").unlink()
    code, out, _ = evaluate(["--benchmark", str(tmp_path / "rel"), "--metric", "infometic", "--json", "--device",
                             "cpu", "--demo", "--draws", "100"], capsys)
    assert code == 0
    board = json.loads(out)
    assert board["benchmark"]["name"] == "world" and board["benchmark"]["version"] == "2.0"
    code, out, _ = evaluate(["--gold", str(folder / "captokeneval.jsonl"), "--metric", "infometic", "--json",
                             "--device", "cpu", "--demo"], capsys)
    gold = json.loads(out)
    words, regions = board["metrics"]["infometic"]["words"], board["metrics"]["infometic"]["regions"]
    assert words["n"] == gold["n_tokens"] and regions["n"] == gold["n_regions"]
    assert words["auroc"]["value"] == pytest.approx(gold["incorrect_token_auroc"], abs=1e-6)
    assert words["f1"]["value"] == pytest.approx(gold["incorrect_token_f1"], abs=1e-6)
    assert regions["auroc"]["value"] == pytest.approx(gold["region_auroc"], abs=1e-6)


def test_the_documented_loaders_read_a_release(release, tmp_path, monkeypatch):
    """docs/formats.md §15: pandas (parquet and JSONL), pyarrow and, where it is installed, Hugging Face datasets."""
    import pandas as pd
    import pyarrow.parquet as pq

    rows = pd.read_parquet(release / "benchmark.parquet")
    assert len(rows) == len(pd.read_json(release / "benchmark.jsonl", lines=True)) == 2 * SCENES
    assert pq.read_table(release / "benchmark.parquet").num_rows == 2 * SCENES
    assert all((release / image).is_file() for image in rows["image"])
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    loaded = datasets.load_dataset("parquet", data_files=str(release / "benchmark.parquet"),
                                   cache_dir=str(tmp_path / "hf"))["train"]
    assert loaded.num_rows == 2 * SCENES and loaded[0]["image"].startswith("images/")


def test_a_parquet_that_disagrees_with_the_jsonl_is_named(release, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (release / "benchmark.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist([{"id": r["id"]} for r in reversed(rows)]), release / "benchmark.parquet")
    seal(release)
    line = one_error_line(*evaluate(["--benchmark", str(release)], capsys)[::2])
    assert "benchmark.parquet: row 1 has id" in line
    pq.write_table(pa.Table.from_pylist([{"id": r["id"]} for r in rows[:-1]]), release / "benchmark.parquet")
    seal(release)
    line = one_error_line(*evaluate(["--benchmark", str(release)], capsys)[::2])
    assert f"{2 * SCENES - 1} rows, benchmark.jsonl has {2 * SCENES}" in line
