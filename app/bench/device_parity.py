"""Does a GPU give the CPU's numbers? Every metric scores the same pairs on two
devices (by default the CPU in float32 and CUDA), and the rows are compared.

    python -m capscope.bench.device_parity --pairs 36 --json

Two sets of weights are tried: random ones in the real architectures (ViT-B-32
for CLIP-S, PAC-S, InfoCLIP, HICE-S and CLIP4DM; the released InfoMetIC layout
on ViT-B-32-quickgelu), made on the spot as `capscope bench` makes them, and
capscope's trained demo model, whose verdicts mean something. Per metric it
reports the largest gap of the global scores, of the token and region scores,
how many word and region verdicts flipped, and whether every torch module the
metric holds sits on the device asked for (nothing fell back to the CPU).

Tolerances: 1e-4 absolute on every score; CLIP4DM's word attributions, which
are gradients summed over layers, 1e-3 relative to the row's largest
attribution. The exit code is 1 when any metric is outside them.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import open_clip
import torch

from capscope.bench.speed import CLIP_MODEL, make_pairs, model_files
from capscope.metrics.loading import demo_model_path, resolve_device
from capscope.metrics.scorer import Scorer

SCORE_TOLERANCE = 1e-4
ATTRIBUTION_TOLERANCE = 1e-3  # relative to the row's largest |attribution|
RANDOM_METRICS = ("clip-s", "pac-s", "infoclip", "infometic", "hice", "clip4dm")
DEMO_METRICS = ("clip-s", "infoclip", "infometic", "hice", "clip4dm")  # PAC-S has no demo weights


def random_weight_files(folder: Path, metrics=RANDOM_METRICS) -> dict[str, dict]:
    """Per metric, the Scorer options naming random-weight checkpoints in `folder`."""
    files = model_files(folder, tuple(m for m in metrics if m in ("clip-s", "infometic", "hice", "clip4dm")))
    if "infoclip" in metrics:
        files["infoclip"] = {"clip_model": CLIP_MODEL, "clip_pretrained": str(folder / "vit-b-32.pt")}
        if not (folder / "vit-b-32.pt").is_file():
            torch.manual_seed(0)
            torch.save(open_clip.create_model(CLIP_MODEL, pretrained=None).state_dict(), folder / "vit-b-32.pt")
    if "pac-s" in metrics:
        torch.manual_seed(1)
        path = folder / "pacs_vit-b-32.pth"
        torch.save(open_clip.create_model("ViT-B-32-quickgelu", pretrained=None).state_dict(), path)
        files["pac-s"] = {"pacs_checkpoint": str(path)}
    return files


def torch_modules(root, depth: int = 4) -> list[torch.nn.Module]:
    """The torch modules reachable from `root` through attributes, lists and dicts."""
    found, seen = [], set()

    def walk(obj, level):
        if id(obj) in seen or level > depth:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            found.append(obj)
            return
        if isinstance(obj, dict):
            children = obj.values()
        elif isinstance(obj, (list, tuple)):
            children = obj
        elif type(obj).__module__.startswith("capscope."):
            children = vars(obj).values() if hasattr(obj, "__dict__") else ()
        else:
            return
        for child in children:
            walk(child, level + 1)

    walk(root, 0)
    return found


def off_device(scorer, device: torch.device) -> tuple[list[str], int]:
    """Names of parameters and buffers of the scorer's models that are not on
    `device`, and how many tensors were looked at."""
    stray, checked = [], 0
    for name, metric in scorer.metrics.items():
        for module in torch_modules(metric):
            tensors = [*module.named_parameters(), *module.named_buffers()]
            checked += len(tensors)
            for tensor_name, tensor in tensors:
                if tensor.device.type != device.type:
                    stray.append(f"{name}: {type(module).__name__}.{tensor_name} on {tensor.device}")
    return stray, checked


def row_gaps(metric: str, base: list[dict], other: list[dict]) -> dict:
    """Largest gaps between two devices' rows of one metric."""
    gaps = {"score": 0.0, "token": 0.0, "region": 0.0, "attribution_relative": 0.0,
            "verdicts": 0, "verdicts_flipped": 0}
    for a, b in zip(base, other):
        a, b = a["metrics"][metric], b["metrics"][metric]
        for key, value in a["scores"].items():
            gaps["score"] = max(gaps["score"], abs(b["scores"][key] - value))
        tokens = [(x, y) for x, y in zip(a.get("token_scores") or [], b.get("token_scores") or []) if x is not None]
        for x, y in tokens:
            gaps["token"] = max(gaps["token"], abs(x - y))
        if tokens:
            largest = max(abs(x) for x, _ in tokens) or 1.0
            gaps["attribution_relative"] = max(gaps["attribution_relative"],
                                               max(abs(x - y) for x, y in tokens) / largest)
        for x, y in zip(a.get("region_scores") or [], b.get("region_scores") or []):
            gaps["region"] = max(gaps["region"], abs(x - y))
        verdicts = list(zip(a.get("token_correct") or [], b.get("token_correct") or []))
        verdicts += list(zip(a.get("region_mentioned") or [], b.get("region_mentioned") or []))
        judged = [(x, y) for x, y in verdicts if x is not None]
        gaps["verdicts"] += len(judged)
        gaps["verdicts_flipped"] += sum(x != y for x, y in judged)
    return gaps


def within_tolerance(metric: str, gaps: dict) -> bool:
    if gaps["score"] > SCORE_TOLERANCE or gaps["region"] > SCORE_TOLERANCE:
        return False
    if metric == "clip4dm":
        return gaps["attribution_relative"] <= ATTRIBUTION_TOLERANCE
    return gaps["token"] <= SCORE_TOLERANCE


def compare(base_device: str = "cpu", device: str = "cuda", n_pairs: int = 36, weights=("random", "demo"),
            metrics=RANDOM_METRICS, batch_size: int = 12) -> dict:
    """Every metric's rows on `base_device` (float32) and `device`, compared."""
    target = resolve_device(device)
    pairs = make_pairs(n_pairs, seed=3)
    name = torch.cuda.get_device_name(target) if target.type == "cuda" else target.type
    out: dict = {"base_device": base_device, "device": f"{target} ({name})", "pairs": n_pairs,
                 "tolerance": {"score": SCORE_TOLERANCE, "clip4dm_attribution_relative": ATTRIBUTION_TOLERANCE},
                 "weights": {}}
    with tempfile.TemporaryDirectory(prefix="capscope-parity-") as tmp:
        for kind in weights:
            if kind == "demo" and not demo_model_path().is_file():
                continue
            names = [m for m in metrics if kind == "random" or m in DEMO_METRICS]
            files = random_weight_files(Path(tmp), names) if kind == "random" else {}
            out["weights"][kind] = {}
            for name in names:
                rows, stray = {}, []
                for dev in (base_device, device):
                    scorer = Scorer([name], device=dev, regions="given", **files.get(name, {}))
                    rows[dev] = [r for i in range(0, n_pairs, batch_size)
                                 for r in scorer.score_batch(pairs[i : i + batch_size])]
                    if dev == device:
                        stray, checked = off_device(scorer, target)
                        row_device = rows[dev][0]["model"]["device"]
                gaps = row_gaps(name, rows[base_device], rows[device])
                gaps.update(row_device=row_device, off_device=stray, tensors_checked=checked,
                            ok=within_tolerance(name, gaps) and not stray and checked > 0)
                out["weights"][kind][name] = gaps
    out["ok"] = all(g["ok"] for per_kind in out["weights"].values() for g in per_kind.values())
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capscope.bench.device_parity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=36, help="image-caption pairs scored on both devices (default 36)")
    parser.add_argument("--device", default="cuda", help="the device checked (default cuda)")
    parser.add_argument("--base-device", default="cpu", help="the device it is checked against (default cpu)")
    parser.add_argument("--weights", default="random,demo", help="random, demo or both (default random,demo)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = compare(args.base_device, args.device, args.pairs, tuple(w for w in args.weights.split(",") if w))
    if args.json:
        print(json.dumps(result))
    else:
        for kind, per_metric in result["weights"].items():
            for name, g in per_metric.items():
                print(f"{kind} {name}: score {g['score']:.1e}, token {g['token']:.1e} "
                      f"(relative {g['attribution_relative']:.1e}), region {g['region']:.1e}, "
                      f"{g['verdicts_flipped']} of {g['verdicts']} verdicts flipped, "
                      f"{len(g['off_device'])} of {g['tensors_checked']} tensors off {result['device']}: {'ok' if g['ok'] else 'FAILED'}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
