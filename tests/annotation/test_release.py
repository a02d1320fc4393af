"""Benchmark releases (docs/formats.md §15): the folder, its files and their sha256, the
parquet rows, the datasheet made from the data, the store's record and a byte-for-byte remake,
and every bad input refused with nothing written."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation import controls, release, workflow
from capscope.annotation.agreement import gold_by_consensus
from capscope.annotation.refusals import AnnotationError
from capscope.annotation.users import add_user
from capscope.cli import main
from capscope.db import Store


@pytest.fixture()
def labelled(tmp_path):
    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path / "data", n_images=3, n_captions=8, annotators_per_item=2)
    team = [add_user(store, name, f"{name}-password-1") for name in ("ann", "bob")]
    for who, marks in zip(team, ([1], [1, 2])):
        for _ in range(6):
            item = workflow.next_item(store, who)
            workflow.save_labels(store, who, item["item_id"], marks, [0], "submitted")
    gold_by_consensus(store, "default", "dawid-skene", token_rule="relative")
    controls.set_control(store, 1, True)
    return store


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_release_folder_its_files_and_a_byte_for_byte_remake(labelled, tmp_path):
    out = tmp_path / "bench-1.0"
    metadata = release.make_release(labelled, "default", "1.0", out, licence="CC BY 4.0", actor="boss")
    files = _files(out)
    assert {"benchmark.jsonl", "benchmark.parquet", "datasheet.md", "metadata.json"} <= set(files)
    images = [name for name in files if name.startswith("images/")]
    assert len(images) == 3 and all(hashlib.sha256(files[n]).hexdigest() == Path(n).stem for n in images)
    assert json.loads(files["metadata.json"]) == metadata
    assert set(metadata["files"]) == set(files) - {"metadata.json"}
    assert all(hashlib.sha256(files[name]).hexdigest() == digest for name, digest in metadata["files"].items())
    assert (metadata["name"], metadata["version"], metadata["items"], metadata["annotators"],
            metadata["judgements"], metadata["controls"], metadata["method"]) == ("default", "1.0", 8, 2, 12, 1,
                                                                                  "dawid-skene")
    rows = [json.loads(line) for line in files["benchmark.jsonl"].splitlines()]
    assert [row["control"] for row in rows].count(True) == 1
    assert all("confidence" in t for row in rows for t in row["tokens"] + row["regions"])
    assert all((out / row["image"]).is_file() for row in rows)
    # the parquet holds the same rows, one per item
    import pyarrow.parquet as pq

    table = pq.read_table(out / "benchmark.parquet")
    assert table.num_rows == 8 and table.column("id").to_pylist() == [row["id"] for row in rows]
    assert table.column("tokens").to_pylist()[1][1]["label"] == rows[1]["tokens"][1]["label"]
    pandas = pytest.importorskip("pandas")
    assert len(pandas.read_parquet(out / "benchmark.parquet")) == 8
    sheet = files["datasheet.md"].decode()
    assert "CC BY 4.0" in sheet and "| items (captions) | 8 |" in sheet and "dawid-skene: 6 items" in sheet
    assert "semantic words" in sheet and "@misc{default-1-0" in sheet
    # recorded, and re-made byte for byte after the gold changed
    listed = release.list_releases(labelled, "default")
    assert [(r["version"], r["created_by"], r["items"]) for r in listed] == [("1.0", "boss", 8)]
    gold_by_consensus(labelled, "default", "majority", token_rule="relative")
    again = tmp_path / "again"
    release.remake_release(labelled, "default", "1.0", again)
    assert _files(again) == files


def test_agreement_interval_by_hand():
    class J:
        def __init__(self, wrong):
            self.incorrect_tokens, self.mentioned_regions = wrong, set()

    class Item:
        tokens = [{"semantic": True}, {"semantic": True}]
        regions = []

        def __init__(self, judgements):
            self.judgements = judgements

        def region_seers(self, i):
            return self.judgements

    # units (ratings): [T, T], [F, T] and [F, F], [F, T]: n0 = 4, n1 = 4, D = 2 * (2*1*1/1) = 4;
    # expected = 2*4*4/7 = 32/7; alpha = 1 - 4/(32/7) = 1 - 28/32
    items = [Item([J({0}), J({0, 1})]), Item([J(set()), J({1})])]
    found = release.agreement_with_intervals(items, draws=200)
    assert found["words"]["krippendorff_alpha"] == pytest.approx(1 - 28 / 32, abs=1e-6)
    low, high = found["words"]["interval"]
    assert low <= found["words"]["krippendorff_alpha"] <= high
    assert found["regions"] == {"units": 0, "krippendorff_alpha": None, "interval": None}


def test_bad_releases_are_refused_and_write_nothing(labelled, tmp_path):
    release.make_release(labelled, "default", "1.0", tmp_path / "v1")
    before = sorted(p.name for p in tmp_path.iterdir())
    for kwargs, message in (({"version": "1.0", "out": tmp_path / "v1b"}, "exists"),
                            ({"version": "../x", "out": tmp_path / "v2"}, "release version"),
                            ({"version": "2.0", "out": tmp_path / "v1"}, "exists"),
                            ({"version": "2.0", "out": tmp_path / "missing" / "v2"}, "parent folder"),
                            ({"dataset": "nope", "version": "2.0", "out": tmp_path / "v2"}, "no dataset")):
        arguments = {"dataset": "default", **kwargs}
        with pytest.raises(AnnotationError, match=message):
            release.make_release(labelled, arguments["dataset"], arguments["version"], arguments["out"])
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(AnnotationError, match="is a file"):
        release.make_release(labelled, "default", "2.0", tmp_path / "a-file")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["a-file"])
    assert [r["version"] for r in release.list_releases(labelled)] == ["1.0"]


def test_an_empty_dataset_and_the_command_line(labelled, tmp_path, capsys):
    from capscope.annotation.importer import ImportOptions, import_captions
    from annotation_support import write_jsonl

    url = str(labelled.engine.url)
    assert main(["release", "--db", url, "--dataset", "default", "--version", "1.0", "--out",
                 str(tmp_path / "r1"), "--licence", "CC0"]) == 0
    assert "8 items, 3 images" in capsys.readouterr().out
    assert main(["release", "--db", url, "--dataset", "default", "--version", "1.0", "--out",
                 str(tmp_path / "r2")]) != 0
    assert "exists" in capsys.readouterr().err and not (tmp_path / "r2").exists()
    assert main(["release", "--db", url, "--dataset", "default", "--version", "1.0", "--out",
                 str(tmp_path / "r3"), "--remake"]) == 0
    assert _files(tmp_path / "r1") == _files(tmp_path / "r3")
    assert main(["release", "--db", url, "--list"]) == 0 and "default 1.0: 8 items" in capsys.readouterr().out
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    import_captions(labelled, empty, tmp_path, ImportOptions(dataset="empty", progress=False))
    assert main(["release", "--db", url, "--dataset", "empty", "--version", "1", "--out", str(tmp_path / "e")]) != 0


def test_releases_through_rest(labelled, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from capscope.server.api import create_app

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "server-data"))
    add_user(labelled, "boss", "boss-password-1", role="admin")
    client = TestClient(create_app(store=labelled, scorer_factory=lambda: None), raise_server_exceptions=False)
    boss, ann = ("boss", "boss-password-1"), ("ann", "ann-password-1")
    made = client.post("/api/datasets/default/releases", json={"version": "1.0", "licence": "CC0"}, auth=boss)
    assert made.status_code == 201 and made.json()["items"] == 8
    assert (tmp_path / "server-data" / "releases" / "default-1.0" / "metadata.json").is_file()
    assert client.post("/api/datasets/default/releases", json={"version": "1.0"}, auth=boss).status_code == 422
    assert client.post("/api/datasets/default/releases", json={"version": "../up"}, auth=boss).status_code == 422
    assert client.post("/api/datasets/default/releases", json={"version": "2.0"}, auth=ann).status_code == 403
    listed = client.get("/api/releases", auth=boss).json()
    assert [(r["dataset"], r["version"], r["created_by"]) for r in listed] == [("default", "1.0", "boss")]


@pytest.mark.slow  # over 1.5 s here: the fast lane keeps under 5 minutes
def test_a_team_labels_through_rest_releases_and_every_reader_agrees(tmp_path, monkeypatch):
    """Several annotators label through the REST API; the release's JSONL, parquet (read by pyarrow,
    pandas and Hugging Face datasets) and datasheet agree, every sha256 holds, and a second release
    of the version fails and changes nothing."""
    from fastapi.testclient import TestClient

    from capscope.server.api import create_app

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "server"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path / "data", n_images=4, n_captions=10, annotators_per_item=3)
    boss = ("boss", "boss-password-1")
    add_user(store, *boss, role="admin")
    team = [(f"ann{i}", f"ann{i}-password-1") for i in range(3)]
    for name, password in team:
        add_user(store, name, password)
    client = TestClient(create_app(store=store, scorer_factory=lambda: None), raise_server_exceptions=False)
    rng = np.random.default_rng(3)
    for auth in team:
        while (response := client.get("/api/items/next", auth=auth)).status_code == 200:
            item = response.json()
            wrong = [i for i, t in enumerate(item["tokens"]) if t["semantic"] and rng.random() < 0.3]
            assert client.put(f"/api/items/{item['item_id']}/labels", auth=auth,
                              json={"incorrect_tokens": wrong, "mentioned_regions": [0], "status": "submitted"}
                              ).status_code == 200
    assert client.post("/api/datasets/default/gold", json={"method": "dawid-skene"}, auth=boss).status_code == 200
    made = client.post("/api/datasets/default/releases", json={"version": "1.0"}, auth=boss)
    assert made.status_code == 201
    folder = tmp_path / "server" / "releases" / "default-1.0"
    metadata = json.loads((folder / "metadata.json").read_text())
    for name, digest in metadata["files"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    rows = [json.loads(line) for line in (folder / "benchmark.jsonl").read_text().splitlines()]
    import pyarrow.parquet as pq

    from capscope.annotation.release import parquet_schema

    def filled(row):  # the parquet's fixed schema gives every field, null where the row has none
        import pyarrow as pa

        return pa.Table.from_pylist([row], schema=parquet_schema()).to_pylist()[0]

    assert pq.read_table(folder / "benchmark.parquet").to_pylist() == [filled(row) for row in rows]
    pandas = pytest.importorskip("pandas")
    assert list(pandas.read_parquet(folder / "benchmark.parquet")["id"]) == [row["id"] for row in rows]
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset("parquet", data_files=str(folder / "benchmark.parquet"),
                                   cache_dir=str(tmp_path / "hf"))["train"]
    assert loaded.num_rows == len(rows) == metadata["items"] == 10 and loaded[0]["tokens"][0]["text"] == \
        rows[0]["tokens"][0]["text"]
    sheet = (folder / "datasheet.md").read_text()
    assert metadata["judgements"] == 30 and metadata["annotators"] == 3
    assert f"| judgements (one annotator, one item) | {metadata['judgements']} |" in sheet
    assert f"| words | {sum(len(r['tokens']) for r in rows)} |" in sheet
    assert f"| regions with a label | {sum(g['label'] is not None for r in rows for g in r['regions'])} |" in sheet
    alpha = metadata["agreement"]["words"]
    assert alpha["interval"][0] <= alpha["krippendorff_alpha"] <= alpha["interval"][1]
    before = _files(folder)
    assert client.post("/api/datasets/default/releases", json={"version": "1.0"}, auth=boss).status_code == 422
    assert _files(folder) == before and len(client.get("/api/releases", auth=boss).json()) == 1
