"""The models `capscope bench` times, all with random weights (speed does not
depend on them): open_clip ViT-B-32 and an InfoMetIC checkpoint in the
released layout, saved to files and loaded through `Scorer`, the user's path;
and the naive baseline they are set against (NaiveRunner): one pair at a time
with plain open_clip calls."""
from __future__ import annotations

import time
from pathlib import Path

import open_clip
import torch
from PIL import Image

from capscope.bench.clip4dm_released import released_clip4dm
from capscope.metrics.clipscore import CLIP_S_WEIGHT, PROMPT, clip_s
from capscope.metrics.encoder import crop_region, text_backbone
from capscope.metrics.hice import hice_scores, masked_crop
from capscope.metrics.infometic import HeadConfig, InfoMetIC
from capscope.metrics.regions import given_regions
from capscope.metrics.scorer import Scorer
from capscope.metrics.text import EOT_ID, SOT_ID, bpe_pieces, model_ids, tokenize

CLIP_MODEL = "ViT-B-32"
BENCH_METRICS = ("clip-s", "infometic", "hice", "clip4dm")  # registry names with a naive baseline here (NaiveRunner)
# pac-s and infoclip cost what clip-s and infometic cost: the same towers and passes, other weights or no head


def build_models(workdir: Path, device: str, metrics=BENCH_METRICS, runtime: str = "auto") -> dict:
    """Random-weight checkpoints saved to `workdir`, loaded back through Scorer."""
    return {name: Scorer([name], device=device, regions="given", runtime=runtime, **files)
            for name, files in model_files(workdir, metrics).items()}


def runtime_costs(scorers: dict) -> dict:
    """What ran each metric's text tower, and what its ONNX graph cost at first
    use: the export (None: found in capscope's cache) and building the sessions."""
    out = {}
    for name, scorer in scorers.items():
        out[name] = {"runtime": scorer.provenance()["runtime"], **text_backbone(scorer.metrics[name]).first_use_costs}
    return out


def model_files(workdir: Path, metrics=BENCH_METRICS) -> dict[str, dict]:
    """Per metric, the Scorer options naming its random-weight checkpoints in `workdir`."""
    torch.manual_seed(0)
    files = {}
    on_clip = [name for name in ("clip-s", "hice", "clip4dm") if name in metrics]  # metrics on the plain CLIP
    if on_clip:
        clip_file = workdir / "vit-b-32.pt"
        torch.save(open_clip.create_model(CLIP_MODEL, pretrained=None).state_dict(), clip_file)
        for name in on_clip:
            files[name] = {"clip_model": CLIP_MODEL, "clip_pretrained": str(clip_file)}
    if "infometic" in metrics:
        infometic_file = workdir / "best_model.pth"
        model = InfoMetIC(open_clip.create_model("ViT-B-32-quickgelu", pretrained=None), HeadConfig())
        torch.save({k: v for k, v in model.state_dict().items() if not k.endswith("attn_mask")}, infometic_file)
        del model
        files["infometic"] = {"infometic_checkpoint": str(infometic_file)}
    return files


def clear_caches(scorer) -> None:
    for metric in scorer.metrics.values():
        metric.backbone.clear_caches()  # HICE-S's image side clears its CLIP's as well



class NaiveRunner:
    """One pair at a time with plain open_clip calls: what reference code does."""

    def __init__(self, scorer, metric_name: str):
        self.metric = scorer.metrics[metric_name]
        clip = text_backbone(self.metric)
        self.model, self.preprocess, self.device = clip.model, clip.preprocess, clip.device
        self.tokenizer = open_clip.get_tokenizer(CLIP_MODEL)
        self.name = metric_name
        self.image_seconds = 0.0  # time in the image tower (preprocessing included)

    @torch.inference_mode()
    def images(self, images: list[Image.Image]) -> torch.Tensor:
        start = time.perf_counter()
        batch = torch.stack([self.preprocess(im.convert("RGB")) for im in images]).to(self.device)
        feats = self.model.encode_image(batch).float().cpu()
        self.image_seconds += time.perf_counter() - start
        return feats

    @torch.inference_mode()
    def texts(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.encode_text(ids.to(self.device)).float().cpu()

    def score(self, pair: dict, nlp) -> dict:
        image = pair["image"]
        if self.name == "clip4dm":
            return self._clip4dm(pair, image)
        if self.name == "clip-s":
            return self._clip_s(pair, image)
        regions = given_regions(pair["regions"], *image.size)
        tokens = tokenize(pair["caption"], nlp)
        return self._infometic(pair, image, regions, tokens) if self.name == "infometic" else self._hice(pair, image, regions, tokens)

    def _clip4dm(self, pair, image) -> dict:
        """The released loop: one pair per forward and backward pass, the image
        encoded again, 77 tokens, float32 (image_seconds is not split out: the
        image and text run in one graph there)."""
        return released_clip4dm(self.model, self.preprocess, self.tokenizer, image, pair["caption"],
                                self.metric.epsilon, self.metric.layers)

    def _clip_s(self, pair, image) -> dict:
        """jmhessel/clipscore's computation, one pair at a time: the prompted caption at 77 tokens."""
        image_feats = self.images([image])
        text_feats = self.texts(self.tokenizer([PROMPT + pair["caption"]]))
        return {"clip-s": float(clip_s(image_feats, text_feats, CLIP_S_WEIGHT)[0])}

    def _hice(self, pair, image, regions, tokens) -> dict:
        found = self.metric.phrases_of(pair["caption"], tokens)
        feats = self.images([image] + [masked_crop(image, r, self.metric.clip.crop) for r in regions])
        texts = self.texts(self.tokenizer([pair["caption"]] + [p.text for p in found]))
        return hice_scores(feats[0], texts[0], torch.cat([feats[1:], feats[:1]]), texts[1:])

    def _infometic(self, pair, image, regions, tokens) -> dict:
        metric = self.metric
        feats = self.images([image] + [crop_region(image, r) for r in regions])
        pieces = bpe_pieces(pair["caption"], tokens, metric.backbone.tokenizer)
        ids, mask, _ = model_ids(pieces, metric.max_len)
        t_g = self.texts(self.tokenizer([pair["caption"]]))
        per_position = torch.zeros(len(ids), 77, dtype=torch.long)
        for row, piece in enumerate(ids):
            per_position[row, :3] = torch.tensor([SOT_ID, piece, EOT_ID])
        tokens_feats = self.texts(per_position)
        boxes = torch.tensor([r.box for r in regions], dtype=torch.float32).reshape(1, -1, 4)
        inputs = (feats[:1], feats[None, 1:], boxes, torch.tensor([image.size], dtype=torch.float32),
                  t_g, tokens_feats[None], torch.tensor([mask], dtype=torch.float32))
        with torch.inference_mode():
            out = metric.model(*(t.to(self.device) for t in inputs))
        return {"precision": float(out[1][0]), "recall": float(out[0][0])}



def naive_pairs_per_second(scorer, metric: str, pairs: list[dict], timing: dict | None = None,
                           repeats: int = 1) -> float:
    """Pairs/s of the naive loop, the best of `repeats` runs; `timing` receives
    the share of that run's time spent in the image tower, which any path that
    encodes the same images must pay."""
    best, share = float("inf"), None
    for _ in range(repeats):
        runner = NaiveRunner(scorer, metric)
        start = time.perf_counter()
        for pair in pairs:
            runner.score(pair, scorer.nlp)
        elapsed = time.perf_counter() - start
        if elapsed < best:
            best, share = elapsed, runner.image_seconds / elapsed
    if timing is not None and share:
        timing["image_tower_share"] = share
    return len(pairs) / best
