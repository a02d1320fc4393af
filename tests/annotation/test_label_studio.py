"""Label Studio both ways, without Label Studio: its brush RLE by hand and
round trip, tasks exported from a store, and an export of Label Studio's
layout read back as one annotator per Label Studio user."""
from __future__ import annotations

import json

import numpy as np
import pytest

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation import label_studio as ls
from capscope.annotation.importer.predictions import import_prediction_rows
from capscope.annotation.votes import iter_items
from capscope.cli import main
from capscope.db import Store

RULE = "relative"  # the token rule the predictions' verdicts are decided by


def test_brush_rle_by_hand_and_round_trip():
    rle = ls.brush_rle(np.array([[True]]))
    # 4 bytes of 255: header 32 + 5 + 4 * 4 bits, then one run: repeat 1, width 0 (3 bits), 4 - 1, 255
    bits = f"{4:032b}{7:05b}{2:04b}{5:04b}{8:04b}{11:04b}" + "1" + "00" + "011" + f"{255:08b}"
    bits += "0" * (-len(bits) % 8)
    assert rle == list(int(bits, 2).to_bytes(len(bits) // 8, "big"))
    rng = np.random.default_rng(0)
    for shape in ((7, 9), (64, 48), (300, 200)):
        mask = rng.random(shape) < 0.3
        mask[: shape[0] // 2] = True  # one long run too: longer than the widest run field (4096 bytes)
        assert (ls.brush_mask(ls.brush_rle(mask), *shape) == mask).all()


@pytest.fixture
def store(tmp_path):
    store = Store(sqlite_url(tmp_path))
    assert import_small_dataset(store, tmp_path, n_images=2, n_captions=3, annotators_per_item=2).added == 3
    items = list(iter_items(store))
    rows = [(k, {"id": item.external_id, "error": None, "metrics": {"infometic": {
        "scores": {"overall": 2.5}, "token_scores": [0.3 if t["semantic"] else None for t in item.tokens],
        "region_scores": [0.4, 0.01]}}}) for k, item in enumerate(items)]
    for row in rows:  # the second semantic word gets almost nothing: the model calls it wrong
        scores = row[1]["metrics"]["infometic"]["token_scores"]
        scores[[i for i, s in enumerate(scores) if s is not None][1]] = 0.001
    assert import_prediction_rows(store, rows).added == 3
    return store, tmp_path


def test_tasks_carry_the_models_suggestions_as_label_studio_reads_them(store):
    store, folder = store
    tasks = list(ls.tasks(store, "default", image_root=str(folder), token_rule=RULE))
    assert len(tasks) == 3
    task, item = tasks[0], next(iter_items(store))
    assert task["data"] == {"image": "/data/local-files/?d=images/img0000.png", "caption": item.text,
                            "capscope_id": item.external_id, "capscope_dataset": "default",
                            "capscope_regions": [{"index": 0, "source": "file", "added_by": None},
                                                 {"index": 1, "source": "file", "added_by": None}]}
    (prediction,) = task["predictions"]
    assert prediction["model_version"].startswith("capscope infometic") and prediction["score"] == 2.5
    spans = [r for r in prediction["result"] if r["type"] == "labels"]
    second = [t for t in item.tokens if t["semantic"]][1]
    assert [(s["value"]["start"], s["value"]["end"], s["value"]["labels"]) for s in spans] == \
        [(second["start"], second["end"], ["wrong"])]
    assert spans[0]["score"] == pytest.approx(0.001)
    boxes = [r for r in prediction["result"] if r["type"] == "rectanglelabels"]
    assert [b["value"]["rectanglelabels"] for b in boxes] == [["mentioned"], ["left out"]]  # 0.4 and 0.01 against 0.1
    assert boxes[0]["value"] | {"rotation": 0} == {"x": 100 * 4 / 64, "y": 100 * 4 / 48, "width": 100 * 26 / 64,
                                                   "height": 100 * 26 / 48, "rotation": 0, "rectanglelabels": ["mentioned"]}
    assert (boxes[0]["original_width"], boxes[0]["original_height"]) == (64, 48)
    prefixed = ls.tasks(store, "default", token_rule=RULE, image_root=str(folder),
                        url_prefix="https://files.example/x/")
    url = next(prefixed)["data"]["image"]
    assert url == "https://files.example/x/images/img0000.png"


def label_studio_export(item, annotations):
    """A task as Label Studio exports it, with these annotations (user id or email, result)."""
    return {"id": 17, "data": {"image": "/data/local-files/?d=x.png", "caption": item.text,
                               "capscope_id": item.external_id, "capscope_dataset": "default"},
            "annotations": [{"id": k, "completed_by": who, "was_cancelled": False, "result": result}
                            for k, (who, result) in enumerate(annotations)]}


def span(token, label="wrong"):
    return {"type": "labels", "from_name": "words", "to_name": "caption",
            "value": {"start": token["start"], "end": token["end"], "text": token["text"], "labels": [label]}}


def box(x0, y0, x1, y1, label="mentioned", width=64, height=48):
    return {"type": "rectanglelabels", "from_name": "regions", "to_name": "image", "original_width": width,
            "original_height": height, "value": {"x": 100 * x0 / width, "y": 100 * y0 / height,
                                                 "width": 100 * (x1 - x0) / width, "height": 100 * (y1 - y0) / height,
                                                 "rotation": 0, "rectanglelabels": [label]}}


def test_an_export_becomes_one_annotator_per_label_studio_user(store, tmp_path, capsys):
    store, _ = store
    item = next(iter_items(store))
    red = next(t for t in item.tokens if t["text"] == "red")
    annotations = [
        (1, [span(red), box(5, 5, 30, 29), box(30, 10, 60, 40, "left out")]),
        ({"id": 2, "email": "bo@lab.org"}, [span(red), span({"start": 200, "end": 204, "text": "nope"}),
                                              box(0, 0, 2, 2)]),
    ]
    export = tmp_path / "ls.json"
    export.write_text(json.dumps([label_studio_export(item, annotations)]))
    db = store.engine.url.render_as_string(hide_password=False)
    assert main(["import", "--label-studio", str(export), "--db", db]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("2 annotations imported, 0 unchanged, 2 new annotators, 1 region added")
    assert "covers no word" in out.err
    after = next(iter_items(store))
    judged = {j.user: (j.incorrect_tokens, j.mentioned_regions) for j in after.judgements}
    index = item.tokens.index(red)
    # a "mentioned" box over no stored region is a region that annotator added
    assert judged == {"label-studio-1": ({index}, {0}), "label-studio-bo@lab.org": ({index}, {2})}
    assert after.regions[2]["box"] == [0.0, 0.0, 2.0, 2.0] and after.regions[2]["added_by"] == "label-studio-bo@lab.org"
    assert after.regions[2]["source"] == "label-studio" and after.region_votes(2) == (1, 1)  # only bo saw it

    assert main(["import", "--label-studio", str(export), "--db", db]) == 0  # again: nothing changes
    assert capsys.readouterr().out.startswith("0 annotations imported, 2 unchanged, 0 new annotators")

    with_labels = next(ls.tasks(store, "default", with_labels=True, image_root="/", token_rule=RULE))
    assert [a["meta"]["capscope_annotator"] for a in with_labels["annotations"]] == \
        ["label-studio-1", "label-studio-bo@lab.org"]
    (bad := tmp_path / "bad.json").write_text('{"not": "a list"}')
    assert main(["import", "--label-studio", str(bad), "--db", db]) == 2
    assert "not a Label Studio JSON export" in capsys.readouterr().err


def stroke(x0, y0, x1, y1, label="mentioned", width=64, height=48):
    painted = np.zeros((height, width), dtype=bool)
    painted[y0:y1, x0:x1] = True
    return {"type": "brushlabels", "from_name": "masks", "to_name": "image", "original_width": width,
            "original_height": height, "value": {"format": "rle", "rle": ls.brush_rle(painted), "brushlabels": [label]}}


def test_brush_strokes_become_the_regions_they_cover(store, tmp_path):
    store, _ = store
    item = next(iter_items(store))
    annotations = [
        (3, [stroke(6, 6, 30, 30)]),  # most of region 0's box, [4, 4, 30, 30]
        (4, [stroke(31, 11, 59, 39), stroke(4, 4, 30, 30, "left out")]),  # region 1; a left-out stroke labels nothing
        (5, [stroke(0, 40, 10, 48), stroke(6, 6, 30, 30, width=128, height=96)]),  # over no region; another image size
    ]
    export = tmp_path / "strokes.json"
    export.write_text(json.dumps([label_studio_export(item, annotations)]))
    report = ls.import_export(store, export)
    judged = {j.user: j.mentioned_regions for j in next(iter_items(store)).judgements}
    assert {k: judged[k] for k in ("label-studio-3", "label-studio-4", "label-studio-5")} == \
        {"label-studio-3": {0}, "label-studio-4": {1}, "label-studio-5": {2}}  # a stroke over nothing: a new region
    assert report.regions_added == 1
    (line,) = report.not_mapped
    assert line.count("a brush stroke overlaps no stored region") == 1  # the one on another image size


def test_predictions_say_only_what_their_metric_judges(store):
    """CLIP4DM judges words, not regions: its predictions hold no region verdict; a row's model
    description becomes a readable version; masks are brush strokes only when asked for."""
    from capscope.metrics.regions import mask_to_rle

    store, _ = store
    items = list(iter_items(store))
    model = {"clip": "capscope-demo-clip", "regions": "given", "text": "blank", "demo": True}
    rows = [(k, {"id": item.external_id, "error": None, "model": model, "metrics": {"clip4dm": {
        "scores": {"clip_s": 0.5, "f_clip_s": 0.6, "negative_attribution": 0.1},
        "token_scores": [-0.001 if t["semantic"] else None for t in item.tokens], "region_scores": [],
        "region_mentioned": []}}}) for k, item in enumerate(items)]
    import_prediction_rows(store, rows)
    task = next(ls.tasks(store, "default", image_root="/", token_rule=RULE))
    clip4dm = next(p for p in task["predictions"] if p["model_version"].startswith("capscope clip4dm"))
    assert clip4dm["model_version"] == "capscope clip4dm capscope-demo-clip demo"
    assert {r["type"] for r in clip4dm["result"]} == {"labels"}
    infometic = next(p for p in task["predictions"] if p["model_version"].startswith("capscope infometic"))
    assert "rectanglelabels" in {r["type"] for r in infometic["result"]}

    with store.write() as session:  # give the first region a mask
        from capscope.db.models import Region

        region = session.query(Region).order_by(Region.id).first()
        mask = np.zeros((items[0].height, items[0].width), dtype=bool)
        mask[4:30, 4:30] = True
        region.mask_rle = mask_to_rle(mask)
    def kinds(masks):
        task = next(ls.tasks(store, "default", token_rule=RULE, image_root="/", masks=masks))
        return {r["type"] for p in task["predictions"] for r in p["result"]}
    assert "brushlabels" not in kinds(False) and "brushlabels" in kinds(True)


def test_the_labeling_config_goes_where_out_says(tmp_path, capsys):
    out = tmp_path / "config.xml"
    assert main(["export", "--format", "label-studio-config", "--out", str(out)]) == 0
    assert out.read_text().startswith("<View>") and ls.labeling_config() == out.read_text()


def test_ties_and_junk_go_to_label_studio_and_come_back(store):
    """A word tied to a region is a relation from its span (labelled "tied" when the word is right)
    to the region's box; a junk region a "no object" box; read back, the same labels."""
    from capscope.annotation import workflow
    from capscope.annotation.users import add_user

    store, _ = store
    ann = add_user(store, "ann", "ann-password-1")
    item = next(iter_items(store))
    workflow.next_item(store, ann)
    workflow.save_labels(store, ann, item.caption_id, [1], [0], "submitted", junk_regions=[1], links=[(2, 0), (1, 0)])
    (task,) = [t for t in ls.tasks(store, "default", token_rule=RULE, with_labels=True)
               if t["data"]["capscope_id"] == item.external_id]
    (annotation,) = [a for a in task["annotations"] if a["meta"]["capscope_annotator"] == "ann"]
    result = annotation["result"]
    labels = {r["id"]: r["value"].get("labels") or r["value"].get("rectanglelabels") for r in result if "value" in r}
    assert labels == {"w1": ["wrong"], "w2": ["tied"], "r0": ["mentioned"], "r1": ["no object"]}
    assert sorted((r["from_id"], r["to_id"], r["labels"][0]) for r in result if r["type"] == "relation") == \
        [("w1", "r0", "speaks of"), ("w2", "r0", "speaks of")]
    report = ls.import_export_rows(store, [label_studio_export(item, [(7, result)])])
    assert report.annotations_added == 1 and report.not_mapped == [] and report.regions_added == 0
    back = next(j for j in next(iter_items(store)).judgements if j.user == "label-studio-7")
    assert (back.incorrect_tokens, back.mentioned_regions, back.junk_regions, back.links) == \
        ({1}, {0}, {1}, {(1, 0), (2, 0)})
    assert "Relation" in ls.labeling_config() and 'value="no object"' in ls.labeling_config()


HUGE = 10**400  # JSON reads an integer of 400 digits; float() and math.isfinite refuse it
BOX = box(5, 5, 30, 29)
HOSTILE_RESULTS = {
    "a box's x past float's range": {**BOX, "value": {**BOX["value"], "x": HUGE}},
    "an image width past float's range": {**BOX, "original_width": HUGE},
    "a result id that is a list": {**BOX, "id": [1]},
    "a result id that is an object": {**BOX, "id": {"a": 1}},
    "labels that are objects": {**BOX, "type": "labels", "value": {"start": 0, "end": 1, "labels": [{}]}},
    "a relation between lists": {"type": "relation", "from_id": ["s"], "to_id": {"b": 1}},
}


@pytest.mark.parametrize("case", list(HOSTILE_RESULTS))
def test_a_hostile_result_is_reported_and_the_rest_imported(store, case):
    """Each of these stopped the whole import with a TypeError or an OverflowError."""
    store, _ = store
    item = next(iter_items(store))
    red = next(t for t in item.tokens if t["text"] == "red")
    report = ls.import_export_rows(store, [label_studio_export(item, [(9, [span(red), HOSTILE_RESULTS[case]])])])
    judged = {j.user: j.incorrect_tokens for j in next(iter_items(store)).judgements}
    assert judged["label-studio-9"] == {item.tokens.index(red)}, report.not_mapped
