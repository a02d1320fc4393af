"""Import: per-row errors for bad input with everything else kept, idempotent
re-runs, image dedupe by hash, proposed regions with masks, CapTokenEval round
trip, and a SIGKILL in the middle of an import."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select, text

from annotation_support import caption_rows, make_images, sqlite_url, write_jsonl
from capscope.annotation import importer
from capscope.common import limits
from capscope.annotation.export import iter_export
from capscope.annotation.importer import ImportOptions, import_captions, import_captokeneval
from capscope.db import Caption, Image, Region, Store, Token

OPTIONS = ImportOptions(dataset="d", annotators_per_item=2, regions="none", progress=False)


def _count(store, model):
    with store.read() as session:
        return session.scalar(select(func.count()).select_from(model))


def test_bad_rows_get_clear_errors_and_good_rows_survive(tmp_path, monkeypatch):
    images = tmp_path / "images"
    names = make_images(images, 3)
    (images / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20)
    good_png = (images / names[0]).read_bytes()
    (images / "truncated.png").write_bytes(good_png[: len(good_png) // 2])
    (images / "big.png").write_bytes(good_png + b"\0" * 5000)  # valid PNG, trailing bytes
    (tmp_path / "outside.png").write_bytes(good_png)
    os.symlink(tmp_path / "outside.png", images / "link.png")
    monkeypatch.setattr(limits, "MAX_IMAGE_BYTES", 3000)
    good = caption_rows(names, 3)
    lines = [
        good[0],                                                          # 1 ok
        {"id": "corrupt", "image": "corrupt.png", "caption": "a thing"},  # 2
        {"id": "trunc", "image": "truncated.png", "caption": "a thing"},  # 3
        {"id": "big", "image": "big.png", "caption": "a thing"},          # 4
        "{not json",                                                       # 5
        {"image": names[0], "caption": "no id"},                          # 6
        {"id": "nocap", "image": names[0]},                               # 7
        {"id": "long", "image": names[0], "caption": "x" * 100_000},      # 8
        {"id": "escape", "image": "../outside.png", "caption": "a thing"},  # 9
        {"id": "abs", "image": str(tmp_path / "outside.png"), "caption": "a thing"},  # 10
        {"id": "link", "image": "link.png", "caption": "a thing"},        # 11
        {"id": "missing", "image": "nope.png", "caption": "a thing"},     # 12
        {**good[1], "id": "badbox", "regions": [{"box": [1, 2, 3]}]},     # 13
        good[1],                                                          # 14 ok
        {**good[2], "id": good[0]["id"]},                                 # 15 duplicate id
        "[1, 2]",                                                          # 16 not an object
        good[2],                                                          # 18 ok (17 is not UTF-8)
    ]
    path = write_jsonl(tmp_path / "captions.jsonl", lines)
    data = path.read_bytes().splitlines(keepends=True)
    data.insert(16, b'{"id": "latin", "image": "x.png", "caption": "caf\xe9"}\n')
    path.write_bytes(b"".join(data))

    store = Store(sqlite_url(tmp_path))
    report = import_captions(store, path, images, OPTIONS)
    reasons = {error.line: error.reason for error in report.errors}
    assert report.added == 3, report.errors
    expected = {
        2: "cannot read image", 3: "cannot read image", 4: "limit", 5: "malformed JSON", 6: "'id'",
        7: "'caption'", 8: "100000 characters", 9: "outside the images folder", 10: "outside the images folder",
        11: "outside the images folder", 12: "not found", 13: "box", 15: "duplicate id (first on line 1)",
        16: "JSON object", 17: "not UTF-8",
    }
    assert set(reasons) == set(expected)
    for line, fragment in expected.items():
        assert fragment in reasons[line], (line, reasons[line])


def test_rerun_changes_nothing_and_images_dedupe_by_hash(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 2)
    (images / "copy.png").write_bytes((images / names[0]).read_bytes())
    rows = caption_rows(names, 4) + [{"id": "dup-image", "image": "copy.png", "caption": "the same picture",
                                      "regions": [{"box": [4, 4, 30, 30]}, {"box": [30, 10, 60, 40]}]}]
    path = write_jsonl(tmp_path / "captions.jsonl", rows)
    store = Store(sqlite_url(tmp_path))
    first = import_captions(store, path, images, OPTIONS)
    assert (first.added, first.images_added) == (5, 2) and not first.errors
    before = [_count(store, m) for m in (Caption, Image, Region, Token)]
    second = import_captions(store, path, images, OPTIONS)
    assert (second.added, second.unchanged, second.errors) == (0, 5, [])
    assert [_count(store, m) for m in (Caption, Image, Region, Token)] == before
    third = import_captions(store, path, images, ImportOptions(**{**OPTIONS.__dict__, "annotators_per_item": 5}))
    assert third.updated == 5
    changed = write_jsonl(tmp_path / "changed.jsonl", [{**rows[0], "caption": "something else"}])
    report = import_captions(store, changed, images, OPTIONS)
    assert "different content" in report.errors[0].reason


def test_proposed_regions_carry_masks_that_decode(tmp_path):
    from pycocotools import mask as mask_utils

    images = tmp_path / "images"
    names = make_images(images, 2, size=(96, 80))
    path = write_jsonl(tmp_path / "captions.jsonl", caption_rows(names, 3, regions=False))
    store = Store(sqlite_url(tmp_path))
    report = import_captions(store, path, images, ImportOptions(regions="classic", max_regions=5, progress=False))
    assert report.regions_proposed == 2 and not report.errors
    with store.read() as session:
        regions = session.scalars(select(Region)).all()
        assert regions and all(r.source == "classic" for r in regions)
        for region in regions:
            mask = mask_utils.decode({"size": region.mask_rle["size"], "counts": region.mask_rle["counts"].encode()})
            assert mask.shape == (80, 96) and mask.any()
    with pytest.raises(importer.Invalid, match="unknown region source"):
        import_captions(store, path, images, ImportOptions(regions="nonsense", progress=False))


def test_captokeneval_round_trip(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 2)
    caption = "a red square."
    gold_rows = [{
        "id": f"g{i}", "image": f"images/{names[i]}", "caption": caption,
        "tokens": [{"text": "a", "start": 0, "end": 1, "semantic": False, "label": None},
                   {"text": "red", "start": 2, "end": 5, "semantic": True, "label": "incorrect",
                    "votes": {"incorrect": 2, "total": 3}},
                   {"text": "square", "start": 6, "end": 12, "semantic": True, "label": "correct",
                    "votes": {"incorrect": 0, "total": 3}},
                   {"text": ".", "start": 12, "end": 13, "semantic": False, "label": None}],
        "regions": [{"box": [4.0, 4.0, 30.0, 30.0], "mask": None, "label": "mentioned",
                     "votes": {"mentioned": 3, "total": 3}}],
    } for i in range(2)]
    bad = {**gold_rows[0], "id": "bad", "tokens": [{"text": "red", "start": 0, "end": 3, "semantic": True}]}
    path = write_jsonl(tmp_path / "gold.jsonl", gold_rows + [bad])
    store = Store(sqlite_url(tmp_path))
    report = import_captokeneval(store, path, OPTIONS)
    assert report.added == 2 and "does not match caption" in report.errors[0].reason
    exported = [json.loads(line) for line in iter_export(store, "captokeneval")]
    for original, row in zip(gold_rows, exported):
        assert row["tokens"] == original["tokens"]
        # regions come back with their source and who added them; votes with the junk count
        expected = [{**r, "source": "file", "added_by": None, "votes": {**r["votes"], "junk": 0}}
                    for r in original["regions"]]
        assert row["regions"] == expected
        assert row["caption"] == caption and row["id"] == original["id"]


@pytest.mark.slow
def test_sigkill_mid_import_then_rerun_gives_a_complete_database(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 30, size=(128, 96))
    n_rows = 90
    path = write_jsonl(tmp_path / "captions.jsonl", caption_rows(names, n_rows, regions=False))
    url = sqlite_url(tmp_path)
    store = Store(url)
    command = [sys.executable, "-m", "capscope.cli", "import", "--captions", str(path), "--images", str(images),
               "--dataset", "k", "--regions", "classic", "--batch-size", "4", "--no-progress", "--db", url]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _count(store, Caption) < 8 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the import finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    partial = _count(store, Caption)
    assert 0 < partial < n_rows
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _count(store, Caption) == n_rows and _count(store, Image) == 30
    with store.read() as session:
        assert session.execute(text("PRAGMA integrity_check")).scalar() == "ok"
        assert session.execute(text("PRAGMA foreign_key_check")).all() == []
        no_tokens = session.scalar(select(func.count()).select_from(Caption)
                                   .where(~Caption.tokens.any()))
        no_regions = session.scalar(select(func.count()).select_from(Image).where(~Image.regions.any()))
        assert (no_tokens, no_regions) == (0, 0)
    again = import_captions(store, path, images, ImportOptions(dataset="k", regions="classic", progress=False))
    assert (again.added, again.unchanged, again.regions_proposed) == (0, n_rows, 0)
