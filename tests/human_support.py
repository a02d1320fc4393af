"""Small human-judgement files in the public layouts, built from demo scenes."""
from __future__ import annotations

import json
from pathlib import Path


def write_foil_file(folder: Path, n: int = 4, seed: int = 9) -> Path:
    """A FOIL-COCO test file (`foilv1.0_test_2017.json`, `images/`): each scene's
    clean caption and its polluted twin under one caption id, the foil word named."""
    from capscope.demo.dataset import demo_scene

    (folder / "images").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(n):
        scene, clean, polluted, _ = demo_scene(seed, i)
        name = f"COCO_val2014_{i:012d}.jpg"
        scene.image().save(folder / "images" / name)
        images.append({"id": i, "file_name": name})
        annotations += [{"id": 100 + i, "image_id": i, "caption": clean.text, "foil": False},
                        {"id": 100 + i, "image_id": i, "caption": polluted.text, "foil": True,
                         "foil_word": polluted.words[polluted.wrong_word].text,
                         "target_word": clean.words[polluted.wrong_word].text}]
    path = folder / "foilv1.0_test_2017.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations}))
    return path
