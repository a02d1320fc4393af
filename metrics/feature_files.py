"""Official InfoMetIC image-features files (.npz, docs/formats.md §5): read as
a row's image side, and written by `capscope features`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .encoder import ImageFeatures
from .regions import Region
from .row_errors import RowError


FEATURE_ARRAYS = ("feat", "bbox", "global_feat", "global_bbox", "clustered_bbox")


def read_features(path: Path) -> dict:
    """An official-format InfoMetIC image-features file (.npz)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            features = {k: data[k] for k in FEATURE_ARRAYS}
    except FileNotFoundError:
        raise RowError(f"features file not found: {path.name}") from None
    except KeyError as err:
        raise RowError(f"features file {path.name} lacks array {err}") from None
    except Exception as err:
        raise RowError(f"cannot read features file {path.name}: {type(err).__name__}") from None
    n = len(features["feat"])
    if features["bbox"].shape != (n, 4) or features["global_bbox"].shape != (4,):
        raise RowError(f"features file {path.name}: bbox must be N x 4 and global_bbox 4 values")
    kept = features["clustered_bbox"].astype(np.int64)
    if kept.size and (kept.min() < 0 or kept.max() >= n):
        raise RowError(f"features file {path.name}: clustered_bbox indexes outside its {n} regions")
    features["clustered_bbox"] = kept
    return features


def features_from_file(features: dict) -> ImageFeatures:
    kept = features["clustered_bbox"]
    width, height = float(features["global_bbox"][2]), float(features["global_bbox"][3])
    regions = [Region(tuple(float(v) for v in features["bbox"][i]), None, "features") for i in kept]
    feats = torch.from_numpy(np.asarray(features["feat"], dtype=np.float32)[kept]).reshape(len(kept), -1)
    return ImageFeatures(
        (width, height), regions, torch.from_numpy(np.asarray(features["global_feat"], dtype=np.float32)), feats,
    )


def write_features(path: Path, all_feats: torch.Tensor, all_boxes, global_feat: torch.Tensor, size, kept: list[int]) -> None:
    np.savez(
        path,
        feat=all_feats.numpy().astype(np.float32),
        bbox=np.asarray(all_boxes, dtype=np.float32).reshape(-1, 4),
        global_feat=global_feat.numpy().astype(np.float32),
        global_bbox=np.array([0, 0, size[0], size[1]], dtype=np.float32),
        clustered_bbox=np.asarray(kept, dtype=np.int64),
    )
