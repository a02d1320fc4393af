"""How many clicks make a region? (`python -m capscope.studies.click_noc --out DIR`)

Demo scenes are imported with every region of the shapes their caption names
left out. An annotator, through the REST API, adds each named shape back by
clicking, as the NoC protocol of interactive segmentation prescribes: the
first click at the shape's innermost pixel, each next one at the innermost
pixel of the largest error (positive where the shape was missed, negative
where the mask spilled over), up to `MAX_CLICKS`, until IoU >= 0.85. The
mask is then added as a region, marked mentioned and tied to the shape's
noun. Beside it, the trivial way: a fixed box (the median side of the demo
world's shapes) centred on the first click. The server is `capscope serve`
in a process of its own, on loopback.
Writes DIR/click_noc.json and prints a summary.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from capscope.demo.click_targets import next_click, write_scenes
from capscope.metrics.regions import box_mask, iou, rle_to_mask

log = logging.getLogger(__name__)

TARGET_IOU = 0.85
MAX_CLICKS = 20
FIXED_BOX_SIDE = 62  # the middle of the demo world's small (28-44) and large (64-96) sides


def click_until_found(client, auth, item_id: int, target: np.ndarray) -> dict:
    """Click by the NoC protocol through POST /segment; the clicks, IoUs, times and last answer."""
    points, ious, times = [], [], []
    predicted = np.zeros_like(target)
    answer = None
    while len(points) < MAX_CLICKS:
        points.append(next_click(target, predicted))
        response = client.post(f"/api/items/{item_id}/segment", json={"points": points}, auth=auth)
        response.raise_for_status()
        answer = response.json()
        predicted = rle_to_mask(answer["mask"])
        ious.append(iou(predicted, target))
        times.append(answer["ms"])
        if ious[-1] >= TARGET_IOU:
            break
    return {"points": points, "ious": ious, "ms": times, "answer": answer}


def fixed_box_iou(target: np.ndarray, first_click) -> float:
    x, y, _ = first_click
    half = FIXED_BOX_SIDE / 2
    h, w = target.shape
    box = (max(0, x - half), max(0, y - half), min(w, x + half), min(h, y + half))
    return iou(box_mask(box, h, w), target)


def run_study(client, annotator_auth, targets: dict) -> dict:
    """Every item the annotator is given: each named shape clicked, added, mentioned, tied to its noun."""
    objects = []
    while True:
        response = client.get("/api/items/next", auth=annotator_auth)
        if response.status_code == 204:
            break
        item = response.json()
        mentioned, links = set(), set()
        for target, noun in targets[item["id"]]:
            clicks = click_until_found(client, annotator_auth, item["item_id"], target)
            added = client.post(f"/api/items/{item['item_id']}/regions", auth=annotator_auth,
                                json={"mask": clicks["answer"]["mask"],
                                      "prompts": {"points": clicks["points"]}}).json()
            mentioned.add(added["index"])
            links.add((noun, added["index"]))
            objects.append({"item": item["id"], "clicks": len(clicks["points"]), "ious": clicks["ious"],
                            "ms": clicks["ms"], "fixed_box_iou": fixed_box_iou(target, clicks["points"][0]),
                            "embedding_ms": clicks["answer"]["embedding_ms"],
                            "segmenter": clicks["answer"]["segmenter"], "fallback": clicks["answer"]["fallback"]})
        client.put(f"/api/items/{item['item_id']}/labels", auth=annotator_auth,
                   json={"incorrect_tokens": [], "mentioned_regions": sorted(mentioned),
                         "links": sorted(links), "status": "submitted"}).raise_for_status()
    return summary(objects)


def summary(objects: list[dict]) -> dict:
    reached = [o for o in objects if o["ious"][-1] >= TARGET_IOU]
    clicks = [o["clicks"] if o["ious"][-1] >= TARGET_IOU else MAX_CLICKS for o in objects]
    all_ms = [ms for o in objects for ms in o["ms"]]
    return {
        "objects": len(objects),
        "segmenter": objects[0]["segmenter"] if objects else None,
        "fallback": objects[0]["fallback"] if objects else None,
        "noc85_mean": float(np.mean(clicks)) if objects else None,
        "within_3_clicks": sum(o["clicks"] <= 3 for o in reached) / max(1, len(objects)),
        "reached_85": len(reached) / max(1, len(objects)),
        "first_click_iou_mean": float(np.mean([o["ious"][0] for o in objects])) if objects else None,
        "fixed_box_iou_mean": float(np.mean([o["fixed_box_iou"] for o in objects])) if objects else None,
        "fixed_box_reaches_85": sum(o["fixed_box_iou"] >= TARGET_IOU for o in objects) / max(1, len(objects)),
        "click_ms_p50": float(np.median(all_ms)) if all_ms else None,
        "click_ms_p90": float(np.percentile(all_ms, 90)) if all_ms else None,
        "embedding_ms_p50": float(np.median([o["embedding_ms"] for o in objects])) if objects else None,
        "per_object": objects,
    }


def serve(db_url: str, data: Path, segmenter: str):
    """`capscope serve` on a free loopback port, in a process of its own: (process, base URL)."""
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "CAPSCOPE_DATA_DIR": str(data), "CAPSCOPE_NO_SEED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "capscope.cli", "serve", "--db", db_url, "--port", str(port),
                                "--segmenter", segmenter], env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/api/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("capscope serve did not start")


def main(argv=None) -> int:
    import httpx

    from capscope.annotation.importer import ImportOptions, import_captokeneval
    from capscope.annotation.users import add_user
    from capscope.db import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--segmenter", default="classic")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path, targets = write_scenes(args.out, args.n, args.seed)
    db_url = f"sqlite:///{args.out / 'click_noc.db'}"
    store = Store(db_url)
    import_captokeneval(store, path, ImportOptions(dataset="click-noc", annotators_per_item=1))
    add_user(store, "clicker", "clicker-password")
    process, url = serve(db_url, args.out / "data", args.segmenter)
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            result = run_study(client, ("clicker", "clicker-password"), targets)
    finally:
        process.terminate()
        process.wait(timeout=30)
    (args.out / "click_noc.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "per_object"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# ---------------------------------------------------------------- the fallback on photos

PHOTOS = (  # scikit-image's bundled photos, with one positive click on an object each
    ("chelsea", "the cat", (200, 150)),
    ("coffee", "the cup", (300, 160)),
    ("astronaut", "the helmet", (440, 430)),
    ("rocket", "the rocket", (330, 180)),
)


def photo_figure(path: Path, segmenter=None) -> list[dict]:
    """One click on an object in each of scikit-image's photos, the fallback's mask over it:
    a picture for docs/ui.md, and each photo's embedding and click times."""
    import time

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image
    from skimage import data

    from capscope.metrics.click_segmenters import ClassicClickSegmenter

    segmenter = segmenter or ClassicClickSegmenter()
    figure, axes = plt.subplots(1, len(PHOTOS), figsize=(4 * len(PHOTOS), 3.6))
    rows = []
    for axis, (name, what, (x, y)) in zip(axes, PHOTOS):
        pixels = getattr(data, name)()
        image = Image.fromarray(pixels).convert("RGB")
        started = time.perf_counter()
        embedding = segmenter.embed(image)
        embedded = time.perf_counter()
        mask, _ = segmenter.predict(embedding, [(x, y, 1)])
        clicked = time.perf_counter()
        axis.imshow(image)
        axis.imshow(np.ma.masked_where(~mask, mask), alpha=0.5, cmap="winter", vmin=0, vmax=1)
        axis.plot([x], [y], "o", color="lime", markeredgecolor="white", markersize=9)
        axis.set_title(f"{name}: one click on {what}", fontsize=10)
        axis.axis("off")
        rows.append({"photo": name, "size": list(image.size), "embed_ms": (embedded - started) * 1000,
                     "click_ms": (clicked - embedded) * 1000, "mask_share": float(mask.mean())})
    figure.suptitle(f"{segmenter.name}: the click segmenter without SAM weights", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=64)
    plt.close(figure)
    return rows
