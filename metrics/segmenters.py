"""Region proposals from learned models: SAM (segment-anything's automatic mask
generator), an ultralytics YOLO detector (boxes, the bottom-up style), and
FastSAM / MobileSAM through ultralytics (the fast segment-everything route that
HICE-S takes).

Weights are found in this order: the constructor's `checkpoint`, the
component's environment variable, capscope's cache folder (`CAPSCOPE_CACHE`,
default ~/.cache/capscope); a file missing from the cache is downloaded from its
official address when the machine is online. Offline, a missing file raises
`ModelUnavailable` with one line saying what was looked for and how to point to
a local copy.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from capscope.common.errors import first_line

from .loading import ModelUnavailable, cache_dir, read_checkpoint
from .regions import MAX_CANDIDATES, Region, clip_box, mask_to_box

log = logging.getLogger(__name__)

SAM_URLS = {
    "vit_b": "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_b_01ec64.pth",
    "vit_l": "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_l_0b3195.pth",
    "vit_h": "https://dl.fbaipublicfiles.com/segment_anything/sam_vit_h_4b8939.pth",
}
SAM_DEPTHS = {12: "vit_b", 24: "vit_l", 32: "vit_h"}


# ---------------------------------------------------------------- finding weights

def download(url: str, target: Path, component: str, hint: str) -> Path:
    """`url` into `target` whole (a .part file renamed at the end), or ModelUnavailable with the hint."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    try:
        torch.hub.download_url_to_file(url, str(partial), progress=False)
        partial.replace(target)
    except Exception as err:  # offline, proxy, disk
        partial.unlink(missing_ok=True)
        raise ModelUnavailable(
            f"{component}: {target.name} is not in {target.parent} and the download from {url} failed "
            f"({type(err).__name__}); {hint}"
        ) from None
    return target


def _explicit_path(checkpoint, variable: str) -> Path | None:
    """A file the user named (argument or environment variable), or None."""
    value = checkpoint or os.environ.get(variable)
    return Path(value) if value else None


def sam_checkpoint(model_type: str = "vit_b", checkpoint=None) -> Path:
    hint = "set CAPSCOPE_SAM_CHECKPOINT to a local SAM checkpoint (sam_vit_b_01ec64.pth)"
    given = _explicit_path(checkpoint, "CAPSCOPE_SAM_CHECKPOINT")
    if given is not None:
        if not given.is_file():
            raise ModelUnavailable(f"SAM: checkpoint {given} not found ({hint})")
        return given
    if model_type not in SAM_URLS:
        raise ModelUnavailable(f"SAM: unknown model type {model_type!r}; choose from {', '.join(SAM_URLS)}")
    url = SAM_URLS[model_type]
    target = cache_dir() / "sam" / url.rsplit("/", 1)[-1]
    return target if target.is_file() else download(url, target, "SAM", hint)


def ultralytics_weights(default: str, checkpoint, variable: str, component: str) -> Path:
    """A local file, or an ultralytics release asset by name kept in capscope's cache."""
    hint = f"set {variable} to a local weights file"
    value = str(checkpoint or os.environ.get(variable) or default)
    path = Path(value)
    if path.is_file():
        return path
    if os.sep in value or path.parent != Path("."):
        raise ModelUnavailable(f"{component}: weights file {value} not found ({hint})")
    target = cache_dir() / "ultralytics" / value
    if target.is_file():
        return target
    return _download_asset(value, target, component, hint)


def _download_asset(name: str, target: Path, component: str, hint: str) -> Path:
    import_ultralytics()
    from ultralytics.utils.downloads import attempt_download_asset

    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        attempt_download_asset(str(target))
    except Exception as err:
        log.debug("ultralytics download of %s failed: %s", name, err)
    if not target.is_file():
        raise ModelUnavailable(
            f"{component}: {name} is not in {target.parent} and could not be downloaded "
            f"from the ultralytics releases; {hint}"
        )
    return target


# ---------------------------------------------------------------- SAM

def load_sam(model_type: str = "vit_b", checkpoint=None, device: str = "cpu"):
    """A segment-anything model; its size (vit_b/l/h) is read from the checkpoint."""
    from segment_anything import sam_model_registry

    path = sam_checkpoint(model_type, checkpoint)
    state = read_checkpoint(path, "SAM", "CAPSCOPE_SAM_CHECKPOINT", weights_only=True)
    depth = len({k.split(".")[2] for k in state if k.startswith("image_encoder.blocks.")})
    kind = SAM_DEPTHS.get(depth)
    if kind is None:
        raise ModelUnavailable(f"SAM: {path} is not a SAM checkpoint (image encoder with {depth} blocks)")
    model = sam_model_registry[kind](checkpoint=None)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ModelUnavailable(f"SAM: {path} does not fit SAM {kind}: {first_line(err)}") from None
    return model.to(device).eval(), kind


class ReducedSideEncoder(torch.nn.Module):
    """SAM's image encoder run at `side` px instead of 1024 (absolute positions
    interpolated; SAM interpolates its relative positions itself), its output
    scaled back to the 64 x 64 grid the mask decoder expects. About
    (1024/side)^2 times less encoder work, at some cost in mask detail: a CPU
    option, off by default."""

    def __init__(self, encoder: torch.nn.Module, side: int):
        super().__init__()
        self.encoder, self.side, self.img_size = encoder, side, encoder.img_size
        grid = side // 16
        pos = encoder.pos_embed.detach().permute(0, 3, 1, 2)
        pos = torch.nn.functional.interpolate(pos, size=(grid, grid), mode="bicubic", align_corners=False)
        self.register_buffer("small_pos", pos.permute(0, 2, 3, 1).contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        full_grid = x.shape[-1] // 16
        x = torch.nn.functional.interpolate(x, size=(self.side, self.side), mode="bilinear", align_corners=False)
        original, self.encoder.pos_embed = self.encoder.pos_embed, torch.nn.Parameter(self.small_pos, requires_grad=False)
        try:
            feats = self.encoder(x)
        finally:
            self.encoder.pos_embed = original
        return torch.nn.functional.interpolate(feats, size=(full_grid, full_grid), mode="bilinear", align_corners=False)


class SamProposer:
    """SAM in segment-everything mode. CPU-friendly defaults: an 8 x 8 point grid
    (64 prompts instead of 1,024) and the image shrunk to `work_side` before the
    masks are made (the mask post-processing cost grows with the image), masks
    scaled back to the full image. SAM's encoder sees 1024 px unless
    `encoder_side` (or CAPSCOPE_SAM_ENCODER_SIDE) asks for less."""

    name = "sam"

    def __init__(self, model_type: str | None = None, checkpoint=None, device: str = "cpu",
                 points_per_side: int = 8, pred_iou_thresh: float = 0.8,
                 stability_score_thresh: float = 0.85, work_side: int = 512, min_area_frac: float = 0.0005,
                 encoder_side: int | None = None):
        from segment_anything import SamAutomaticMaskGenerator

        model_type = model_type or os.environ.get("CAPSCOPE_SAM_MODEL", "vit_b")
        self.model, self.kind = load_sam(model_type, checkpoint, device)
        encoder_side = int(encoder_side or os.environ.get("CAPSCOPE_SAM_ENCODER_SIDE", 1024))
        if encoder_side % 16 or not 64 <= encoder_side <= 1024:
            raise ValueError(f"SAM encoder side must be a multiple of 16 in 64..1024, got {encoder_side}")
        if encoder_side != 1024:
            self.model.image_encoder = ReducedSideEncoder(self.model.image_encoder, encoder_side).to(device)
        self.generator = SamAutomaticMaskGenerator(
            self.model, points_per_side=points_per_side, points_per_batch=64,
            pred_iou_thresh=pred_iou_thresh, stability_score_thresh=stability_score_thresh,
        )
        self.work_side, self.min_area_frac = work_side, min_area_frac

    @torch.inference_mode()
    def propose(self, image: Image.Image) -> list[Region]:
        small, factor = _shrink(image.convert("RGB"), self.work_side)
        records = self.generator.generate(np.asarray(small))
        masks = [r["segmentation"] for r in records]
        scores = [float(r["predicted_iou"]) * float(r["stability_score"]) for r in records]
        return _mask_regions(masks, scores, image.size, self.name, self.min_area_frac)


# ---------------------------------------------------------------- ultralytics

# ultralytics is AGPL-3.0: an extra, so that the default install holds no AGPL code
ULTRALYTICS_MISSING = ('regions yolo, fastsam and mobilesam need ultralytics (AGPL-3.0), which capscope does not '
                       'install by default: pip install "capscope[yolo]", or use --regions classic or sam')

def import_ultralytics():
    """ultralytics, without its side effects on everyone else: it would pip-install
    missing packages at run time and replaces PIL's `Image.open` process-wide
    (a corrupt image then raises ModuleNotFoundError instead of PIL's error)."""
    os.environ.setdefault("YOLO_AUTOINSTALL", "false")
    open_before = Image.open
    try:
        import ultralytics
    except ImportError:
        raise ModelUnavailable(ULTRALYTICS_MISSING) from None

    Image.open = open_before
    return ultralytics


def _load_ultralytics(cls_name: str, path: Path, component: str):
    ultralytics = import_ultralytics()
    try:
        return getattr(ultralytics, cls_name)(str(path))
    except Exception as err:
        raise ModelUnavailable(f"{component}: cannot load {path} ({type(err).__name__}: {str(err)[:120]})") from None


class YoloProposer:
    """Detector boxes and confidences (no masks) from an ultralytics YOLO model."""

    name = "yolo"
    default_weights = "yolov8n.pt"

    def __init__(self, checkpoint=None, device: str = "cpu", conf: float = 0.05, imgsz: int = 640):
        path = ultralytics_weights(self.default_weights, checkpoint, "CAPSCOPE_YOLO_WEIGHTS", "YOLO")
        self.model = _load_ultralytics("YOLO", path, "YOLO")
        self.device, self.conf, self.imgsz = device, conf, imgsz

    def propose(self, image: Image.Image) -> list[Region]:
        result = self.model.predict(
            image.convert("RGB"), conf=self.conf, imgsz=self.imgsz, device=self.device,
            max_det=MAX_CANDIDATES, verbose=False,
        )[0]
        boxes = result.boxes.xyxy.cpu().numpy()
        confs = result.boxes.conf.cpu().numpy()
        regions = []
        for box, conf in zip(boxes, confs):
            try:
                regions.append(Region(clip_box(box, *image.size), float(conf), self.name))
            except ValueError:
                continue
        return sorted(regions, key=lambda r: -r.confidence)[:MAX_CANDIDATES]


class FastSamProposer:
    """FastSAM (a YOLOv8-seg network trained to segment everything): masks with
    their detection confidences, at the image's own resolution."""

    name = "fastsam"
    default_weights = "FastSAM-s.pt"

    def __init__(self, checkpoint=None, device: str = "cpu", conf: float = 0.25, iou: float = 0.7,
                 imgsz: int = 640, min_area_frac: float = 0.0005):
        path = ultralytics_weights(self.default_weights, checkpoint, "CAPSCOPE_FASTSAM_WEIGHTS", "FastSAM")
        self.model = _load_ultralytics("FastSAM", path, "FastSAM")
        self.device, self.conf, self.iou, self.imgsz = device, conf, iou, imgsz
        self.min_area_frac = min_area_frac

    def propose(self, image: Image.Image) -> list[Region]:
        result = self.model.predict(
            image.convert("RGB"), conf=self.conf, iou=self.iou, imgsz=self.imgsz, device=self.device,
            retina_masks=True, max_det=MAX_CANDIDATES, verbose=False,
        )[0]
        if result.masks is None:
            return []
        masks = result.masks.data.cpu().numpy() > 0.5
        confs = result.boxes.conf.cpu().numpy().tolist()
        return _mask_regions(list(masks), confs, image.size, self.name, self.min_area_frac)


class MobileSamProposer:
    """MobileSAM through ultralytics' SAM in segment-everything mode (no prompts):
    a grid of `points_per_side` x `points_per_side` point prompts over the image
    (8 as for SAM here; ultralytics' default is 32: 16 times the prompts),
    masks kept above `conf_thres` (predicted IoU) and `stability_score_thresh`,
    and, after NMS, above `conf` (ultralytics' SAM default 0.25)."""

    name = "mobilesam"
    default_weights = "mobile_sam.pt"

    def __init__(self, checkpoint=None, device: str = "cpu", points_per_side: int = 8, imgsz: int = 1024,
                 conf_thres: float = 0.88, stability_score_thresh: float = 0.95, conf: float = 0.25,
                 min_area_frac: float = 0.0005):
        path = ultralytics_weights(self.default_weights, checkpoint, "CAPSCOPE_MOBILESAM_WEIGHTS", "MobileSAM")
        if not path.name.endswith("mobile_sam.pt"):
            raise ModelUnavailable(f"MobileSAM: ultralytics recognises MobileSAM weights by the name "
                                   f"'*mobile_sam.pt'; rename {path.name}")
        sam = _load_ultralytics("SAM", path, "MobileSAM")
        # SAM.predict() takes no segment-everything settings (they are not YOLO arguments):
        # its predictor, called directly, passes them on to Predictor.generate
        from ultralytics.models.sam import Predictor

        self.predictor = Predictor(overrides={"task": "segment", "mode": "predict", "imgsz": imgsz, "device": device,
                                              "conf": conf,
                                              "retina_masks": True, "verbose": False, "save": False})
        self.predictor.setup_model(model=sam.model, verbose=False)
        # ultralytics calls the number of points per side `points_stride`
        self.everything = {"points_stride": points_per_side, "conf_thres": conf_thres,
                           "stability_score_thresh": stability_score_thresh}
        self.min_area_frac = min_area_frac

    def propose(self, image: Image.Image) -> list[Region]:
        result = self.predictor(source=image.convert("RGB"), stream=False, **self.everything)[0]
        if result.masks is None:
            return []
        masks = result.masks.data.cpu().numpy() > 0.5
        confs = result.boxes.conf.cpu().numpy().tolist() if result.boxes is not None else [None] * len(masks)
        return _mask_regions(list(masks), confs, image.size, self.name, self.min_area_frac)


# ---------------------------------------------------------------- helpers

def _shrink(image: Image.Image, side: int) -> tuple[Image.Image, float]:
    factor = min(1.0, side / max(image.size))
    if factor >= 1.0:
        return image, 1.0
    size = (max(1, round(image.width * factor)), max(1, round(image.height * factor)))
    return image.resize(size, Image.BILINEAR), factor


def _mask_regions(masks, scores, size: tuple[int, int], source: str, min_area_frac: float) -> list[Region]:
    """Regions from H x W boolean masks of any resolution, scaled to `size` (W, H)."""
    width, height = size
    regions = []
    for mask, score in zip(masks, scores):
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (height, width):
            mask = np.asarray(Image.fromarray(mask).resize((width, height), Image.NEAREST))
        if mask.sum() < max(1, min_area_frac * width * height):
            continue
        regions.append(Region(mask_to_box(mask), None if score is None else float(score), source, mask))
    regions.sort(key=lambda r: -(r.confidence or 0.0))
    return regions[:MAX_CANDIDATES]


# ---------------------------------------------------------------- `capscope models`

def component_rows() -> list[dict]:
    """The region proposers' (and Alpha-CLIP's) rows of `capscope models` (see inventory.components)."""
    sam_type = os.environ.get("CAPSCOPE_SAM_MODEL", "vit_b")
    sam_file = os.environ.get("CAPSCOPE_SAM_CHECKPOINT") or cache_dir() / "sam" / SAM_URLS.get(sam_type, SAM_URLS["vit_b"]).rsplit("/", 1)[-1]
    rows = [{
        "component": "SAM", "loads": f"segment-anything {sam_type} (--regions sam)",
        "from": f"{sam_file} ($CAPSCOPE_SAM_CHECKPOINT, $CAPSCOPE_SAM_MODEL)", "present": Path(sam_file).is_file(),
        "get": f"downloaded on first use from {SAM_URLS.get(sam_type, SAM_URLS['vit_b'])}",
    }]
    for component, variable, default, flag in (
        ("YOLO", "CAPSCOPE_YOLO_WEIGHTS", YoloProposer.default_weights, "yolo"),
        ("FastSAM", "CAPSCOPE_FASTSAM_WEIGHTS", FastSamProposer.default_weights, "fastsam"),
        ("MobileSAM", "CAPSCOPE_MOBILESAM_WEIGHTS", MobileSamProposer.default_weights, "mobilesam"),
    ):
        value = os.environ.get(variable) or str(cache_dir() / "ultralytics" / default)
        rows.append({
            "component": component, "loads": f"ultralytics {Path(value).name} (--regions {flag})",
            "from": f"{value} (${variable})", "present": Path(value).is_file(),
            "get": "downloaded on first use from the ultralytics releases",
        })
    alpha = os.environ.get("CAPSCOPE_ALPHA_CLIP_CHECKPOINT")
    rows.append({
        "component": "Alpha-CLIP", "loads": "Alpha-CLIP visual checkpoint for hice (else masked crops)",
        "from": f"{alpha or 'not set'} ($CAPSCOPE_ALPHA_CLIP_CHECKPOINT)", "present": bool(alpha) and Path(alpha).is_file(),
        "get": "download e.g. clip_l14_grit20m_fultune_2xe.pth from the Alpha-CLIP model zoo; use --clip-model ViT-L-14 --clip-pretrained openai",
    })
    return rows

