"""`capscope demo-data`: scenes written out as images, CapTokenEval gold
labels (docs/formats.md §3) and a training file (docs/training-data.md)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from capscope.demo.demo_captions import Caption, make_caption, pollute
from capscope.demo.demo_regions import region_label, scene_regions
from capscope.demo.scenes import Scene, make_scene, scene_rng
from capscope.demo.shifts import shifted_pixels
from capscope.metrics.text import tokenize


def rle(mask: np.ndarray) -> dict:
    from pycocotools import mask as mask_utils

    encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in encoded["size"]], "counts": encoded["counts"].decode("ascii")}


def token_rows(caption: Caption) -> list[dict]:
    """spaCy tokens of the caption with gold labels: the swapped word of a
    polluted caption is "incorrect", other semantic tokens "correct",
    non-semantic tokens unlabelled."""
    wrong = caption.wrong_span()
    rows = []
    for token in tokenize(caption.text):
        row = token.to_dict()
        if not token.semantic:
            row["label"] = None
        else:
            row["label"] = "incorrect" if wrong == (token.start, token.end) else "correct"
        rows.append(row)
    return rows


def gold_item(item_id: str, image: str, scene: Scene, caption: Caption, regions, masks) -> dict:
    region_rows = []
    for region in regions:
        mask = None if region.shape is None else rle(masks[region.shape])
        region_rows.append({
            "box": [int(v) for v in region.box],
            "mask": mask,
            "label": region_label(region, caption, scene),
        })
    return {"id": item_id, "image": image, "caption": caption.text,
            "tokens": token_rows(caption), "regions": region_rows}


def phrase_boxes(caption: Caption, scene: Scene) -> list[dict]:
    """Grounding of a clean caption: each phrase ("a small red circle", article
    included as in Flickr30k Entities) with the box of its shape."""
    spans = caption.spans()
    rows = []
    for p, shape_index in enumerate(caption.referents):
        indices = [i for i, w in enumerate(caption.words) if w.phrase == p]
        start, end = spans[indices[0]][0], spans[indices[-1]][1]
        rows.append({"box": [int(v) for v in scene.shapes[shape_index].box],
                     "phrase": caption.text[start:end], "start": start, "end": end})
    return rows


def training_row(scene_id: str, image: str, scene: Scene, clean: Caption, polluted: Caption, regions) -> dict:
    start, end = polluted.wrong_span()
    return {
        "id": scene_id,
        "image": image,
        "caption": clean.text,
        "boxes": phrase_boxes(clean, scene),
        "negatives": [{"caption": polluted.text,
                       "wrong": [{"start": start, "end": end, "text": polluted.text[start:end]}]}],
        "regions": [{"box": [int(v) for v in r.box]} for r in regions],
    }


def demo_scene(seed: int, index: int):
    """Scene `index` of the data set made with `seed`: (scene, clean, polluted, regions)."""
    rng = scene_rng(seed, index)
    scene = make_scene(rng)
    clean = make_caption(scene, rng)
    polluted = pollute(clean, scene, rng)
    regions = scene_regions(scene, rng)
    return scene, clean, polluted, regions


def write_demo_data(out: Path, n: int, seed: int, progress: bool = True, shift: str | None = None) -> dict:
    """`n` scenes (made with `seed`) drawn under an appearance `shift` (demo/shifts.py) when given."""
    from tqdm import tqdm

    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    counts = {"scenes": 0, "gold_items": 0, "training_rows": 0}
    with open(out / "captokeneval.jsonl", "w") as gold, open(out / "train.jsonl", "w") as train:
        for index in tqdm(range(n), desc="demo scenes", disable=not progress, unit="scene"):
            scene_id = f"scene{index:05d}"
            image = f"images/{scene_id}.png"
            scene, clean, polluted, regions = demo_scene(seed, index)
            pixels, masks = scene.render()
            Image.fromarray(shifted_pixels(shift, scene, pixels, masks, seed)).save(out / image)
            for suffix, caption in (("clean", clean), ("polluted", polluted)):
                item = gold_item(f"{scene_id}-{suffix}", image, scene, caption, regions, masks)
                item["twin"] = f"{scene_id}-{'polluted' if suffix == 'clean' else 'clean'}"
                item["polluted"] = suffix == "polluted"
                gold.write(json.dumps(item) + "\n")
            train.write(json.dumps(training_row(scene_id, image, scene, clean, polluted, regions)) + "\n")
            counts["scenes"] += 1
            counts["gold_items"] += 2
            counts["training_rows"] += 1
    return counts
