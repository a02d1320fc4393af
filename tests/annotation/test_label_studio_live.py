"""capscope and a real Label Studio, both ways: Label Studio started on
loopback (the `label-studio` command that CAPSCOPE_TEST_LABEL_STUDIO names;
`.ci/run` installs it in a virtual environment of its own), a project made with
capscope's labeling config through its REST API, capscope's tasks imported,
annotations made through the API, and Label Studio's export imported back into
capscope: the labels equal what was annotated. Label Studio's own RLE decoder
reads capscope's masks back."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from annotation_support import free_port, make_images, sqlite_url, write_jsonl
from capscope.cli import main
from capscope.db import Store

LABEL_STUDIO = os.environ.get("CAPSCOPE_TEST_LABEL_STUDIO")
TOKEN = "capscope0test0token0000000000000"
START_LIMIT_S = 240

pytestmark = pytest.mark.skipif(not LABEL_STUDIO, reason="CAPSCOPE_TEST_LABEL_STUDIO names no label-studio command")


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    """A fresh Label Studio on loopback serving local files under its root; yields (URL, root)."""
    import httpx

    folder = tmp_path_factory.mktemp("label-studio")
    root = folder / "files"
    root.mkdir()
    port = free_port()
    env = {**os.environ, "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true",
           "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(root), "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": ""}
    env.pop("HOST", None)
    server = subprocess.Popen(
        [LABEL_STUDIO, "start", "--internal-host", "127.0.0.1", "--port", str(port), "--no-browser",
         "--data-dir", str(folder / "data"), "--username", "admin@capscope.test", "--password", "capscope-pw",
         "--user-token", TOKEN, "--enable-legacy-api-token"],
        env=env, stdout=subprocess.DEVNULL, stderr=(folder / "log.txt").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while True:
            try:
                if httpx.get(f"{url}/api/version", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail("Label Studio did not start: " + (folder / "log.txt").read_text()[-2000:])
            time.sleep(1)
        yield url, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def api(url, method, path, **kwargs):
    import httpx

    response = httpx.request(method, url + path, headers={"Authorization": f"Token {TOKEN}"}, timeout=60, **kwargs)
    assert response.status_code < 300, f"{method} {path}: {response.status_code} {response.text[:500]}"
    return response.json() if response.content else None


def test_tasks_go_to_label_studio_and_its_annotations_come_back(label_studio, tmp_path, capsys, monkeypatch):
    url, root = label_studio
    names = make_images(root / "images", 2, size=(64, 48))
    mask = np.zeros((48, 64), dtype=bool)
    mask[10:30, 20:50] = True
    from capscope.metrics.regions import mask_to_rle

    rows = [{"id": f"c{i}", "image": names[i], "caption": f"a small red square and a blue circle number {i}.",
             "regions": [{"box": [20, 10, 50, 30], "mask": mask_to_rle(mask)}, {"box": [2, 2, 12, 12]}]}
            for i in range(2)]
    db = sqlite_url(tmp_path)
    assert main(["import", "--db", db, "--captions", str(write_jsonl(tmp_path / "c.jsonl", rows)), "--images",
                 str(root / "images"), "--dataset", "ls", "--regions", "none", "--no-progress"]) == 0
    scored = [{"id": f"c{i}", "error": None, "metrics": {"infometic": {
        "scores": {"overall": 1.5}, "token_scores": [None, 0.3, 0.001, 0.3, None, None, 0.3, 0.3, 0.3, None, None],
        "region_scores": [0.5, 0.01]}}} for i in range(2)]
    assert main(["import", "--db", db, "--predictions", str(write_jsonl(tmp_path / "p.jsonl", scored)),
                 "--dataset", "ls"]) == 0
    tasks_file = tmp_path / "tasks.json"
    assert main(["export", "--db", db, "--format", "label-studio", "--dataset", "ls", "--out", str(tasks_file),
                 "--image-root", str(root), "--masks"]) == 0
    capsys.readouterr()
    assert main(["export", "--format", "label-studio-config"]) == 0
    config = capsys.readouterr().out

    project = api(url, "POST", "/api/projects", json={"title": "capscope", "label_config": config})
    # Label Studio serves a local file only under a Local Files storage of the project
    api(url, "POST", "/api/storages/localfiles", json={"project": project["id"], "title": "images",
                                                       "path": str(root / "images"), "use_blob_urls": False})
    api(url, "POST", f"/api/projects/{project['id']}/import", json=json.loads(tasks_file.read_text()))
    tasks = api(url, "GET", "/api/tasks", params={"project": project["id"]})["tasks"]
    assert sorted(t["data"]["capscope_id"] for t in tasks) == ["c0", "c1"]
    image = api_bytes(url, tasks[0]["data"]["image"])
    assert image[:4] == b"\x89PNG"  # Label Studio serves the image from the URL capscope wrote

    predictions = api(url, "GET", "/api/predictions", params={"task": tasks[0]["id"]})
    (stored,) = predictions
    brush = next(r for r in stored["result"] if r["type"] == "brushlabels")
    assert label_studio_decodes(brush["value"]["rle"], 48, 64) == mask.astype(np.uint8).tolist()

    from capscope.annotation.label_studio import brush_rle

    stroke = np.zeros((48, 64), dtype=bool)
    stroke[3:12, 2:12] = True  # painted over most of the second region, [2, 2, 12, 12]
    annotated = {}
    for task in tasks:
        caption = task["data"]["caption"]
        start = caption.index("red")
        result = [{"type": "labels", "from_name": "words", "to_name": "caption",
                   "value": {"start": start, "end": start + 3, "text": "red", "labels": ["wrong"]}},
                  {"type": "rectanglelabels", "from_name": "regions", "to_name": "image", "original_width": 64,
                   "original_height": 48, "value": {"x": 100 * 20 / 64, "y": 100 * 10 / 48, "width": 100 * 30 / 64,
                                                    "height": 100 * 20 / 48, "rotation": 0,
                                                    "rectanglelabels": ["mentioned"]}},
                  {"type": "brushlabels", "from_name": "masks", "to_name": "image", "original_width": 64,
                   "original_height": 48,
                   "value": {"format": "rle", "rle": brush_rle(stroke), "brushlabels": ["mentioned"]}}]
        api(url, "POST", f"/api/tasks/{task['id']}/annotations", json={"result": result})
        annotated[task["data"]["capscope_id"]] = ({caption.split().index("red")}, {0, 1})

    export = tmp_path / "export.json"
    export.write_bytes(api_bytes(url, f"/api/projects/{project['id']}/export?exportType=JSON"))
    assert main(["import", "--db", db, "--label-studio", str(export)]) == 0
    assert capsys.readouterr().out.startswith("2 annotations imported, 0 unchanged, 1 new annotators")
    from capscope.annotation.votes import iter_items

    got = {item.external_id: [(j.user, j.incorrect_tokens, j.mentioned_regions) for j in item.judgements]
           for item in iter_items(Store(db), "ls")}
    assert got == {cid: [("label-studio-1", *labels)] for cid, labels in annotated.items()}  # its export names users by id
    assert main(["import", "--db", db, "--label-studio", str(export)]) == 0
    assert capsys.readouterr().out.startswith("0 annotations imported, 2 unchanged")
    # named by e-mail instead, through Label Studio's users API: another annotator, the same labels
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", TOKEN)
    assert main(["import", "--db", db, "--label-studio", str(export), "--label-studio-url", url]) == 0
    assert capsys.readouterr().out.startswith("2 annotations imported, 0 unchanged, 1 new annotators")
    by_email = {item.external_id: [(j.user, j.incorrect_tokens, j.mentioned_regions) for j in item.judgements
                                   if j.user == "label-studio-admin@capscope.test"] for item in iter_items(Store(db), "ls")}
    assert by_email == {cid: [("label-studio-admin@capscope.test", *labels)] for cid, labels in annotated.items()}


def test_annotators_named_by_their_label_studio_email(label_studio, tmp_path, capsys, monkeypatch):
    from capscope.annotation import label_studio as ls
    from capscope.annotation.refusals import Invalid

    url, _ = label_studio
    assert ls.user_emails(url, TOKEN) == {1: "admin@capscope.test"}
    with pytest.raises(Invalid, match="HTTP 401"):
        ls.user_emails(url, "not-a-token")
    export = tmp_path / "export.json"
    export.write_text("[]")
    monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
    db = sqlite_url(tmp_path)
    assert main(["import", "--db", db, "--label-studio", str(export), "--label-studio-url", url]) == 2
    assert "needs Label Studio's legacy API token in LABEL_STUDIO_API_KEY" in capsys.readouterr().err


def api_bytes(url, path) -> bytes:
    import httpx

    response = httpx.get(url + path, headers={"Authorization": f"Token {TOKEN}"}, timeout=60)
    assert response.status_code == 200, f"{path}: {response.status_code}"
    return response.content


def label_studio_decodes(rle: list[int], height: int, width: int) -> list:
    """The mask Label Studio's own converter reads from the RLE (run in its environment)."""
    python = Path(LABEL_STUDIO).with_name("python")
    script = ("import json, sys, numpy as np; from label_studio_sdk.converter.brush import decode_rle; "
              "h, w = int(sys.argv[2]), int(sys.argv[3]); "
              "a = np.reshape(decode_rle(json.loads(sys.argv[1])), (h, w, 4))[:, :, 3]; "
              "print(json.dumps((a > 0).astype(int).tolist()))")
    done = subprocess.run([str(python), "-c", script, json.dumps(rle), str(height), str(width)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    return json.loads(done.stdout)


def test_added_regions_junk_and_ties_round_trip_through_label_studio(label_studio, tmp_path, capsys):
    """A region an annotator added, a junk region and a word tied to a region go to Label Studio as
    annotations (boxes, a "no object" box, a relation); an annotation made there with a box over no
    stored region and a relation comes back as an added region and a tie."""
    from capscope.annotation import added_regions, workflow
    from capscope.annotation.users import add_user
    from capscope.annotation.votes import iter_items

    url, root = label_studio
    names = make_images(root / "ties", 2, size=(64, 48))
    rows = [{"id": f"t{i}", "image": names[i], "caption": f"a red square beside a blue circle {i}.",
             "regions": [{"box": [20, 10, 50, 30]}, {"box": [2, 2, 12, 12]}]} for i in range(2)]
    db = sqlite_url(tmp_path)
    assert main(["import", "--db", db, "--captions", str(write_jsonl(tmp_path / "c.jsonl", rows)), "--images",
                 str(root / "ties"), "--dataset", "ties", "--regions", "none", "--no-progress",
                 "--annotators-per-item", "1"]) == 0
    store = Store(db)
    ann = add_user(store, "ann", "ann-password-1")
    first = workflow.next_item(store, ann)
    added, _ = added_regions.add_region(store, ann, first["item_id"], box=[40, 30, 60, 45])
    red, circle = (next(i for i, t in enumerate(first["tokens"]) if t["text"] == w) for w in ("red", "circle"))
    workflow.save_labels(store, ann, first["item_id"], [red], [added["index"]], "submitted", junk_regions=[1],
                         links=[(circle, added["index"])])
    tasks_file = tmp_path / "tasks.json"
    assert main(["export", "--db", db, "--format", "label-studio", "--dataset", "ties", "--out", str(tasks_file),
                 "--image-root", str(root), "--with-labels"]) == 0
    capsys.readouterr()
    assert main(["export", "--format", "label-studio-config"]) == 0
    project = api(url, "POST", "/api/projects", json={"title": "ties", "label_config": capsys.readouterr().out})
    api(url, "POST", f"/api/projects/{project['id']}/import", json=json.loads(tasks_file.read_text()))
    tasks = {t["data"]["capscope_id"]: t for t in api(url, "GET", "/api/tasks", params={"project": project["id"]})["tasks"]}
    # in Label Studio, on the other item: "square" (a right word) tied to a box drawn over no stored region,
    # and the small region called no object
    caption = tasks["t1"]["data"]["caption"]
    start = caption.index("square")
    size = {"original_width": 64, "original_height": 48}
    result = [{"id": "s1", "type": "labels", "from_name": "words", "to_name": "caption",
               "value": {"start": start, "end": start + 6, "text": "square", "labels": ["tied"]}},
              {"id": "b1", "type": "rectanglelabels", "from_name": "regions", "to_name": "image", **size,
               "value": {"x": 100 * 40 / 64, "y": 100 * 30 / 48, "width": 100 * 20 / 64, "height": 100 * 15 / 48,
                         "rotation": 0, "rectanglelabels": ["mentioned"]}},
              {"id": "b2", "type": "rectanglelabels", "from_name": "regions", "to_name": "image", **size,
               "value": {"x": 100 * 2 / 64, "y": 100 * 2 / 48, "width": 100 * 10 / 64, "height": 100 * 10 / 48,
                         "rotation": 0, "rectanglelabels": ["no object"]}},
              {"type": "relation", "from_id": "s1", "to_id": "b1", "direction": "right", "labels": ["speaks of"]}]
    api(url, "POST", f"/api/tasks/{tasks['t1']['id']}/annotations", json={"result": result})

    export = tmp_path / "export.json"
    export.write_bytes(api_bytes(url, f"/api/projects/{project['id']}/export?exportType=JSON"))
    assert main(["import", "--db", db, "--label-studio", str(export)]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("2 annotations imported, 0 unchanged, 1 new annotators, 1 region added"), out
    items = {item.external_id: item for item in iter_items(store, "ties")}
    came_back = next(j for j in items["t0"].judgements if j.user == "label-studio-1")
    assert (came_back.incorrect_tokens, came_back.mentioned_regions, came_back.junk_regions, came_back.links) == \
        ({red}, {added["index"]}, {1}, {(circle, added["index"])})
    drawn = next(j for j in items["t1"].judgements if j.user == "label-studio-1")
    square = next(i for i, t in enumerate(items["t1"].tokens) if t["text"] == "square")
    assert items["t1"].regions[2]["source"] == "label-studio" and items["t1"].regions[2]["box"] == [40, 30, 60, 45]
    assert (drawn.mentioned_regions, drawn.junk_regions, drawn.links) == ({2}, {1}, {(square, 2)})
