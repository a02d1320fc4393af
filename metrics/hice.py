"""HICE-S and RefHICE-S (Zeng et al., ACM MM 2024, eq. 2-11).

    gITC = cos(v, t)                               eq. 2   v: whole image, t: caption
    gTTC = max_r cos(t_r, t)                       eq. 3   over the references
    P    = 1/M sum_m max_n cos(f_n, f_m)           eq. 4   f_n: regions, f_m: caption phrases
    R    = 1/N sum_n max_m cos(f_n, f_m)           eq. 5
    lITC = hmean(P, R)                             eq. 6
    lTTC = hmean(P', R') with the references' phrases in place of the regions   eq. 7-9
    HICE = hmean(gITC, lITC)                       eq. 10
    RefHICE = hmean(gITC, lITC, gTTC, lTTC)        eq. 11

Choices the paper leaves open, made here:
- the local region set is the proposed regions plus the whole image (the full
  mask of appendix A); only the proposed regions are reported under
  `region_scores` (`whole_image_region=False` drops it);
- a harmonic mean with a value <= 0 is 0; several references: gTTC takes the
  best reference (as RefCLIP-S does) and lTTC pools all references' phrases;
- a phrase is correct, and a region mentioned, when its best cosine is above
  `threshold` = 0.2, which is the paper's 0.5 (Fig. 5) on the CLIP-S scale
  2.5 * cos: raw CLIP cosines of matching pairs lie around 0.25-0.35. A CLIP
  trained with a sigmoid loss (a `logit_bias`, as SigLIP and capscope's demo
  CLIP have) says itself where a match begins: sigmoid(scale * cos + bias)
  = 0.5 at cos = -bias / scale, and that is its threshold;
- a token's score is the best score of the phrases that contain it, and it is
  correct when one of them is (null for tokens in no phrase): a word is flagged
  only when no phrase it takes part in finds support in the image.

Region features come from the regions' masks: with an Alpha-CLIP visual
checkpoint (`alpha_clip_checkpoint` or CAPSCOPE_ALPHA_CLIP_CHECKPOINT), the
whole image is encoded with the mask in the alpha channel (eq. 1); without one,
the region's box is cropped, padded to a square, and every pixel outside the
mask set to CLIP's mean colour (or, for a backbone trained on canvas crops, in
that style: `masked_crop`). The metric's output names which
(`features.regions`).
"""
from __future__ import annotations

import copy
import hashlib
import logging
import os
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .encoder import (IMAGE_ROWS, ClipBackbone, ImageFeatures, ImageHash, encode_cached, pass_rows, regions_key,
                      split_features)
from .region_crops import CropStyle, border_colour, grown_box, paste_centred, shrink_to
from .loading import ModelUnavailable, load_state_file
from capscope.common.lru import LRUCache
from .phrases import phrases as caption_phrases
from .regions import Region, box_mask
from .constants import HICE_THRESHOLD as THRESHOLD
from .result import MetricResult, PhraseScore
from .text import Phrase, Token, load_spacy, tokenize
from capscope.common.threads import few_threads

log = logging.getLogger(__name__)

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
ALPHA_MEAN, ALPHA_STD = 0.5, 0.26  # Alpha-CLIP's mask normalisation


# ---------------------------------------------------------------- formulas

def hmean(*values: float) -> float:
    """Harmonic mean; 0 when any value is <= 0."""
    if not values or any(v <= 0 for v in values):
        return 0.0
    return len(values) / sum(1.0 / v for v in values)


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def local_scores(sim: torch.Tensor) -> tuple[float, float, torch.Tensor, torch.Tensor]:
    """sim: N regions (or reference phrases) x M caption phrases.
    Returns P (eq. 4), R (eq. 5), each phrase's best match and each region's."""
    per_phrase = sim.max(dim=0).values
    per_region = sim.max(dim=1).values
    return float(per_phrase.mean()), float(per_region.mean()), per_phrase, per_region


def hice_scores(v: torch.Tensor, t: torch.Tensor, regions: torch.Tensor, phrases: torch.Tensor,
                refs: torch.Tensor | None = None, ref_phrases: torch.Tensor | None = None) -> dict:
    """Every score of eq. 2-11 for one pair: v (D), t (D), regions (N x D),
    phrases (M x D), refs (K x D), ref_phrases (M_h x D)."""
    g_itc = float(cosine_matrix(v[None], t[None])[0, 0])
    precision, recall, _, _ = local_scores(cosine_matrix(regions, phrases))
    l_itc = hmean(precision, recall)
    out = {"hice": hmean(g_itc, l_itc), "g_itc": g_itc, "l_itc": l_itc, "precision": precision, "recall": recall}
    if refs is not None and len(refs) and ref_phrases is not None and len(ref_phrases):
        g_ttc = float(cosine_matrix(refs, t[None]).max())
        p_ref, r_ref, _, _ = local_scores(cosine_matrix(ref_phrases, phrases))
        l_ttc = hmean(p_ref, r_ref)
        out.update({"ref_hice": hmean(g_itc, l_itc, g_ttc, l_ttc), "g_ttc": g_ttc, "l_ttc": l_ttc})
    return out


def token_scores(tokens: list[Token], found: list[Phrase], scores: list[float], threshold: float):
    """Token score = best score among the phrases holding it; correct when any of them is."""
    best: list[float | None] = [None] * len(tokens)
    for phrase, score in zip(found, scores):
        for i in phrase.tokens:
            best[i] = score if best[i] is None else max(best[i], score)
    correct = [(s > threshold) if (s is not None and tok.semantic) else None for tok, s in zip(tokens, best)]
    return best, correct


# ---------------------------------------------------------------- region features

def masked_crop(image: Image.Image, region: Region, style: CropStyle = CropStyle()) -> Image.Image:
    """The region's box with the pixels outside its mask neutralised, centred
    on a square so nothing is lost to CLIP's centre crop. By default the fill
    is CLIP's mean colour and the square is the box's longer side; a backbone
    trained on crops with a margin, at true scale on a fixed canvas (capscope's
    demo CLIP), gets them that way, filled with the local background colour it
    saw in training."""
    rgb = image.convert("RGB")
    box = grown_box(region.box, style.margin, rgb.size)
    pixels = np.asarray(rgb.crop(box)).copy()
    fill = border_colour(pixels) if style.canvas else tuple(round(c * 255) for c in CLIP_MEAN)
    if region.mask is not None:
        inside = np.asarray(region.mask, dtype=bool)[box[1] : box[3], box[0] : box[2]]
        pixels[~inside[: pixels.shape[0], : pixels.shape[1]]] = fill
    crop = Image.fromarray(pixels)
    side = style.canvas or max(crop.size)
    return paste_centred(shrink_to(crop, side), side, fill)


def region_mask(region: Region, size: tuple[int, int]) -> np.ndarray:
    """The region's mask, or its box filled when it has none."""
    if region.mask is not None:
        return np.asarray(region.mask, dtype=bool)
    width, height = size
    return box_mask(region.box, height, width)


class AlphaVisual:
    """An open_clip vision tower with Alpha-CLIP's alpha-channel patch embedding
    (`conv1_alpha`, 1 -> width channels) added to the RGB patch embedding."""

    def __init__(self, visual: torch.nn.Module, conv1_alpha: torch.nn.Conv2d):
        self.visual, self.conv1_alpha = visual.eval(), conv1_alpha.eval()
        self._alpha: torch.Tensor | None = None
        self.visual.conv1.register_forward_hook(self._add_alpha)

    def _add_alpha(self, module, inputs, output):
        if self._alpha is None:
            return output
        return output + self.conv1_alpha(self._alpha.to(output.dtype))

    @torch.inference_mode()
    def __call__(self, pixels: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        self._alpha = alpha
        try:
            return self.visual(pixels)
        finally:
            self._alpha = None


def load_alpha_visual(path, clip_visual: torch.nn.Module) -> AlphaVisual:
    """Alpha-CLIP's released visual checkpoint (OpenAI CLIP names, attention
    input projections as `attn.in_proj.weight`, plus `conv1_alpha.weight`) on a
    copy of the backbone's vision tower, loaded strictly."""
    flag = "CAPSCOPE_ALPHA_CLIP_CHECKPOINT"
    state = load_state_file(path, "Alpha-CLIP", flag)
    state = {k[len("visual."):] if k.startswith("visual.") else k: v for k, v in state.items()}
    state = {k.replace(".attn.in_proj.weight", ".attn.in_proj_weight").replace(".attn.in_proj.bias", ".attn.in_proj_bias"): v
             for k, v in state.items()}
    if "conv1_alpha.weight" not in state:
        raise ModelUnavailable(f"Alpha-CLIP: {path} has no conv1_alpha.weight: not an Alpha-CLIP visual checkpoint (set {flag})")
    alpha_weight = state.pop("conv1_alpha.weight")
    visual = copy.deepcopy(clip_visual).float().cpu()
    own = visual.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    bad = [k for k in own if k in state and own[k].shape != state[k].shape]
    if missing or unexpected or bad:
        raise ModelUnavailable(
            f"Alpha-CLIP: {path} does not fit the --clip-model vision tower "
            f"(missing {missing[:2]}, unexpected {unexpected[:2]}, other shapes {bad[:2]}); "
            "use the CLIP architecture the checkpoint was trained on, e.g. ViT-L-14 with pretrained openai"
        )
    visual.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    conv = visual.conv1
    if tuple(alpha_weight.shape) != (conv.out_channels, 1, *conv.kernel_size):
        raise ModelUnavailable(f"Alpha-CLIP: conv1_alpha.weight in {path} has shape {tuple(alpha_weight.shape)}, "
                               f"the vision tower needs {(conv.out_channels, 1, *conv.kernel_size)}")
    conv1_alpha = torch.nn.Conv2d(1, conv.out_channels, conv.kernel_size, conv.stride, bias=False)
    conv1_alpha.weight.data.copy_(alpha_weight.float())
    return AlphaVisual(visual, conv1_alpha)


class HiceImageEncoder:
    """What the scorer asks for image features: the backbone with HICE-S's own
    region features (masked crops or Alpha-CLIP), cached per image, regions and
    masks. Everything else (text encoding, tokenizer, name) is the backbone's."""

    def __init__(self, backbone: ClipBackbone, alpha: AlphaVisual | None, cache_size: int = 256):
        self._backbone, self.alpha = backbone, alpha
        if alpha is not None:
            alpha.visual.to(backbone.device)
            alpha.conv1_alpha.to(backbone.device)
        self.mode = "alpha-clip" if alpha is not None else "masked-crop"
        self._cache = LRUCache(cache_size)

    def __getattr__(self, name):
        return getattr(self._backbone, name)

    def image_features(self, images: list[Image.Image], regions: list[list[Region]],
                       ahead: Iterable[tuple[list[Region], ImageHash]] = (),
                       hashes: list[str] | None = None) -> list[ImageFeatures]:
        """As `ClipBackbone.image_features`, with HICE-S's region features;
        Alpha-CLIP's passes are its own, so `ahead` fills masked-crop passes only."""
        key = lambda image_hash, rs: f"{image_hash}:{regions_key(rs)}:{_masks_key(rs)}"  # noqa: E731
        if self.alpha is not None:
            return encode_cached(self._cache, key, self._alpha_features, images, regions, (), 1, hashes)
        return encode_cached(self._cache, key, self._masked_features, images, regions, ahead,
                             pass_rows(IMAGE_ROWS, self._backbone.device), hashes)

    def clear_caches(self) -> None:
        """Forget the cached region features here and the backbone's caches."""
        self._cache.clear()
        self._backbone.clear_caches()

    def _masked_features(self, images, regions) -> list[ImageFeatures]:
        inputs = []
        for image, rs in zip(images, regions):
            inputs.append(image)
            inputs.extend(masked_crop(image, r, self._backbone.crop) for r in rs)
        return split_features(images, regions, self._backbone.encode_images(inputs), {"region_features": self.mode})

    def _alpha_features(self, images, regions) -> list[ImageFeatures]:
        pixels, alphas = [], []
        for image, rs in zip(images, regions):
            rgb = self._backbone.preprocess(image.convert("RGB"))
            side = rgb.shape[-1]
            masks = [np.ones((image.height, image.width), dtype=bool)] + [region_mask(r, image.size) for r in rs]
            for mask in masks:
                pixels.append(rgb)
                alphas.append(_alpha_input(mask, side))
        out = []
        device = self._backbone.device
        with self._backbone.running():
            for start in range(0, len(pixels), 32):
                batch = torch.stack(pixels[start : start + 32]).to(device)
                alpha = torch.stack(alphas[start : start + 32]).to(device)
                out.append(self.alpha(batch, alpha).float().cpu())
        return split_features(images, regions, torch.cat(out), {"region_features": self.mode})


def _alpha_input(mask: np.ndarray, side: int) -> torch.Tensor:
    """The mask through the image's geometry (shorter side to `side`, centre
    crop) and Alpha-CLIP's normalisation; 1 x side x side."""
    tensor = torch.from_numpy(mask.astype(np.float32))[None, None]
    height, width = mask.shape
    scale = side / min(height, width)
    size = (max(side, round(height * scale)), max(side, round(width * scale)))
    tensor = F.interpolate(tensor, size=size, mode="bilinear", align_corners=False)[0]
    top, left = (size[0] - side) // 2, (size[1] - side) // 2
    tensor = tensor[:, top : top + side, left : left + side]
    return (tensor - ALPHA_MEAN) / ALPHA_STD


def _masks_key(regions: list[Region]) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for r in regions:
        if r.mask is not None:
            digest.update(np.packbits(np.asarray(r.mask, dtype=bool)).tobytes())
        digest.update(b"|")
    return digest.hexdigest()


# ---------------------------------------------------------------- the metric

def match_threshold(backbone: ClipBackbone) -> float:
    """The cosine above which a phrase and a region match: the model's own
    decision boundary when it was trained with a sigmoid loss, else THRESHOLD."""
    bias = getattr(backbone.model, "logit_bias", None)
    if bias is None:
        return THRESHOLD
    return float(-bias.detach().float() / backbone.model.logit_scale.detach().float().exp())


class HiceMetric:
    name = "hice"

    def __init__(self, backbone: ClipBackbone, *, alpha_clip_checkpoint=None, threshold: float | None = None,
                 whole_image_region: bool = True,
                 nlp=None):
        # HICE-S judges phrases with `threshold`, not the token rule (metrics.verdict).
        path = alpha_clip_checkpoint or os.environ.get("CAPSCOPE_ALPHA_CLIP_CHECKPOINT")
        alpha = load_alpha_visual(path, backbone.model.visual) if path else None
        self.clip = backbone
        self.backbone = HiceImageEncoder(backbone, alpha)
        self.alpha_path = Path(path) if path else None
        self.alpha_source = self.alpha_path.name if path else None
        self.threshold = match_threshold(backbone) if threshold is None else threshold
        self.whole_image_region = whole_image_region
        self.nlp = nlp or load_spacy()
        self.phrase_source = "dependency parse" if self.nlp.has_pipe("parser") else "rule-based chunker"
        if not backbone.reads_length:  # a tokenizer that cannot say where it cuts: no windows
            self.fits = None

    def fits(self, caption: str) -> bool:
        """Whether CLIP reads the caption whole (its global feature; phrases are short)."""
        return self.clip.reads_whole(caption)

    def phrases_of(self, text: str, tokens: list[Token] | None = None) -> list[Phrase]:
        return caption_phrases(text, tokens if tokens is not None else tokenize(text, self.nlp), self.nlp)

    def compute(self, pairs, images: list[ImageFeatures]) -> list[MetricResult]:
        plans = [self._plan(pair) for pair in pairs]
        texts = [t for plan in plans for t in plan["texts"]]
        with few_threads(len(texts) * max((len(t.split()) + 3 for t in texts), default=0), device=self.clip.device):
            feats = self.clip.encode_texts(texts) if texts else torch.zeros(0, self.clip.dim)
        rows, start = [], 0
        for pair, plan, image in zip(pairs, plans, images):
            own = feats[start : start + len(plan["texts"])]
            start += len(plan["texts"])
            rows.append(self._row(pair, plan, own, image))
        return rows

    def _plan(self, pair) -> dict:
        found = self.phrases_of(pair.caption, pair.tokens)
        refs = pair.references or []
        ref_phrases = [p for r in refs for p in self.phrases_of(r)]
        texts = [pair.caption] + [p.text for p in found] + list(refs) + [p.text for p in ref_phrases]
        return {"phrases": found, "n_refs": len(refs), "n_ref_phrases": len(ref_phrases), "texts": texts}

    def _row(self, pair, plan, feats: torch.Tensor, image: ImageFeatures) -> MetricResult:
        found = plan["phrases"]
        m, k = len(found), plan["n_refs"]
        t, phrase_feats = feats[0], feats[1 : 1 + m]
        refs, ref_phrases = feats[1 + m : 1 + m + k], feats[1 + m + k :]
        regions = image.region_feats
        local = torch.cat([regions, image.global_feat[None]]) if self.whole_image_region or not len(regions) else regions
        scores = hice_scores(image.global_feat, t, local, phrase_feats, refs if k else None, ref_phrases if k else None)
        sim = cosine_matrix(local, phrase_feats)
        per_phrase = sim.max(dim=0).values.tolist()
        per_region = sim.max(dim=1).values.tolist()[: len(regions)]
        word, correct = token_scores(pair.tokens, found, per_phrase, self.threshold)
        return MetricResult(
            scores=scores,
            token_scores=word,
            token_correct=correct,
            region_scores=per_region,
            region_mentioned=[s > self.threshold for s in per_region],
            null_score=None,
            phrases=[PhraseScore(p.text, list(p.tokens), s, s > self.threshold) for p, s in zip(found, per_phrase)],
            features={
                "regions": self.backbone.mode + (f" ({self.alpha_source})" if self.alpha_source else ""),
                "phrases": self.phrase_source,
                "threshold": round(self.threshold, 4),
            },
        )
