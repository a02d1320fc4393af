"""`capscope train infometic`: the InfoMetIC multi-task recipe (Hu et al. 2023,
sec. 3.2 and 4.1) on a frozen CLIP, from a training file or from demo scenes.

Losses (docs/train-infometic.md says why each is there):
- coarse: NCE on vision recall and on text precision, image->caption and
  caption->image (eq. 5-7), with in-batch negatives taken by shifting the
  batch; hard textual negatives on recall (eq. 8); the polluted twin as one
  more negative caption for *precision* (a caption with a wrong word is less
  precise, not less complete);
- fine: text labels from polluted captions (eq. 9) and vision labels from
  grounding (eq. 10);
- capscope's: a class-balanced BCE on the token verifier's per-piece logits
  and a grounding cross-entropy on its phrase-region scores.
Coarse and fine are weighted 3:1 (sec. 4.1) in every step (the same expected
gradient as alternating batches 3:1, with one forward).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import open_clip
import torch
import torch.nn.functional as F
from tqdm import tqdm

from capscope.bench.evaluate import evaluate_gold as bench_evaluate_gold
from capscope.common.jsonl import read_json_lines
from capscope.demo.clip_model import (
    DEMO_CLIP_CONFIG, DEMO_CLIP_MODEL, config_path_beside, load_demo_clip, write_atomically,
)
from capscope.metrics.encoder import ClipBackbone, CropStyle
from capscope.metrics.infometic import HeadConfig, InfoMetIC, capscope_checkpoint
from capscope.metrics import loading
from capscope.metrics.loading import read_checkpoint, resolve_device
from capscope.metrics.scorer import Scorer
from capscope.metrics.text import load_spacy
from capscope.train.infometic_data import (
    OTHER, DemoSource, FileSource, Texts, cached_bank, encode_bank, region_labels, state_fingerprint,
)
from capscope.train.schedule import TrainState, budget_spent, warmup_cosine

log = logging.getLogger(__name__)

DEMO_CROP = {"margin": 0.15, "canvas": 128}
PLAIN_CROP = {"margin": 0.0, "canvas": None}
WARMUP_STEPS = 30
LOSS_NAMES = ("nce_recall", "nce_precision", "htn", "text_token", "vision_token", "verify", "grounding")
COARSE, FINE = ("nce_recall", "nce_precision", "htn"), ("text_token", "vision_token")


@dataclass
class InfoTrainConfig:
    out: Path
    clip: Path | None = None               # demo CLIP checkpoint (open_clip state dict + config beside)
    clip_model: str | None = None          # or any open_clip model ...
    clip_pretrained: str | None = None     # ... with its tag or file
    data: Path | None = None               # training file; None = demo scenes
    demo_scenes: int = 4000
    minutes: float | None = 15.0
    steps: int | None = None
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    resume: bool = False
    batch_size: int = 16
    shifts: int = 3                        # in-batch negatives per image / per caption
    lr: float = 7e-4
    weight_decay: float = 0.01
    intra_layers: int = 2
    inter_layers: int = 2
    coarse_weight: float = 3.0
    fine_weight: float = 1.0
    verify_weight: float = 1.0
    grounding_weight: float = 0.5
    checkpoint_minutes: float = 5.0
    probe_gold: Path | None = None         # gold file scored at each checkpoint
    half: bool = False                     # save fp16 weights
    crop_margin: float | None = None
    crop_canvas: int | None = None
    progress: bool = True


# ---------------------------------------------------------------- CLIP

def load_clip(config: InfoTrainConfig, device):
    """(open_clip model, name, config dict for the checkpoint, crop style dict)."""
    if config.clip is not None:
        model = load_demo_clip(config.clip)
        beside = config_path_beside(config.clip)
        clip_config = json.loads(beside.read_text()) if beside.is_file() else DEMO_CLIP_CONFIG
        name, crop = DEMO_CLIP_MODEL, dict(DEMO_CROP)
    else:
        name = config.clip_model or "ViT-B-32"
        model = loading.create_open_clip(name, config.clip_pretrained or "openai", device)
        clip_config = open_clip.get_model_config(name)
        crop = dict(PLAIN_CROP)
    if config.crop_margin is not None:
        crop["margin"] = config.crop_margin
    if config.crop_canvas is not None:
        crop["canvas"] = config.crop_canvas or None
    for p in model.parameters():
        p.requires_grad_(False)
    return model.to(device).eval(), name, clip_config, crop


def make_backbone(model, name: str, crop: dict, device):
    return ClipBackbone.from_model(model, name, name, device, CropStyle(**crop))


def new_head(clip_model, dim: int, config: InfoTrainConfig):
    head = HeadConfig(width=dim, heads=max(dim // 32, 1), intra_layers=config.intra_layers,
                      inter_layers=config.inter_layers, text_positions=True, evidence=True, verify=True)
    return InfoMetIC(clip_model, head)


# ---------------------------------------------------------------- one step

@dataclass
class Pairs:
    """The (image, caption) pairs of one forward and where each task finds its own."""

    images: list = field(default_factory=list)     # bank index per pair
    samples: list = field(default_factory=list)
    positive: list = field(default_factory=list)   # pair index of (I_b, C_b)
    shifted: dict = field(default_factory=dict)    # (b, k) -> pair index of (I_b, C_{b+k})
    polluted: dict = field(default_factory=dict)   # b -> pair indices of (I_b, C'_b), one per polluted twin
    htn: list = field(default_factory=list)        # (more, less) pair indices

    def add(self, image: int, sample) -> int:
        self.images.append(image)
        self.samples.append(sample)
        return len(self.images) - 1


def build_pairs(draws, images: list[int], shifts: int) -> Pairs:
    pairs = Pairs()
    size = len(draws)
    for b, draw in enumerate(draws):
        pairs.positive.append(pairs.add(images[b], draw.clean))
    for k in range(1, min(shifts, size - 1) + 1):
        for b in range(size):
            pairs.shifted[(b, k)] = pairs.add(images[b], draws[(b + k) % size].clean)
    for b, draw in enumerate(draws):
        if draw.polluted:
            pairs.polluted[b] = [pairs.add(images[b], s) for s in draw.polluted]
        if draw.htn is not None:
            more, less = draw.htn
            index = {id(draw.clean): pairs.positive[b]}
            pairs.htn.append(tuple(index.get(id(s)) if id(s) in index else pairs.add(images[b], s) for s in (more, less)))
    return pairs


def forward_pairs(model, bank, texts, pairs: Pairs, device):
    v_g, regions, boxes, sizes = bank.batch(pairs.images)
    text = texts.batch(pairs.samples, [bank.boxes[i] for i in pairs.images])
    inputs = [v_g, regions, boxes, sizes, text.t_g, text.tokens, text.mask]
    out = model.outputs(*[x.to(device) for x in inputs])
    return out, text, torch.stack([region_labels_of(s, bank.boxes[i]) for s, i in zip(pairs.samples, pairs.images)])


def region_labels_of(sample, boxes):
    return region_labels(sample, boxes)


def nce_losses(scores, pairs: Pairs, source, size: int, extra_negatives: dict | None = None):
    """(image->caption + caption->image) / 2 (eq. 5-7) over the shifted
    negatives, leaving out any "negative" known to be true of the image."""
    to_caption, to_image = [], []
    for b in range(size):
        row = [scores[pairs.positive[b]]]
        col = [scores[pairs.positive[b]]]
        for (bb, k), p in pairs.shifted.items():
            if bb == b and not source.true_of(pairs.images[p], pairs.samples[p]):
                row.append(scores[p])
            if (bb + k) % size == b and not source.true_of(pairs.images[p], pairs.samples[p]):
                col.append(scores[p])
        for p in (extra_negatives or {}).get(b, []):
            row.append(scores[p])
        to_caption.append(_first_wins(row))
        to_image.append(_first_wins(col))
    stack = lambda xs: torch.stack(xs).mean() if xs else scores.sum() * 0
    return (stack([x for x in to_caption if x is not None]) + stack([x for x in to_image if x is not None])) / 2


def _first_wins(logits):
    if len(logits) < 2:
        return None
    return F.cross_entropy(torch.stack(logits)[None], torch.zeros(1, dtype=torch.long, device=logits[0].device))


def text_token_loss(log_alpha, labels):
    """Eq. 9: -1/n_s sum over correct semantic pieces of log alpha_t."""
    semantic = (labels == 0) | (labels == 1)
    correct = labels == 1
    per_pair = -(log_alpha * correct).sum(-1) / semantic.sum(-1).clamp(min=1)
    keep = correct.any(-1)
    return per_pair[keep].mean() if keep.any() else per_pair.sum() * 0


def vision_token_loss(log_attention, labels):
    """Eq. 10: -1/m sum over mentioned regions of log alpha_v (null slot excluded from m)."""
    n = labels.shape[1]
    log_alpha = log_attention[:, :n]
    mentioned = labels == 1
    per_pair = -(log_alpha * mentioned).sum(-1) / max(n, 1)
    keep = mentioned.any(-1)
    return per_pair[keep].mean() if keep.any() else per_pair.sum() * 0


def verify_loss(logits, labels, other_weight: float = 0.5):
    """Class-balanced BCE on the verifier's per-piece logits: 1 for a correct
    semantic piece, 0 for a wrong one and (weighted `other_weight`) for a piece
    of a non-semantic word, which should draw no text attention either."""
    parts, weights = [], []
    for value, target, weight in ((1, 1.0, 1.0), (0, 0.0, 1.0), (OTHER, 0.0, other_weight)):
        chosen = labels == value
        if chosen.any() and weight > 0:
            parts.append(weight * F.binary_cross_entropy_with_logits(logits[chosen], logits[chosen].new_full((int(chosen.sum()),), target)))
            weights.append(weight)
    return sum(parts) / sum(weights) if parts else logits.sum() * 0


def grounding_loss(phrase, grounding):
    """Cross-entropy over regions: the phrase of a grounded piece should fit its region best."""
    if phrase is None:
        return grounding.sum() * 0.0
    chosen = grounding >= 0
    if not chosen.any():
        return phrase.sum() * 0
    return F.cross_entropy(phrase[chosen], grounding[chosen].to(phrase.device))


def step_losses(model, bank, texts, source, draws, images, config: InfoTrainConfig, device) -> dict:
    pairs = build_pairs(draws, images, config.shifts)
    out, text, regions = forward_pairs(model, bank, texts, pairs, device)
    size = len(draws)
    losses = {
        "nce_recall": nce_losses(out["recall"], pairs, source, size),
        "nce_precision": nce_losses(out["precision"], pairs, source, size, pairs.polluted),
        "htn": torch.stack([-F.logsigmoid(out["recall"][m] - out["recall"][l]) for m, l in pairs.htn]).mean()
        if pairs.htn else out["recall"].sum() * 0,
    }
    own = pairs.positive + [p for twins in pairs.polluted.values() for p in twins]
    labels = text.labels.to(device)
    losses["text_token"] = text_token_loss(out["text_log_attention"][own], labels[own])
    losses["vision_token"] = vision_token_loss(out["region_log_attention"][own], regions.to(device)[own])
    checks = out["checks"]
    losses["verify"] = verify_loss(checks["logits"][own], labels[own])
    phrase = None if checks["phrase"] is None else checks["phrase"][pairs.positive]
    losses["grounding"] = grounding_loss(phrase, text.grounding[pairs.positive].to(device))
    return losses


def total_loss(losses: dict, config: InfoTrainConfig):
    coarse = sum(losses[k] for k in COARSE)
    fine = sum(losses[k] for k in FINE)
    mix = (config.coarse_weight * coarse + config.fine_weight * fine) / (config.coarse_weight + config.fine_weight)
    return mix + config.verify_weight * losses["verify"] + config.grounding_weight * losses["grounding"]


# ---------------------------------------------------------------- loop

def pick_images(bank_buckets: dict, rng, batch_size: int) -> list[int]:
    """A batch of images sharing one region count, buckets drawn by size."""
    usable = {n: idx for n, idx in bank_buckets.items() if len(idx) >= 2}
    counts = np.array([len(v) for v in usable.values()], dtype=float)
    n = list(usable)[int(rng.choice(len(usable), p=counts / counts.sum()))]
    chosen = rng.choice(len(usable[n]), size=min(batch_size, len(usable[n])), replace=False)
    return [usable[n][int(i)] for i in chosen]


def learning_rate(config: InfoTrainConfig, state: TrainState) -> float:
    return warmup_cosine(config.lr, state.step, state.elapsed, warmup_steps=WARMUP_STEPS,
                         minutes=config.minutes, steps=config.steps, floor=0.05)


def finished(config: InfoTrainConfig, state: TrainState) -> bool:
    return budget_spent(state, config.steps, config.minutes)


def state_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".train.pt")


def bank_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".features.pt")


@dataclass
class Session:
    """Everything a training run holds."""

    config: InfoTrainConfig
    model: object
    clip_name: str
    clip_config: dict
    crop: dict
    bank: object
    source: object
    texts: object
    optimizer: object
    state: TrainState
    device: object
    evaluate_gold: Callable | None = None  # the probe's evaluator (bench.evaluate.evaluate_gold)


def open_session(config: InfoTrainConfig) -> Session:
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    clip, name, clip_config, crop = load_clip(config, device)
    backbone = make_backbone(clip, name, crop, device)
    nlp = load_spacy()
    source = FileSource(config.data, nlp) if config.data else DemoSource(config.demo_scenes, config.seed)
    key = f"{source.bank_key()}:{state_fingerprint(clip)}:{crop}"
    bank = cached_bank(bank_path(config.out), key,
                       lambda: encode_bank(backbone, source.images(), len(source), config.progress))
    model = new_head(clip, backbone.dim, config).to(device)
    optimizer = torch.optim.AdamW(model.head_parameters(), lr=config.lr, weight_decay=config.weight_decay)
    state = TrainState()
    if config.resume:
        state = load_training(model, optimizer, config)
    return Session(config, model, name, clip_config, crop, bank, source, Texts(backbone, nlp), optimizer, state, device)


def train_infometic(config: InfoTrainConfig, evaluate_gold: Callable | None = None) -> TrainState:
    """Train to the budget, checkpointing as it goes. With `config.probe_gold`,
    each checkpoint is scored on that gold file by `evaluate_gold` (default:
    capscope.bench.evaluate.evaluate_gold; tests pass a stand-in)."""
    s = open_session(config)
    s.evaluate_gold = evaluate_gold or bench_evaluate_gold
    buckets = s.bank.buckets()
    log.info("training InfoMetIC head on %s from step %d (%.1f min done); %d images; checkpoint %s",
             s.device, s.state.step, s.state.elapsed / 60, len(s.bank), config.out)
    bar = tqdm(total=config.steps, initial=s.state.step, desc="train infometic", unit="step",
               disable=not config.progress, mininterval=5.0)
    last_save, window = time.monotonic(), []
    s.model.train()
    while not finished(config, s.state):
        started = time.monotonic()
        window.append(train_step(s, buckets))
        s.state.elapsed += time.monotonic() - started
        s.state.step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean([w['total'] for w in window[-20:]]):.3f}", min=f"{s.state.elapsed / 60:.1f}")
        if time.monotonic() - last_save >= 60 * config.checkpoint_minutes:
            checkpoint(s, window, bar)
            last_save, window = time.monotonic(), []
    bar.close()
    checkpoint(s, window, bar)
    return s.state


def train_step(s: Session, buckets) -> dict:
    rng = np.random.default_rng(np.random.SeedSequence([s.config.seed, 11, s.state.step]))
    images = pick_images(buckets, rng, s.config.batch_size)
    draws = [s.source.draw(i, rng) for i in images]
    for group in s.optimizer.param_groups:
        group["lr"] = learning_rate(s.config, s.state)
    losses = step_losses(s.model, s.bank, s.texts, s.source, draws, images, s.config, s.device)
    loss = total_loss(losses, s.config)
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(s.model.head_parameters(), 1.0)
    s.optimizer.step()
    return {"total": float(loss.detach()), **{k: float(v.detach()) for k, v in losses.items()}}


# ---------------------------------------------------------------- checkpoints

def save_checkpoint(s: Session, path: Path, half: bool) -> None:
    raw = capscope_checkpoint(s.model, s.clip_name, s.clip_config, crop=dict(s.crop),
                              training={"steps": s.state.step, "minutes": round(s.state.elapsed / 60, 2),
                                        "seed": s.config.seed})
    raw["state_dict"] = {k: (v.half() if half and v.is_floating_point() else v).detach().cpu().clone()
                         for k, v in raw["state_dict"].items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomically(Path(path), lambda tmp: torch.save(raw, tmp))


def save_training(s: Session) -> None:
    save_checkpoint(s, s.config.out, s.config.half)
    payload = {"optimizer": s.optimizer.state_dict(), "state": asdict(s.state),
               "head": {k: v.detach().cpu() for k, v in s.model.state_dict().items() if not k.startswith("clip_backbone.")},
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(s.config).items()}}
    write_atomically(state_path(s.config.out), lambda tmp: torch.save(payload, tmp))


def load_training(model, optimizer, config: InfoTrainConfig) -> TrainState:
    payload = read_checkpoint(state_path(config.out), "InfoMetIC training state")
    model.load_state_dict(payload["head"], strict=False)
    optimizer.load_state_dict(payload["optimizer"])
    return TrainState(**payload["state"])


def checkpoint(s: Session, window: list[dict], bar) -> None:
    if window:
        s.state.loss_history.append((s.state.step, {k: float(np.mean([w[k] for w in window])) for k in window[0]}))
    save_training(s)
    figures = probe(s) if s.config.probe_gold else None
    if figures:
        s.state.probes.append((s.state.step, figures))
        save_training(s)
    loss_text = ", ".join(f"{k} {v:.3f}" for k, v in s.state.loss_history[-1][1].items()) if window else "n/a"
    bar.write(f"step {s.state.step} ({s.state.elapsed / 60:.1f} min): {loss_text}; saved {s.config.out}")
    if figures:
        bar.write("held-out: " + json.dumps(figures))


def probe(s: Session) -> dict:
    """The checkpoint just saved, scored on the probe gold file through the public Scorer."""
    was_training = s.model.training
    scorer = Scorer(["infometic"], device=str(s.device), regions="given",
                    infometic_checkpoint=str(s.config.out), token_rule="relative")
    items = read_json_lines(s.config.probe_gold)
    figures = s.evaluate_gold(scorer, "infometic", items, Path(s.config.probe_gold).parent, token_rule="relative",
                              beta=scorer.beta)
    s.model.train(was_training)
    keep = ("text_accuracy", "incorrect_token_f1", "incorrect_token_auroc", "vision_accuracy", "region_auroc")
    out = {k: _round(figures[k]) for k in keep}
    out["paper_rule"] = {k: _round(v) for k, v in figures["token_rules"]["paper"].items()}
    out["foil"] = _round(figures["foil"]["foil_accuracy"])
    out["trivial_text_accuracy"] = _round(figures["trivial"]["text_accuracy"])
    return out


def _round(v):
    return None if v is None else round(float(v), 4)
