"""SAM, YOLO, FastSAM and MobileSAM region sources: checkpoints saved from randomly
initialised real architectures, loaded through the path a user's download takes."""
import numpy as np
import pytest
import torch
from PIL import Image

from capscope.metrics import segmenters
from capscope.metrics.loading import ModelUnavailable
from capscope.metrics.regions import PROPOSERS, Region, mask_to_rle, rle_to_mask, select_regions


@pytest.fixture(scope="module")
def image():
    rng = np.random.default_rng(0)
    pixels = np.full((72, 96, 3), 225, dtype=np.uint8)
    pixels[10:40, 10:40] = (220, 30, 30)
    pixels[30:65, 50:90] = (40, 70, 220)
    return Image.fromarray(np.clip(pixels + rng.normal(0, 8, pixels.shape), 0, 255).astype(np.uint8))


def check_regions(regions, image, with_masks):
    assert regions, "no regions"
    assert len(regions) <= 100
    for region in regions:
        assert isinstance(region, Region)
        x0, y0, x1, y1 = region.box
        assert 0 <= x0 < x1 <= image.width and 0 <= y0 < y1 <= image.height
        assert isinstance(region.confidence, float)
        if with_masks:
            assert region.mask.shape == (image.height, image.width) and region.mask.dtype == bool
            assert region.mask.any()
    kept = select_regions(regions, max_regions=3)
    assert 1 <= len(kept) <= 3


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("capscope-cache")


@pytest.mark.slow
def test_sam_vit_b_from_the_cache_folder(cache, image, monkeypatch):
    from segment_anything import sam_model_registry

    torch.manual_seed(0)
    target = cache / "sam" / "sam_vit_b_01ec64.pth"  # where the official download lands
    target.parent.mkdir(parents=True)
    torch.save(sam_model_registry["vit_b"](checkpoint=None).state_dict(), target)
    monkeypatch.setenv("CAPSCOPE_CACHE", str(cache))
    monkeypatch.delenv("CAPSCOPE_SAM_CHECKPOINT", raising=False)
    monkeypatch.setattr(segmenters, "download", lambda *a: pytest.fail("must not download what is cached"))
    # random weights score every mask low: let them all through; a 256 px encoder keeps this test short
    proposer = PROPOSERS["sam"](points_per_side=2, pred_iou_thresh=0.0, stability_score_thresh=0.0, encoder_side=256)
    assert proposer.kind == "vit_b"
    check_regions(proposer.propose(image), image, with_masks=True)


def test_sam_offline_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path))
    monkeypatch.delenv("CAPSCOPE_SAM_CHECKPOINT", raising=False)

    def offline(url, dst, progress):
        raise OSError("network unreachable")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    with pytest.raises(ModelUnavailable) as err:
        segmenters.sam_checkpoint("vit_b")
    message = str(err.value)
    assert "\n" not in message and "sam_vit_b_01ec64.pth" in message and "CAPSCOPE_SAM_CHECKPOINT" in message
    assert not list(tmp_path.rglob("*.part"))
    monkeypatch.setenv("CAPSCOPE_SAM_CHECKPOINT", str(tmp_path / "missing.pth"))
    with pytest.raises(ModelUnavailable, match="missing.pth"):
        segmenters.sam_checkpoint()


@pytest.fixture
def ultralytics():
    """ultralytics imported as capscope imports it: PIL's `Image.open` left as it was."""
    module = segmenters.import_ultralytics()
    assert Image.open.__module__ == "PIL.Image"  # ultralytics' own import replaces it process-wide
    return module


def test_yolo_weights_by_environment_variable(tmp_path, image, monkeypatch, ultralytics):
    from ultralytics import YOLO

    torch.manual_seed(0)
    path = tmp_path / "yolov8n.pt"
    YOLO("yolov8n.yaml").save(str(path))
    monkeypatch.setenv("CAPSCOPE_YOLO_WEIGHTS", str(path))
    proposer = PROPOSERS["yolo"](conf=0.0, imgsz=96)  # random weights: every score is tiny
    check_regions(proposer.propose(image), image, with_masks=False)


def test_fastsam_weights_from_the_cache_folder(tmp_path, image, monkeypatch, ultralytics):
    from ultralytics import YOLO

    torch.manual_seed(0)
    target = tmp_path / "ultralytics" / "FastSAM-s.pt"
    target.parent.mkdir()
    YOLO("yolov8n-seg.yaml").save(str(target))  # FastSAM is a YOLOv8-seg network
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path))
    monkeypatch.delenv("CAPSCOPE_FASTSAM_WEIGHTS", raising=False)
    proposer = PROPOSERS["fastsam"](conf=0.0, imgsz=96)
    check_regions(proposer.propose(image), image, with_masks=True)


def test_mobilesam_weights_from_the_cache_folder(tmp_path, image, monkeypatch, ultralytics):
    from ultralytics.models.sam.build import build_mobile_sam

    torch.manual_seed(0)
    target = tmp_path / "ultralytics" / "mobile_sam.pt"  # the name ultralytics' download uses
    target.parent.mkdir()
    torch.save(build_mobile_sam().state_dict(), target)
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path))
    monkeypatch.delenv("CAPSCOPE_MOBILESAM_WEIGHTS", raising=False)
    # random weights predict low IoU: let every mask through; a coarse grid at 256 px keeps this short
    proposer = PROPOSERS["mobilesam"](points_per_side=4, imgsz=256, conf_thres=-1.0, stability_score_thresh=-1.0, conf=0.0)
    check_regions(proposer.propose(image), image, with_masks=True)


def test_ultralytics_offline_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path))
    monkeypatch.setenv("CAPSCOPE_YOLO_WEIGHTS", str(tmp_path / "nope" / "yolo.pt"))
    with pytest.raises(ModelUnavailable) as err:
        PROPOSERS["yolo"]()
    assert "\n" not in str(err.value) and "CAPSCOPE_YOLO_WEIGHTS" in str(err.value)
    monkeypatch.delenv("CAPSCOPE_FASTSAM_WEIGHTS", raising=False)
    monkeypatch.setattr(segmenters, "_download_asset", lambda name, target, c, hint: (_ for _ in ()).throw(
        ModelUnavailable(f"{c}: {name} is not in {target.parent} and could not be downloaded; {hint}")))
    with pytest.raises(ModelUnavailable, match="FastSAM-s.pt.*CAPSCOPE_FASTSAM_WEIGHTS"):
        PROPOSERS["fastsam"]()


def test_without_ultralytics_the_region_sources_say_how_to_get_it(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ultralytics(name, *args, **kwargs):
        if name == "ultralytics" or name.startswith("ultralytics."):
            raise ImportError("No module named 'ultralytics'")
        return real_import(name, *args, **kwargs)

    weights = tmp_path / "yolo.pt"
    weights.write_bytes(b"not loaded")
    monkeypatch.setenv("CAPSCOPE_YOLO_WEIGHTS", str(weights))
    monkeypatch.setattr(builtins, "__import__", no_ultralytics)
    with pytest.raises(ModelUnavailable) as err:
        PROPOSERS["yolo"]()
    assert 'pip install "capscope[yolo]"' in str(err.value) and "\n" not in str(err.value)


def test_masks_round_trip_as_coco_rle():
    mask = np.zeros((7, 9), dtype=bool)
    mask[2:5, 3:8] = True
    rle = mask_to_rle(mask)
    assert rle["size"] == [7, 9] and isinstance(rle["counts"], str)
    assert (rle_to_mask(rle) == mask).all()
    assert Region((3, 2, 8, 5), 0.5, "sam", mask).to_dict(with_mask=True)["mask"] == rle


def test_every_contract_region_source_is_registered():
    assert {"sam", "yolo", "fastsam", "classic"} <= set(PROPOSERS)


def test_the_scorer_makes_its_proposer_once_on_its_own_device(monkeypatch, clip_checkpoint):
    from capscope.metrics.regions import ClassicProposer
    from capscope.metrics.scorer import Scorer

    made = []

    def factory(**kwargs):
        made.append(kwargs)
        return ClassicProposer(**kwargs)

    monkeypatch.setitem(PROPOSERS, "classic", factory)
    scorer = Scorer(["clip-s"], device="cpu", clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint),
                    regions="classic")
    assert scorer.proposer() is scorer.proposer()
    assert made == [{"device": "cpu"}]


@pytest.mark.slow
def test_regions_are_proposed_only_for_metrics_that_read_them(monkeypatch, clip_checkpoint):
    """CLIP-S reads no regions: its rows propose none and say so; HICE-S's do."""
    from PIL import Image, ImageDraw

    from capscope.metrics.regions import ClassicProposer
    from capscope.metrics.output_rows import NO_REGIONS
    from capscope.metrics.scorer import Scorer

    proposed = []

    class Counting(ClassicProposer):
        def propose(self, image):
            proposed.append(image.size)
            return super().propose(image)

    monkeypatch.setitem(PROPOSERS, "classic", Counting)
    image = Image.new("RGB", (96, 96), (230, 230, 230))
    ImageDraw.Draw(image).ellipse([20, 20, 70, 70], fill=(220, 30, 30))
    clip = {"clip_model": "ViT-B-32", "clip_pretrained": str(clip_checkpoint), "device": "cpu"}
    row = Scorer(["clip-s"], regions="classic", **clip).score(image, "a red circle")
    assert proposed == [] and row["regions"] == [] and row["model"]["regions"] == NO_REGIONS
    given = Scorer(["clip-s"], regions="classic", **clip).score(image, "a red circle", regions=[{"box": [20, 20, 70, 70]}])
    assert proposed == [] and given["model"]["regions"] == "given" and len(given["regions"]) == 1
    row = Scorer(["clip-s", "hice"], regions="classic", **clip).score(image, "a red circle")
    assert proposed == [(96, 96)] and row["model"]["regions"] == "classic" and row["regions"]
