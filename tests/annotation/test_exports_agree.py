"""One meaning of a label in every export: CSV, COCO, Label Studio and CapTokenEval agree,
item by item, on junk regions, on ties, and on who saw a region added after others judged."""
import csv
import io
import json
from collections import Counter

from annotation_support import TEAM, TEAM_ADMIN, small_team_client
from capscope.annotation import label_studio

(ANN, BOB), BOSS = TEAM, TEAM_ADMIN
SCRIPT = {"X-Requested-With": "script"}  # a body-less call that changes something


def _labelled(tmp_path):
    store, client = small_team_client(tmp_path)
    item = client.get("/api/items/next", auth=ANN).json()["item_id"]
    assert client.put(f"/api/items/{item}/labels", auth=ANN, json={
        "incorrect_tokens": [1], "mentioned_regions": [0], "junk_regions": [1], "links": [[2, 0]],
        "status": "submitted"}).status_code == 200
    assert client.get("/api/items/next", auth=BOB).json()["item_id"] == item
    added = client.post(f"/api/items/{item}/regions", auth=BOB, json={"box": [40, 20, 60, 44]})
    assert added.status_code == 201, added.text
    assert client.put(f"/api/items/{item}/labels", auth=BOB, json={
        "incorrect_tokens": [], "mentioned_regions": [0, 2], "junk_regions": [], "links": [[2, 0], [3, 2]],
        "status": "submitted"}).status_code == 200
    client.judged_item = item
    return store, client


def test_csv_coco_label_studio_and_captokeneval_agree_item_by_item(tmp_path):
    store, client = _labelled(tmp_path)
    rows, table = _assert_exports_agree(store, client)
    judged = [row for row in rows.values() if any("votes" in r for r in row["regions"])]
    assert len(judged) == 1 and len(judged[0]["regions"]) == 3  # the added region is there
    # the region bob added after ann submitted: ann never saw it, so no export counts her as "unmentioned"
    added = judged[0]["regions"][2]
    assert added["votes"] == {"mentioned": 1, "junk": 0, "total": 1} and added["added_by"] == "bob"
    assert not [r for r in table if r["annotator"] == "ann" and r["kind"] == "region" and r["index"] == "2"]


def test_after_an_admin_removes_a_region_every_export_leaves_it_out_and_numbers_on_alike(tmp_path):
    store, client = _labelled(tmp_path)
    removed = client.delete(f"/api/items/{client.judged_item}/regions/0", auth=BOSS, headers=SCRIPT)
    assert removed.status_code == 200, removed.text
    assert removed.json() == {"index": 0, "how": "removed", "judgements_changed": 2}
    rows, table = _assert_exports_agree(store, client)
    row = next(r for r in rows.values() if any("votes" in x for x in r["regions"]))
    # regions 1 (ann's junk) and 2 (bob's) are now 0 and 1; bob's tie [3, 2] is [3, 1]; both ties on 0 went
    assert [r.get("votes") for r in row["regions"]] == [{"mentioned": 0, "junk": 1, "total": 2},
                                                        {"mentioned": 1, "junk": 0, "total": 1}]
    assert row["links"] == [{"token": 3, "region": 1, "votes": 1, "total": 1}]
    assert not [r for r in table if r["kind"] == "region" and r["index"] == "2"]


def _assert_exports_agree(store, client) -> tuple[dict, list]:
    rows = {r["id"]: r for r in map(json.loads, client.get("/api/export?format=captokeneval", auth=BOSS)
                                    .text.splitlines())}
    table = list(csv.DictReader(io.StringIO(client.get("/api/export?format=csv", auth=BOSS).text)))
    coco = client.get("/api/export?format=coco", auth=BOSS).json()
    exported = label_studio.tasks(store, with_labels=True, token_rule="relative")
    tasks = {t["data"]["capscope_id"]: t for t in exported}
    coco_ids = {image["id"]: image["item_id"] for image in coco["images"]}
    for item_id, row in rows.items():
        lines = [r for r in table if r["id"] == item_id]
        annotations = tasks[item_id].get("annotations", [])
        for index, region in enumerate(row["regions"]):
            votes = region.get("votes", {"mentioned": 0, "junk": 0, "total": 0})
            by_label = Counter(r["label"] for r in lines if r["kind"] == "region" and r["index"] == str(index))
            assert (by_label["mentioned"], by_label["junk"], sum(by_label.values())) == \
                (votes["mentioned"], votes["junk"], votes["total"]), (item_id, index, "csv")
            found = [a for a in coco["annotations"] if coco_ids[a["image_id"]] == item_id and a["region_index"] == index]
            assert found[0]["votes"] == votes and found[0]["category_id"] == \
                {"mentioned": 1, "unmentioned": 2}.get(region["label"], 3), (item_id, index, "coco")
            boxes = [r for a in annotations for r in a["result"] if r.get("id") == f"r{index}"]
            shown = Counter(r["value"]["rectanglelabels"][0] for r in boxes)
            assert (shown["mentioned"], shown["no object"], len(boxes)) == \
                (votes["mentioned"], votes["junk"], votes["total"]), (item_id, index, "label studio")
        ties = {(link["token"], link["region"]): link["votes"] for link in row.get("links", [])}
        csv_ties = Counter((int(r["index"]), int(r["region"])) for r in lines if r["kind"] == "tie")
        coco_ties = {(link["token"], a["region_index"]): link["votes"] for a in coco["annotations"]
                     if coco_ids[a["image_id"]] == item_id for link in a["links"]}
        ls_ties = Counter((int(r["from_id"][1:]), int(r["to_id"][1:])) for a in annotations for r in a["result"]
                          if r["type"] == "relation")
        assert ties == dict(csv_ties) == coco_ties == dict(ls_ties), item_id
        n_regions = len(row["regions"])
        assert sum(coco_ids[a["image_id"]] == item_id for a in coco["annotations"]) == n_regions, item_id
        assert all(int(r["index"]) < n_regions for r in lines if r["kind"] == "region"), item_id
    return rows, table
