"""`capscope bench`'s seconds per region proposal of each region source, on
one demo-world scene drawn at 640 px."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from segment_anything import sam_model_registry

from capscope.bench.speed.timed_pairs import scene
from capscope.bench.speed.scoring_timings import synchronize
from capscope.metrics.loading import ModelUnavailable
from capscope.metrics.regions import PROPOSERS
from capscope.metrics.segmenters import import_ultralytics


def region_source_seconds(sources=("classic", "sam", "yolo", "fastsam", "mobilesam"), side: int = 640,
                          device: str = "cpu", pretrained: bool = True, repeats: int = 1) -> dict:
    """Seconds per proposal on one side x side image (the best of `repeats`
    after one warm-up). A source whose weights are not here, or every source
    when `pretrained` is False (a machine that must not try to download), is
    timed with randomly initialised weights of the same architecture (the
    network's cost does not depend on them; the number of masks, and so the
    post-processing, does)."""
    image = scene(np.random.default_rng(1), side)[0]
    out = {}
    with tempfile.TemporaryDirectory(prefix="capscope-bench-regions-") as tmp:
        for name in sources:
            proposer, weights = None, "pretrained"
            if pretrained or name == "classic":
                try:
                    proposer = PROPOSERS[name](device=device)
                except ModelUnavailable:
                    pass
            if proposer is None:
                checkpoint = random_checkpoint(name, Path(tmp))
                proposer, weights = PROPOSERS[name](checkpoint=checkpoint, device=device), "random"
            proposer.propose(image)  # warm-up
            times = []
            for _ in range(repeats):
                synchronize(device)
                start = time.perf_counter()
                regions = proposer.propose(image)
                synchronize(device)
                times.append(time.perf_counter() - start)
            out[name] = {"seconds": min(times), "regions": len(regions), "weights": weights}
    return out


def random_checkpoint(source: str, folder: Path) -> str:
    """A checkpoint of the source's real architecture with random weights."""
    torch.manual_seed(0)
    if source == "sam":
        path = folder / "sam_vit_b.pth"
        torch.save(sam_model_registry["vit_b"](checkpoint=None).state_dict(), path)
    elif source == "mobilesam":
        import_ultralytics()  # not a bare import: that would replace PIL's Image.open for the whole run
        from ultralytics.models.sam.build import build_mobile_sam

        path = folder / "mobile_sam.pt"
        torch.save(build_mobile_sam().state_dict(), path)
    elif source in ("yolo", "fastsam"):
        import_ultralytics()
        from ultralytics import YOLO

        path = folder / f"{source}.pt"
        YOLO("yolov8n.yaml" if source == "yolo" else "yolov8s-seg.yaml").save(str(path))
    else:
        raise ValueError(f"no random checkpoint for region source {source!r}")
    return str(path)
