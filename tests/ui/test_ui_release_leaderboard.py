"""The Benchmark tab's "Leaderboard of a release" (capscope.ui.benchmark_leaderboard.release_leaderboard):
a release folder inside the server's data roots scored by the server's models gives the
leaderboard's tables; a folder outside the roots, a release file that leads outside them, a
changed file or a bad choice gives one line and nothing else."""
from __future__ import annotations

import json

import pytest

from capscope.demo.dataset import write_demo_data
from capscope.server.data_roots import DataRoots
from capscope.server.scoring import SERVER_CONFIG, Models, default_factory
from capscope.ui.benchmark_leaderboard import release_leaderboard
from release_support import write_release
from ui_support import use_demo_checkpoint


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("board-models")
    patch = pytest.MonkeyPatch()
    use_demo_checkpoint(patch, root)
    models = Models(lambda metrics: default_factory(metrics, SERVER_CONFIG.replace(token_rule="paper")),
                    metrics=("infometic",), token_rule="paper")
    assert models.available == ["infometic"]
    yield models
    patch.undo()


@pytest.fixture()
def rooted(tmp_path, monkeypatch):
    """A data root holding a release of 3 demo scenes, and a folder outside it."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(root))
    write_demo_data(tmp_path / "world", 3, seed=5, progress=False)
    items = [json.loads(line) for line in (tmp_path / "world" / "captokeneval.jsonl").read_text().splitlines()]
    release = write_release(root / "releases" / "demo-1.0", items, tmp_path / "world" / "images", controls=(1,))
    return DataRoots([root]), release, outside


def not_run(view, *words):
    assert view.message.startswith("**Not run:**") and "\n" not in view.message, view.message
    assert all(w in view.message for w in words), view.message
    assert view.tables == []


def test_a_release_inside_the_roots_gets_its_leaderboard(models, rooted):
    roots, release, _ = rooted
    for path in (str(release), "releases/demo-1.0"):           # absolute, or relative to the data folder
        view = release_leaderboard(models, path, ["infometic"], 50, roots=roots, progress=False)
        assert view.message.startswith("demo 1.0: 6 items on 3 images (1 controls, included)"), view.message
        (header, rows), (type_header, _), (difference_header, differences) = view.tables
        assert header[:4] == ["metric", "words AUROC", "words AP", "words F1"]
        assert rows[0][0] == "infometic" and "[" in rows[0][1]
        assert "attribute" in type_header and differences == []    # one metric: nothing to pair


def test_outside_the_roots_or_a_changed_release_is_one_line(models, rooted):
    roots, release, outside = rooted
    not_run(release_leaderboard(models, str(outside), ["infometic"], 10, roots=roots),
            "outside the server's data roots")
    not_run(release_leaderboard(models, "releases/../../outside", ["infometic"], 10, roots=roots),
            "outside the server's data roots")
    image = next((release / "images").iterdir())
    (outside / image.name).write_bytes(image.read_bytes())
    image.unlink()
    image.symlink_to(outside / image.name)                    # the same bytes, but outside the roots
    not_run(release_leaderboard(models, str(release), ["infometic"], 10, roots=roots),
            "outside the server's data roots")
    image.unlink()
    (release / "benchmark.jsonl").write_text((release / "benchmark.jsonl").read_text().replace("a", "b", 1))
    not_run(release_leaderboard(models, str(release), ["infometic"], 10, roots=roots), "benchmark.jsonl", "sha256")


def test_bad_choices_are_one_line(models, rooted):
    roots, release, _ = rooted
    not_run(release_leaderboard(models, "", ["infometic"], 10, roots=roots), "path of a release folder")
    not_run(release_leaderboard(models, str(release), [], 10, roots=roots), "at least one metric")
    not_run(release_leaderboard(models, str(release), ["hice"], 10, roots=roots), "not loaded")
    not_run(release_leaderboard(models, str(release), ["infometic"], -1, roots=roots), "0 or more")
    not_run(release_leaderboard(models, str(release / "datasheet.md"), ["infometic"], 10, roots=roots), "is a file")


def test_a_release_file_that_is_the_server_s_own_is_refused(models, rooted):
    roots, release, _ = rooted
    private = roots.folders[0] / "capscope.db"
    private.write_bytes(b"SQLite format 3\0 secret")
    roots.protect([private])
    metadata = release / "metadata.json"
    metadata.unlink()
    metadata.symlink_to(private)
    not_run(release_leaderboard(models, str(release), ["infometic"], 10, roots=roots), "server's own files")
    not_run(release_leaderboard(models, str(private), ["infometic"], 10, roots=roots), "server's own files")
