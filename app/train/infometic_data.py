"""What `capscope train infometic` learns from: frozen-CLIP image features
computed once (a bank), and captions with token and region labels drawn per step.

Features are made by the scorer's own code (`ClipBackbone.image_features` with
the checkpoint's crop style, `InfoFamilyMetric.text_inputs` for BPE pieces,
`<sot> piece <eot>` features and t_g), so training sees exactly what
inference sees.

Two sources give the same `Sample`s:
- `FileSource`: a training file (docs/training-data.md);
- `DemoSource`: demo scenes, with a fresh clean caption, polluted twin and
  second caption per scene and step (infinite text side), and the scene's
  truth, so that an in-batch "negative" caption that happens to be true of an
  image is not pushed down.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from capscope.demo.dataset import phrase_boxes
from capscope.demo.demo_captions import caption_true, make_caption, pollute
from capscope.demo.demo_regions import scene_regions
from capscope.demo.scenes import make_scene
from capscope.metrics.families import InfoFamilyMetric
from capscope.metrics.images import read_image
from capscope.metrics.loading import read_checkpoint
from capscope.metrics.pairs import PreparedPair
from capscope.metrics.regions import PROPOSERS, given_regions, iou, select_regions
from capscope.metrics.text import Token, load_spacy, tokenize
from capscope.train.training_data import read_training_file

log = logging.getLogger(__name__)

IGNORE = -1
OTHER = 2          # a piece of a non-semantic word: never judged, should draw no attention
GROUNDING_IOU = 0.5


# ---------------------------------------------------------------- image bank

@dataclass
class ImageBank:
    """Raw CLIP features of every training image and its regions."""

    global_feats: torch.Tensor                  # N x D
    region_feats: list[torch.Tensor]            # n_i x D each
    boxes: list[torch.Tensor]                   # n_i x 4 pixels each
    sizes: torch.Tensor                         # N x 2 (W, H)

    def __len__(self) -> int:
        return len(self.region_feats)

    def buckets(self) -> dict[int, list[int]]:
        """Images by region count: the head has no image-side mask, so a batch
        shares one count, as at inference."""
        out: dict[int, list[int]] = {}
        for i, feats in enumerate(self.region_feats):
            out.setdefault(len(feats), []).append(i)
        return out

    def batch(self, index: list[int]) -> list[torch.Tensor]:
        return [
            self.global_feats[index],
            torch.stack([self.region_feats[i] for i in index]),
            torch.stack([self.boxes[i] for i in index]),
            self.sizes[index],
        ]


def encode_bank(backbone, images_and_regions, total: int, progress: bool = True, chunk: int = 32) -> ImageBank:
    """`images_and_regions` yields (PIL image, [Region]); encoded in chunks."""
    glob, regions, boxes, sizes = [], [], [], []
    pending = []
    bar = tqdm(total=total, desc="image features", unit="img", disable=not progress, mininterval=5.0)
    for item in images_and_regions:
        pending.append(item)
        if len(pending) == chunk:
            _encode_chunk(backbone, pending, glob, regions, boxes, sizes)
            bar.update(len(pending))
            pending = []
    if pending:
        _encode_chunk(backbone, pending, glob, regions, boxes, sizes)
        bar.update(len(pending))
    bar.close()
    return ImageBank(torch.stack(glob), regions, boxes, torch.tensor(sizes, dtype=torch.float32))


def _encode_chunk(backbone, pending, glob, regions, boxes, sizes) -> None:
    images = [im for im, _ in pending]
    feats = backbone.image_features(images, [rs for _, rs in pending])
    backbone.clear_caches()   # a bank is encoded once; the scorer's cache would only hold memory
    for f in feats:
        glob.append(f.global_feat.clone())
        regions.append(f.region_feats.clone().reshape(len(f.regions), -1))
        boxes.append(f.boxes.clone())
        sizes.append(tuple(float(v) for v in f.size))


def state_fingerprint(model) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes()[:4096])
    return digest.hexdigest()


def cached_bank(path: Path, key: str, build) -> ImageBank:
    """The bank saved at `path` when it was made for `key`, else built and saved."""
    path = Path(path)
    if path.is_file():
        saved = read_checkpoint(path, "image feature bank")
        if saved.get("key") == key:
            log.info("image features from %s", path)
            return ImageBank(**saved["bank"])
    bank = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"key": key, "bank": bank.__dict__}, path)
    return bank


# ---------------------------------------------------------------- samples

@dataclass
class Sample:
    """One caption on one bank image, with what is known about it."""

    image: int
    text: str
    wrong: tuple[tuple[int, int], ...] = ()              # character spans of wrong words
    grounding: tuple = ()                                 # ((start, end, box), ...) for a correct caption
    truth: object = None                                  # demo: the Caption, to check truth against a scene

    @property
    def polluted(self) -> bool:
        return bool(self.wrong)


@dataclass
class Draw:
    """What one image contributes to a step."""

    clean: Sample
    polluted: list[Sample] = field(default_factory=list)   # the clean caption with a wrong word
    htn: tuple[Sample, Sample] | None = None             # (more complete, less complete) captions


def grounded_region(box, region_boxes) -> int | None:
    """The region a grounded box names: best IoU, at least GROUNDING_IOU."""
    best, best_iou = None, GROUNDING_IOU
    for r, region in enumerate(region_boxes):
        value = iou(box, region)
        if value >= best_iou:
            best, best_iou = r, value
    return best


class DemoSource:
    """Demo scenes (a fixed set of images, encoded once) with captions drawn
    afresh every step."""

    def __init__(self, n_scenes: int, seed: int, pollutions: int = 2):
        self.seed, self.pollutions = seed, pollutions
        self.scenes, self.regions = [], []
        for i in range(n_scenes):
            rng = np.random.default_rng(np.random.SeedSequence([seed, 7, i]))
            scene = make_scene(rng)
            self.scenes.append(scene)
            self.regions.append(scene_regions(scene, rng))

    def __len__(self) -> int:
        return len(self.scenes)

    def bank_key(self) -> str:
        return f"demo:{len(self.scenes)}:{self.seed}"

    def images(self):
        for scene, regions in zip(self.scenes, self.regions):
            image = scene.image()
            scene.forget_render()   # keep only the features, not every rendered image
            yield image, given_regions([{"box": r.box} for r in regions], *image.size)

    def draw(self, image: int, rng: np.random.Generator) -> Draw:
        scene = self.scenes[image]
        clean = make_caption(scene, rng)
        twins = {}
        for _ in range(self.pollutions):
            polluted = pollute(clean, scene, rng)
            twins.setdefault(polluted.text, Sample(image, polluted.text, (polluted.wrong_span(),), (), polluted))
        grounding = tuple((b["start"], b["end"], tuple(b["box"])) for b in phrase_boxes(clean, scene))
        clean_sample = Sample(image, clean.text, (), grounding, clean)
        return Draw(clean_sample, list(twins.values()), self._htn(image, clean, clean_sample, rng))

    def _htn(self, image: int, clean, clean_sample: Sample, rng) -> tuple[Sample, Sample] | None:
        """A second true caption that mentions strictly fewer or more of the
        shapes: the one that mentions more should get the higher recall."""
        mine = set(clean.referents)
        for _ in range(4):
            other = make_caption(self.scenes[image], rng)
            theirs = set(other.referents)
            if theirs < mine:
                return clean_sample, Sample(image, other.text, truth=other)
            if theirs > mine:
                return Sample(image, other.text, truth=other), clean_sample
        return None

    def true_of(self, image: int, sample: Sample) -> bool | None:
        if sample.truth is None:
            return None
        return caption_true(sample.truth, self.scenes[image].shapes)


class FileSource:
    """A training file: fixed captions; hard textual negatives are the other
    captions of the same image with fewer grounded phrases (or semantic words)."""

    def __init__(self, path: Path, nlp=None, pollutions: int = 2):
        self.pollutions = pollutions
        self.pairs = read_training_file(path)
        self.nlp = nlp or load_spacy()
        self.image_paths = sorted({p.image for p in self.pairs})
        index = {path: i for i, path in enumerate(self.image_paths)}
        self.by_image: dict[int, list] = {}
        for pair in self.pairs:
            self.by_image.setdefault(index[pair.image], []).append(pair)
        self.image_index = index

    def __len__(self) -> int:
        return len(self.image_paths)

    def bank_key(self) -> str:
        digest = hashlib.blake2b(repr([(p.image, p.regions) for p in self.pairs]).encode(), digest_size=8)
        return f"file:{digest.hexdigest()}"

    def images(self):
        proposer = None
        for path in self.image_paths:
            image = read_image(path)
            boxes = next((p.regions for p in self.by_image[self.image_index[path]] if p.regions), None)
            if boxes is not None:
                regions = given_regions([{"box": b} for b in boxes], *image.size)
            else:
                proposer = proposer or PROPOSERS["classic"]()
                regions = select_regions(proposer.propose(image), 20)
            yield image, regions

    def draw(self, image: int, rng: np.random.Generator) -> Draw:
        pairs = self.by_image[image]
        pair = pairs[int(rng.integers(len(pairs)))]
        grounding = tuple((g.start, g.end, g.box) for g in pair.boxes)
        clean = Sample(image, pair.caption, (), grounding)
        negatives = [n for n in pair.negatives if n.wrong]
        chosen = rng.permutation(len(negatives))[:self.pollutions]
        polluted = [Sample(image, negatives[i].caption, negatives[i].wrong) for i in chosen]
        return Draw(clean, polluted, self._htn(image, pair, clean, rng))

    def _htn(self, image, pair, clean: Sample, rng):
        richness = lambda p: (len(p.boxes), sum(t.semantic for t in tokenize(p.caption, self.nlp)))
        others = [p for p in self.by_image[image] if p is not pair and richness(p) != richness(pair)]
        if not others:
            return None
        other = others[int(rng.integers(len(others)))]
        other_sample = Sample(image, other.caption, (), tuple((g.start, g.end, g.box) for g in other.boxes))
        return (clean, other_sample) if richness(pair) > richness(other) else (other_sample, clean)

    def true_of(self, image: int, sample: Sample) -> bool | None:
        return True if sample.image == image and not sample.wrong else None


# ---------------------------------------------------------------- labels and tensors

@dataclass
class TextBatch:
    t_g: torch.Tensor           # B x D
    tokens: torch.Tensor        # B x L x D
    mask: torch.Tensor          # B x L
    labels: torch.Tensor        # B x L: 1 correct semantic piece, 0 wrong piece, 2 other piece, -1 no piece
    grounding: torch.Tensor     # B x L: region index each piece's phrase names, -1 none


@dataclass
class Texts:
    """Captions to features and labels, exactly as the scorer prepares them."""

    backbone: object
    nlp: object
    max_len: int = 32
    _tokens: dict = field(default_factory=dict)

    def __post_init__(self):
        self.metric = InfoFamilyMetric("infometic", self.backbone, None)  # prepares text only: decides nothing
        self.metric.max_len = self.max_len

    def tokens(self, text: str) -> list[Token]:
        if text not in self._tokens:
            if len(self._tokens) > 200_000:
                self._tokens.clear()
            self._tokens[text] = tokenize(text, self.nlp)
        return self._tokens[text]

    def batch(self, samples: list[Sample], region_boxes: list[torch.Tensor]) -> TextBatch:
        pairs = [PreparedPair(s.text, self.tokens(s.text)) for s in samples]
        pieces, t_g, tokens, masks = self.metric.text_inputs(pairs)
        labels = torch.full((len(samples), self.max_len), IGNORE, dtype=torch.long)
        grounding = torch.full_like(labels, IGNORE)
        for b, (sample, pair) in enumerate(zip(samples, pairs)):
            boxes = region_boxes[b].tolist()
            for k, piece in enumerate(pieces[b]):
                labels[b, k + 1] = OTHER
                if piece.token is None:
                    continue
                token = pair.tokens[piece.token]
                if token.semantic:
                    labels[b, k + 1] = 0 if _inside_any(token, sample.wrong) else 1
                    grounding[b, k + 1] = _grounding_of(token, sample.grounding, boxes)
        return TextBatch(t_g.clone(), tokens.clone(), masks, labels, grounding)


def _inside_any(token: Token, spans) -> bool:
    return any(token.start < end and start < token.end for start, end in spans)


def _grounding_of(token: Token, grounding, region_boxes) -> int:
    for start, end, box in grounding:
        if start <= token.start and token.end <= end:
            region = grounded_region(box, region_boxes)
            return IGNORE if region is None else region
    return IGNORE


def region_labels(sample: Sample, region_boxes: torch.Tensor) -> torch.Tensor:
    """1 for regions a grounded phrase names, 0 for the rest; all -1 when the
    caption has no grounding (nothing is known) or is polluted."""
    boxes = region_boxes.tolist()
    if not sample.grounding or sample.polluted:
        return torch.full((len(boxes),), IGNORE, dtype=torch.long)
    labels = torch.zeros(len(boxes), dtype=torch.long)
    for _, _, box in sample.grounding:
        region = grounded_region(box, boxes)
        if region is not None:
            labels[region] = 1
    return labels
