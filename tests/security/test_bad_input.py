"""Bad input meets one rule everywhere: what used to raise (RecursionError on
deep JSON, a traceback half way through an import, a 500 from the server, a
file written outside the data folder, a spreadsheet formula in an export, a
pickle that runs code) now fails safely, with one line."""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest
import torch

from annotation_support import import_small_dataset, make_images, sqlite_url, write_jsonl
from capscope.annotation import label_studio as ls
from capscope.annotation.refusals import Invalid
from capscope.annotation.export import csv_cells, export_stem, iter_export
from capscope.annotation.importer import ImportOptions, import_captions, import_captokeneval
from capscope.annotation.users import add_user
from capscope.annotation.votes import iter_items
from capscope.annotation.workflow import record_judgement
from capscope.db import Store
from capscope.common import limits
from capscope.common.errors import CapscopeError, ModelUnavailable
from capscope.common.jsonl import JsonlError, JsonTextError, json_depth, json_lines, loads_limited, read_json_lines
from capscope.metrics.loading import demo_model_path, read_checkpoint
from capscope.common.paths import UnsafePath, inside, name_problem, safe_name

from security_support import ADMIN, basic

DEEP_ARRAY = "[" * 50_000 + "]" * 50_000
DEEP_OBJECT = '{"a":' * 50_000 + "1" + "}" * 50_000
OPTIONS = ImportOptions(dataset="d", annotators_per_item=1, regions="none", progress=False)


# ---------------------------------------------------------------- JSON readers

@pytest.mark.parametrize("text", [DEEP_ARRAY, DEEP_OBJECT, "[" * 65 + "]" * 65], ids=["arrays", "objects", "65"])
def test_deep_json_is_one_line_not_a_recursion_error(text):
    with pytest.raises(JsonTextError, match=f"^JSON nested more than {limits.MAX_JSON_DEPTH} levels deep$"):
        loads_limited(text)


def test_the_depth_limit_counts_brackets_not_strings():
    assert loads_limited("[" * 64 + "]" * 64) is not None
    assert json_depth('{"a": "[[[[{{{", "b": [1, {"c": "\\"]"}]}') == 3
    assert loads_limited('{"text": "' + "[" * 1000 + '"}') == {"text": "[" * 1000}
    with pytest.raises(JsonTextError, match="^unreadable JSON: a number has more than"):
        loads_limited("1" * 5000)
    with pytest.raises(JsonTextError, match="^malformed JSON: Expecting value at column 1$"):
        loads_limited("nope")


def test_a_deep_jsonl_line_is_a_line_error_and_the_rest_is_read(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join([DEEP_ARRAY, DEEP_OBJECT, '{"id": ' + "9" * 5000 + "}", '{"id": "ok"}']) + "\n")
    lines = list(json_lines(path))
    assert [(n, why is None) for n, _, why in lines] == [(1, False), (2, False), (3, False), (4, True)]
    assert lines[0][2] == lines[1][2] == "JSON nested more than 64 levels deep"
    with pytest.raises(JsonlError, match=r"rows.jsonl:1: JSON nested more than 64 levels deep$"):
        read_json_lines(path)


# ---------------------------------------------------------------- imports

CAPTION = "a red square"
TOKENS = [{"text": "a", "start": 0, "end": 1}, {"text": "red", "start": 2, "end": 5},
          {"text": "square", "start": 6, "end": 12}]
WRONG_TYPES = [  # (fields of a row, words its error names)
    ({"tokens": "abc"}, "'tokens' must be a list"),
    ({"tokens": ["a"]}, "token 0 must be an object"),
    ({"tokens": [{"text": "a", "start": "0", "end": 1}]}, "integer 'start', 'end'"),
    ({"tokens": [{"text": "a", "start": 0.0, "end": 1}]}, "integer 'start', 'end'"),
    ({"tokens": [dict(TOKENS[0], semantic="no")]}, "'semantic' must be true or false"),
    ({"tokens": [dict(t, label="maybe") for t in TOKENS]}, 'got "maybe"'),
    ({"tokens": [dict(t, label=[1]) for t in TOKENS]}, "got [1]"),
    ({"tokens": [dict(t, votes=[1, 2]) for t in TOKENS]}, "votes must be"),
    ({"regions": "abc"}, "'regions' must be a list"),
    ({"regions": [5]}, "region 0 must be an object"),
    ({"regions": [{"box": ["1", "2", "30", "30"]}]}, "box must be four finite numbers"),
    ({"regions": [{"box": "0099"}]}, "box must be four finite numbers"),
    ({"regions": [{"box": [1, 1, 30, 30], "mask": {"size": [48, 64], "counts": [10**30]}}]}, "malformed RLE"),
    ({"regions": [{"box": [1, 1, 30, 30], "mask": {"size": [48, 64], "counts": [1.5, 3071.5]}}]}, "malformed RLE"),
    ({"regions": [{"box": [1, 1, 30, 30], "label": {"a": 1}}]}, 'got {"a": 1}'),
    ({"regions": [{"box": [1, 1, 30, 30], "confidence": 10**400}]}, "confidence must be a number"),  # overflowed
    ({"references": "abc"}, "references must be"),
    ({"model": {"a": "b"}}, "'model' must be"),
    ({"image": ["a"]}, "missing field 'image'"),
    ({"image": "x" * 5000}, "is not a usable path"),
    ({"caption": 5}, "missing field 'caption'"),
    ({"id": {"a": 1}}, "missing field 'id'"),
]


def _import_rows(tmp_path, rows, importer) -> tuple:
    names = make_images(tmp_path / "images", len(rows))
    full = [{"id": f"r{i}", "image": f"images/{names[i]}", "caption": CAPTION, "tokens": TOKENS, **fields}
            for i, fields in enumerate(rows)]
    lines = [json.dumps(row) for row in full] + [DEEP_ARRAY, DEEP_OBJECT]
    path = write_jsonl(tmp_path / "rows.jsonl", lines)
    store = Store(sqlite_url(tmp_path))
    if importer == "captokeneval":
        return import_captokeneval(store, path, OPTIONS), len(full)
    return import_captions(store, path, tmp_path, OPTIONS), len(full)


def _keys(fields: dict) -> set[str]:
    """The keys of a row's tokens and regions."""
    items = [entry for value in fields.values() if isinstance(value, list) for entry in value]
    return {key for entry in items if isinstance(entry, dict) for key in entry}


@pytest.mark.parametrize("importer", ["captokeneval", "captions"])
def test_rows_of_the_wrong_type_are_row_errors_and_the_rest_is_imported(tmp_path, importer):
    rows = [fields for fields, _ in WRONG_TYPES] + [{}]  # the last one is good
    report, n = _import_rows(tmp_path, rows, importer)
    gold_only = [i for i, (fields, _) in enumerate(WRONG_TYPES, start=1) if {"label", "votes"} & _keys(fields)]
    expected = {i: words for i, (_, words) in enumerate(WRONG_TYPES, start=1)
                if importer == "captokeneval" or i not in gold_only}  # a captions import reads no labels or votes
    assert report.added == 1 + len(WRONG_TYPES) - len(expected)
    by_line = {error.line: error.reason for error in report.errors}
    for line, words in expected.items():
        assert words in by_line.get(line, ""), (line, by_line.get(line))
    assert by_line[n + 1] == by_line[n + 2] == "JSON nested more than 64 levels deep"
    assert all("\n" not in reason and "Traceback" not in reason for reason in by_line.values())


def test_a_dataset_name_with_control_characters_is_refused(tmp_path):
    store = Store(sqlite_url(tmp_path))
    with pytest.raises(Invalid, match="dataset name must not contain control characters"):
        import_captions(store, write_jsonl(tmp_path / "rows.jsonl", []), tmp_path,
                        ImportOptions(dataset="a\x1b[31mred", regions="none", progress=False))


# ---------------------------------------------------------------- Label Studio

@pytest.fixture
def labelled(tmp_path):
    store = Store(sqlite_url(tmp_path))
    assert import_small_dataset(store, tmp_path, n_images=1, n_captions=1, annotators_per_item=1).added == 1
    return store, next(iter_items(store))


def _task(item, annotations, **data):
    return {"id": 1, "data": {"capscope_id": item.external_id, "capscope_dataset": "default", **data},
            "annotations": annotations}


def test_a_label_studio_export_of_wrong_types_imports_what_fits(labelled, tmp_path):
    store, item = labelled
    red = next(t for t in item.tokens if t["text"] == "red")
    good = {"completed_by": 7, "result": [{"type": "labels", "value": {"start": red["start"], "end": red["end"],
                                                                       "text": "red", "labels": ["wrong"]}}]}
    bad_results = [5, "x", {"type": "labels", "value": "x"}, {"type": "labels", "value": {"labels": "wrong"}},
                   {"type": "labels", "value": {"start": "a", "end": 3, "labels": ["wrong"]}},
                   {"type": "rectanglelabels", "original_width": "64", "original_height": 48,
                    "value": {"x": 1, "y": 1, "width": 5, "height": 5, "rectanglelabels": ["mentioned"]}},
                   {"type": "rectanglelabels", "original_width": 64, "original_height": 48,
                    "value": {"x": "1", "rectanglelabels": ["mentioned"]}},
                   {"type": "brushlabels", "original_width": 64, "original_height": 48,
                    "value": {"rle": [255, 255, 255, 255, 255, 255, 255, 255], "brushlabels": ["mentioned"]}},
                   {"type": "brushlabels", "original_width": 64, "original_height": 48,
                    "value": {"rle": ["a", {}], "brushlabels": ["mentioned"]}}]
    export = [
        5, "task", {"id": [1], "data": "x"}, {"data": {"capscope_id": [1], "capscope_dataset": {"a": 1}}},
        _task(item, "x"), _task(item, [5, {"result": 5}, {"completed_by": [1], "result": bad_results}]),
        _task(item, [good]),
    ]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    report = ls.import_export(store, path)
    assert report.annotations_added == 2  # the good one, and the one whose results all failed to map (no labels)
    assert report.users_added == ["label-studio-unknown", "label-studio-7"]
    lines = report.not_mapped
    assert lines[:4] == ["task #1: not a Label Studio task (an object with 'data')",
                         "task #2: not a Label Studio task (an object with 'data')",
                         "task #3: not a Label Studio task (an object with 'data')",
                         'task #4: no capscope item [1] in dataset {"a": 1}']
    assert lines[4] == "task 1: 'annotations' is not a list"
    assert "annotation 0 is not an object" in lines[5] and "'result' is not a list" in lines[6]
    assert lines[7].count("result ") == 3 and "has no whole-number start and end" in lines[7]
    assert "box without numeric x, y, width and height" in lines[7]
    assert lines[7].count("a brush stroke overlaps no stored region") == 2
    assert all("Traceback" not in line for line in lines)


@pytest.mark.parametrize("text, words", [('{"not": "a list"}', "expected a list of tasks"),
                                         (DEEP_ARRAY, "JSON nested more than 64 levels deep"),
                                         ("[{", "malformed JSON")], ids=["object", "deep", "malformed"])
def test_a_file_that_is_not_a_json_list_is_refused_in_one_line(labelled, tmp_path, text, words):
    (path := tmp_path / "export.json").write_text(text)
    with pytest.raises(CapscopeError, match=words) as caught:
        ls.import_export(labelled[0], path)
    assert "\n" not in str(caught.value)


def test_score_rows_of_the_wrong_shape_are_row_errors_when_imported_as_predictions(labelled, tmp_path):
    from capscope.annotation.importer.predictions import import_predictions

    store, item = labelled
    rows = [{"id": item.external_id, "metrics": {"infometic": "x"}},
            {"id": item.external_id, "metrics": {"infometic": {"scores": 5}}},
            {"id": item.external_id, "metrics": {"infometic": {"token_scores": "abc"}}},
            {"id": item.external_id, "metrics": {"infometic": {"region_scores": [{"a": 1}]}}},
            {"id": item.external_id, "metrics": {"infometic": {"token_scores": [10**400]}}},  # its uncertainty overflowed
            DEEP_OBJECT,
            {"id": item.external_id, "metrics": {"infometic": {"scores": {"overall": 1.0}, "token_scores": [0.5]}},
             "model": {"metric_options": [1]}}]
    report = import_predictions(store, write_jsonl(tmp_path / "scored.jsonl", rows))
    assert report.added == 1 and [error.line for error in report.errors] == [1, 2, 3, 4, 5, 6]
    assert "its result must be an object" in report.errors[0].reason
    assert "'token_scores' must be a list of numbers or nulls" in report.errors[4].reason
    assert "'token_scores' must be a list of numbers or nulls" in report.errors[2].reason


def test_a_brush_header_claiming_billions_of_pixels_allocates_nothing():
    header = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="another size"):
        ls.brush_mask(header, 48, 64)


# ---------------------------------------------------------------- CSV export

def test_csv_cells_that_a_spreadsheet_would_run_are_quoted(tmp_path):
    caption = '=HYPERLINK("http://evil.example","x") costs +1 or -2'
    link = caption.index(" costs")
    plus, minus = caption.index("+1"), caption.index("-2")
    tokens = [{"text": caption[:link], "start": 0, "end": link},
              {"text": "costs", "start": link + 1, "end": link + 6},
              {"text": "+1", "start": plus, "end": plus + 2}, {"text": "-2", "start": minus, "end": minus + 2}]
    names = make_images(tmp_path / "images", 1)
    rows = [{"id": "=cmd|' /C calc'!A0", "image": names[0], "caption": caption, "tokens": tokens}]
    store = Store(sqlite_url(tmp_path))
    options = ImportOptions(dataset="@SUM(A1)", annotators_per_item=1, regions="none", progress=False)
    assert import_captions(store, write_jsonl(tmp_path / "rows.jsonl", rows), tmp_path / "images", options).added == 1
    item = next(iter_items(store))
    assert record_judgement(store, add_user(store, "ann", "ann-password-12"), item.caption_id, {0}, set())
    table = list(csv.reader(io.StringIO("".join(iter_export(store, "csv")))))
    cells = {(row[7], row[9]): row for row in table[1:]}
    assert [row[9] for row in table[1:]] == ["'" + tokens[0]["text"], "costs", "'+1", "'-2"]
    assert cells[("token", "'+1")][:3] == ["'@SUM(A1)", str(item.caption_id), "'=cmd|' /C calc'!A0"]
    assert csv_cells([-1, 2.5, "-1", "\tx", "\rx", "ok", None]) == [-1, 2.5, "'-1", "'\tx", "'\rx", "ok", None]


# ---------------------------------------------------------------- names that become paths

def test_safe_name_keeps_a_name_inside_one_folder():
    assert safe_name("x/../../../outside/pwn") == "x_.._.._.._outside_pwn"
    assert safe_name("..") == "unnamed" and safe_name(".hidden") == "hidden" and safe_name("") == "unnamed"
    assert safe_name("café 2024.v1") == "caf__2024.v1" and len(safe_name("a" * 1000)) == limits.MAX_FILE_NAME_CHARS
    assert export_stem("../../etc/passwd") == "capscope-_.._etc_passwd"
    assert name_problem("a\x00b") and name_problem("") and name_problem("x" * 201) and not name_problem("x/../y")


def test_inside_refuses_what_resolves_outside(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "link").symlink_to(tmp_path)
    assert inside(tmp_path / "in", "a.png") == (tmp_path / "in" / "a.png").resolve()
    for parts in (("..", "x"), ("link", "x"), ("/etc/passwd",), (".",)):
        with pytest.raises(UnsafePath):
            inside(tmp_path / "in", *parts)


def test_an_admin_import_named_to_climb_out_stays_in_the_data_folder(tmp_path, monkeypatch):
    from capscope.annotation import browse
    from capscope.ui.admin import import_files

    data = tmp_path / "deep" / "data"
    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(data))
    names = make_images(tmp_path / "upload", 1)
    listing = write_jsonl(tmp_path / "upload" / "rows.jsonl",
                          [{"id": "u1", "image": f"images/{names[0]}", "caption": "a red square."}, DEEP_ARRAY])
    store = Store(sqlite_url(tmp_path))
    report = import_files(store, [str(listing), str(tmp_path / "upload" / names[0])], "captions",
                          "x/../../../outside/pwn", 1)
    assert report.startswith("1 added") and "JSON nested more than 64 levels deep" in report
    assert not (tmp_path / "outside").exists() and not (tmp_path / "deep" / "outside").exists()
    (folder,) = (data / "imports").iterdir()
    assert folder.name.endswith("-x_.._.._.._outside_pwn") and (folder / "images" / names[0]).is_file()
    assert browse.dataset_names(store) == ["x/../../../outside/pwn"]  # the name is data, kept as typed
    assert "control characters" in import_files(store, [str(listing)], "captions", "bad\x07name", 1)


# ---------------------------------------------------------------- checkpoints

class Gadget:
    """Stands for what a malicious pickle would name: any class beyond tensors."""


def test_a_checkpoint_with_python_objects_needs_an_explicit_opt_in(tmp_path, monkeypatch):
    monkeypatch.delenv("CAPSCOPE_TRUST_CHECKPOINTS", raising=False)
    path = tmp_path / "gadget.pt"
    torch.save({"state_dict": {"w": torch.ones(1)}, "extra": Gadget()}, path)
    with pytest.raises(ModelUnavailable, match="holds Python objects beyond tensors.*CAPSCOPE_TRUST_CHECKPOINTS=1"):
        read_checkpoint(path, "InfoMetIC")
    assert isinstance(read_checkpoint(path, "InfoMetIC", weights_only=False)["extra"], Gadget)
    monkeypatch.setenv("CAPSCOPE_TRUST_CHECKPOINTS", "1")
    assert isinstance(read_checkpoint(path, "InfoMetIC")["extra"], Gadget)


def test_the_bundled_demo_model_loads_as_tensors_only(monkeypatch):
    monkeypatch.delenv("CAPSCOPE_TRUST_CHECKPOINTS", raising=False)
    monkeypatch.delenv("CAPSCOPE_DEMO_MODEL", raising=False)
    raw = read_checkpoint(demo_model_path(), "demo model")
    assert raw["format"] == "capscope-infometic/1" and raw["state_dict"]


# ---------------------------------------------------------------- GET /api/diagnose

def _summary_folder(team, name: str) -> Path:
    folder = team.data / "security-diagnose" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _diagnose(http, folder: Path):
    return http.get("/api/diagnose", params={"folder": str(folder)}, headers=basic(ADMIN))


@pytest.mark.parametrize("name, text, words", [
    ("malformed", '{"metrics": [', "malformed JSON"),
    ("deep", '{"metrics": ' + DEEP_ARRAY + "}", "JSON nested more than 64 levels deep"),
    ("a-list", "[1, 2]", "is not a JSON object"),
    ("not-utf8", b"\xff\xfe{}", "is not UTF-8 text"),
], ids=["malformed", "deep", "a-list", "not-utf8"])
def test_a_bad_summary_json_is_a_422_in_one_line(team, http, name, text, words):
    folder = _summary_folder(team, name)
    path = folder / "summary.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    answer = _diagnose(http, folder)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert words in detail and "\n" not in detail and "Error(" not in detail and "Traceback" not in detail


def test_a_summary_json_linking_outside_the_data_roots_is_not_read(team, http, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"secret": "outside the data folder"}')
    folder = _summary_folder(team, "linked")
    (folder / "summary.json").unlink(missing_ok=True)
    (folder / "summary.json").symlink_to(secret)
    answer = _diagnose(http, folder)
    assert answer.status_code == 403 and "secret" not in answer.text
    assert "links outside the server's data roots" in answer.json()["detail"]


def test_a_summary_json_over_the_limit_is_a_413_and_a_good_one_is_read(team, http, monkeypatch):
    folder = _summary_folder(team, "sizes")
    (folder / "summary.json").write_text(json.dumps({"metrics": ["clip-s"], "pad": "x" * 200}))
    assert _diagnose(http, folder).json()["metrics"] == ["clip-s"]
    monkeypatch.setattr(limits, "MAX_SUMMARY_BYTES", 100)  # the server runs in this process
    answer = _diagnose(http, folder)
    assert answer.status_code == 413 and "over" in answer.json()["detail"]


# ---------------------------------------------------------------- scored rows

@pytest.mark.parametrize("regions, words", [
    (5, "regions must be a list"),
    ({"box": [0, 0, 5, 5]}, "regions must be a list"),
    ("0099", "regions must be a list"),
    ([{"box": [0, 0, 5, 5], "confidence": "high"}], "confidence must be a finite number"),
    ([{"box": [0, 0, 5, 5], "confidence": float("nan")}], "confidence must be a finite number"),
    ([{"box": [0, 0, 5, 5], "confidence": True}], "confidence must be a finite number"),
    ([[0, 0, 10**400, 5]], "box must be four finite numbers"),  # JSON reads it; float() overflowed
    ([{"box": [0, 0, 5, 5], "confidence": -(10**400)}], "confidence must be a finite number"),
])
def test_a_scored_rows_regions_of_the_wrong_type_are_its_error(regions, words):
    """`capscope score` and the look-ahead read a row's regions through `row_regions`: anything but
    RowError there stopped the whole run (an int) or broke the row's output (a string confidence)."""
    from capscope.metrics.scorer import RowError, row_regions

    with pytest.raises(RowError, match=words):
        row_regions(regions, (64, 48))
    assert row_regions([{"box": [0, 0, 5, 5], "confidence": 0.5}], (64, 48))[0].confidence == 0.5


SCORED_WRONG_TYPES = [  # (fields of a row capscope score reads, words its error names)
    ({"tokens": 5}, "'tokens' must be a list"),
    ({"tokens": {"a": 1}}, "'tokens' must be a list"),
    ({"tokens": [5]}, "token 0 must be an object"),
    ({"tokens": [{"text": "a"}]}, "integer 'start', 'end'"),
    ({"tokens": [{"text": "a", "start": "0", "end": 1}]}, "integer 'start', 'end'"),
    ({"tokens": [{"text": "a", "start": 0, "end": 1, "semantic": "no"}]}, "'semantic' must be true or false"),
    ({"tokens": [{"text": "dog", "start": 0, "end": 1}]}, "does not match caption[0:1]"),
    ({"regions": 5}, "regions must be a list"),
    ({"image": "x" * 5000}, "is not a usable path"),
    ({"image": "a\x00.png"}, "is not a usable path"),
    ({"image": "."}, "Is a directory"),
]


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_rows_capscope_score_cannot_read_are_row_errors_and_the_rest_is_scored(tmp_path, clip_checkpoint):
    """Each of these stopped `capscope score` (TypeError, KeyError, OSError, ValueError) before."""
    import numpy as np
    from PIL import Image

    from capscope.batch.pipeline import score_items
    from capscope.metrics.scorer import Scorer

    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "a.png")
    scorer = Scorer(["clip-s"], device="cpu", clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint),
                    regions="given", runtime="eager")
    good = {"id": "good", "image": "a.png", "caption": "a dog."}
    rows = [{**good, "id": f"r{i}", **fields} for i, (fields, _) in enumerate(SCORED_WRONG_TYPES)] + [good]
    items = [(n, row, None) for n, row in enumerate(rows, start=1)]
    out = score_items(scorer, tmp_path, items, ahead=items)  # the look-ahead reads them too
    for row, (_, words) in zip(out, SCORED_WRONG_TYPES):
        assert row["error"] and words in row["error"], (row["id"], row["error"])
    assert out[-1]["error"] is None and out[-1]["metrics"]["clip-s"]["scores"]


@pytest.mark.parametrize("image_id", ['"x"', "null", "[1]", "Infinity", "NaN"])
def test_a_coco_image_id_that_is_no_integer_is_one_clear_error(tmp_path, image_id):
    """Python's JSON reads Infinity, and int(inf) raises OverflowError: it stopped the run with a traceback."""
    from capscope.batch.inputs import CocoCaptions, coco_pairs

    good = {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "caption": "a dog"}]}
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.json").write_text(
        '{"images": [{"id": %s, "file_name": "a.jpg"}], "annotations": []}' % image_id)
    (tmp_path / "results.json").write_text('[{"image_id": %s, "caption": "a dog"}]' % image_id)
    with pytest.raises(CapscopeError, match="is not a COCO captions file"):
        CocoCaptions(tmp_path / "bad.json")
    with pytest.raises(CapscopeError, match="is not an integer"):
        list(coco_pairs(tmp_path / "results.json", CocoCaptions(tmp_path / "good.json"), tmp_path))


def test_a_scored_row_whose_score_no_float_holds_is_left_out_of_the_diagnosis(tmp_path, capsys):
    """`capscope diagnose` on rows capscope score wrote: a 400-digit score (JSON reads it) stopped it with a
    TypeError in NumPy's isfinite. It is left out as a NaN is; the other rows are summarised."""
    from capscope.cli import main

    tokens = [{"text": "a", "start": 0, "end": 1, "semantic": False}, {"text": "dog", "start": 2, "end": 5, "semantic": True}]
    rows = [{"id": f"r{i}", "image": f"im{i}.png", "caption": "a dog", "tokens": tokens, "regions": [],
             "metrics": {"clip-s": {"scores": {"clip_s": value}}}, "model": None, "error": None}
            for i, value in enumerate([0.5, 10**400, 0.25])]
    path = write_jsonl(tmp_path / "scored.jsonl", rows)
    args = ["diagnose", "--model", f"a={path}", "--input-format", "scored", "--metric", "clip-s",
            "--out", str(tmp_path / "out"), "--bootstrap", "10"]
    assert main(args) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "3 captions" in capsys.readouterr().out and summary


def test_a_data_root_file_is_checked_as_it_was_opened(tmp_path):
    """/api/diagnose opens summary.json once and checks what it opened (on a15ad8a it checked
    a path, then opened it: a link swapped in between led outside). A FIFO is refused, not waited on."""
    from capscope.server.data_roots import DataRoots, OutsideDataRoots

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "secret.json").write_text("{}")
    (root / "good.json").write_text('{"ok": 1}')
    (root / "link.json").symlink_to(outside / "secret.json")
    database = root / "capscope.db"
    database.write_text("db")
    (root / "hard.json").hardlink_to(database)
    os.mkfifo(root / "pipe.json")
    roots = DataRoots([root])
    roots.protect([database])
    with roots.open_checked(root / "good.json") as handle:
        assert handle.read() == b'{"ok": 1}'
    for name in ("link.json", "hard.json"):
        with pytest.raises(OutsideDataRoots):
            roots.open_checked(root / name)
    with pytest.raises(IsADirectoryError):
        roots.open_checked(root / "pipe.json")
    with pytest.raises(FileNotFoundError):
        roots.open_checked(root / "missing.json")
