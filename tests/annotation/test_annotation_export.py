"""Exports: COCO masks decode with pycocotools, CSV rows per judgement, and
the export is produced piece by piece (a generator), not built whole."""
import csv
import io
import json
import types

import numpy as np
import pytest

from annotation_support import caption_rows, make_images, sqlite_url, write_jsonl
from capscope.annotation import export, votes
from capscope.annotation import workflow as wf
from capscope.annotation.refusals import Invalid
from capscope.annotation.importer import ImportOptions, import_captions, mask_to_rle
from capscope.annotation.users import add_user
from capscope.db import Store


@pytest.fixture()
def store(tmp_path):
    names = make_images(tmp_path / "images", 2, size=(64, 48))
    rows = caption_rows(names, 3)
    mask = np.zeros((48, 64), dtype=bool)
    mask[10:20, 5:25] = True
    rows[0]["regions"] = [{"box": [5, 10, 25, 20], "mask": mask_to_rle(mask)}, {"box": [30, 10, 60, 40]}]
    rows[2]["regions"] = rows[0]["regions"]  # same image as row 0
    store = Store(sqlite_url(tmp_path))
    report = import_captions(store, write_jsonl(tmp_path / "c.jsonl", rows), tmp_path / "images",
                             ImportOptions(annotators_per_item=2, regions="none", progress=False))
    assert report.added == 3, report.errors
    for name, regions in (("ann", [0]), ("bob", [0, 1])):
        user = add_user(store, name, "long-enough-secret")
        item = wf.next_item(store, user)["item_id"]
        wf.save_labels(store, user, item, [1], regions, "submitted")
    return store


def test_coco_export_loads_in_pycocotools(store, tmp_path):
    from pycocotools.coco import COCO

    path = tmp_path / "regions.json"
    with path.open("w") as handle:
        export.export_to_file(store, "coco", handle)
    coco = COCO(str(path))
    assert len(coco.getImgIds()) == 3 and len(coco.getAnnIds()) == 6
    first = coco.loadAnns(coco.getAnnIds(imgIds=[1]))
    mask = coco.annToMask(first[0])
    assert mask.shape == (48, 64) and mask.sum() == 200 and mask[10:20, 5:25].all()
    box_mask = coco.annToMask(first[1])  # a box-only region becomes a box-shaped RLE
    assert box_mask.sum() == pytest.approx(30 * 30, rel=0.1)
    assert [a["category_id"] for a in first] == [1, 3]  # 2/2 mentioned; 1/2 is a tie
    assert first[0]["votes"] == {"mentioned": 2, "junk": 0, "total": 2}


def test_csv_has_one_row_per_judged_token_and_region(store):
    rows = list(csv.DictReader(io.StringIO("".join(export.iter_export(store, "csv")))))
    assert {r["annotator"] for r in rows} == {"ann", "bob"}
    bob = [r for r in rows if r["annotator"] == "bob"]
    n_tokens = sum(r["kind"] == "token" for r in bob)
    assert len(bob) == n_tokens + 2
    assert [r["label"] for r in bob if r["kind"] == "region"] == ["mentioned", "mentioned"]
    assert [r["index"] for r in bob if r["label"] == "incorrect"] == ["1"]


def test_export_streams_in_chunks(store, monkeypatch):
    loaded = []
    real = votes._load_chunk

    def spy(session, rows):
        loaded.append(len(rows))
        return real(session, rows)

    monkeypatch.setattr(votes, "_load_chunk", spy)
    monkeypatch.setattr(votes, "CHUNK", 1)
    pieces = export.iter_export(store, "captokeneval")
    assert isinstance(pieces, types.GeneratorType)
    first = json.loads(next(pieces))
    assert first["id"] == "cap00000" and loaded == [1]  # one item read so far, not the table
    assert len(list(pieces)) == 2


def test_unknown_format_is_refused(store):
    with pytest.raises(Invalid):
        export.iter_export(store, "xml")


def test_benchmark_export_travels_with_its_images(store, tmp_path, capsys):
    import shutil

    from capscope.annotation.importer import import_captokeneval
    from capscope.cli import main

    out = tmp_path / "shared" / "bench.jsonl"
    assert main(["export", "--format", "captokeneval", "--with-images", "--out", str(out),
                 "--db", sqlite_url(tmp_path)]) == 0
    assert "3 items, 2 images" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["image"].startswith("images/") for r in rows] == [True] * 3
    assert rows[0]["image"] == rows[2]["image"] != rows[1]["image"]  # one copy per distinct image
    assert sorted(p.name for p in (out.parent / "images").iterdir()) == sorted({r["image"][7:] for r in rows})

    shutil.rmtree(tmp_path / "images")  # the originals are gone; the benchmark still loads
    fresh = Store(sqlite_url(tmp_path, "elsewhere.db"))
    report = import_captokeneval(fresh, out, ImportOptions(dataset="shared", annotators_per_item=0, progress=False))
    assert report.added == 3 and not report.errors
    again = {r["id"]: r for r in map(json.loads, export.iter_export(fresh, "captokeneval", "shared"))}
    for row in rows:
        labels = lambda r: ([t["label"] for t in r["tokens"]], [g["label"] for g in r["regions"]])  # noqa: E731
        assert labels(again[row["id"]]) == labels(row)
    assert main(["export", "--format", "csv", "--with-images", "--out", str(out), "--db", sqlite_url(tmp_path)]) == 2


@pytest.mark.parametrize("fmt", ["captokeneval", "csv", "coco", "label-studio", "label-studio-config"])
def test_every_format_goes_to_out_whole(store, tmp_path, capsys, fmt):
    """`export --out FILE` writes FILE for every format, and only FILE (no .partial left, nothing printed on
    standard output); on eb11b64 label-studio-config printed the config and ignored --out."""
    from capscope.cli import main

    out = tmp_path / "exports" / f"out.{fmt}"
    out.parent.mkdir()
    assert main(["export", "--format", fmt, "--out", str(out), "--db", sqlite_url(tmp_path)]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and f"wrote {out}" in printed.err
    assert [p.name for p in out.parent.iterdir()] == [out.name] and out.stat().st_size > 0
    if fmt in ("coco", "label-studio"):
        json.loads(out.read_text())
    if fmt == "label-studio-config":
        assert out.read_text().lstrip().startswith("<View")


def test_an_export_that_cannot_be_written_says_so_in_one_line(store, tmp_path, capsys):
    from capscope.cli import main

    out = tmp_path / "no-such-folder" / "out.csv"
    assert main(["export", "--format", "csv", "--out", str(out), "--db", sqlite_url(tmp_path)]) == 2
    assert "cannot write" in capsys.readouterr().err and not out.parent.exists()
