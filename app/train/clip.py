"""`capscope train clip`: the demo CLIP trained from scratch on fresh scenes.

Recipe (BRIEF, "Demo world"): whole scenes alone stay at chance, so every
step also shows each shape on its own, cropped with a 15% margin, paired with
partial descriptions ("red circle", "circle", "red"). Half the crops are
resized to the model's input (what a plain crop-and-resize pipeline sees: size
is lost, so size words are left out of the loss for them); the other half are
pasted at true scale on a fixed canvas (`padded_crop`), so "small"/"large"
can be learned. The loss is a sigmoid BCE against the true image-text match
matrix, computed from the scene objects, so partial descriptions and repeats
are right rather than noise.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import open_clip
import torch
import torch.nn.functional as F
from open_clip.transformer import text_global_pool
from tqdm import tqdm

from capscope.common.stats import auroc
from capscope.demo.clip_model import demo_clip_tokenizer, new_demo_clip, save_demo_clip, write_atomically
from capscope.demo.demo_captions import Caption, Phrase, make_caption, phrases_true, pollute
from capscope.demo.demo_regions import distractor_box, scene_regions
from capscope.demo.scenes import ATTRIBUTES, COLOURS, KINDS, SIZES, crop_box, make_scene, padded_crop
from capscope.metrics.loading import read_checkpoint, resolve_device
from capscope.train.schedule import TrainState, budget_spent, warmup_cosine

log = logging.getLogger(__name__)

CROP_MARGIN = 0.15
PAD_CANVAS = 128
WARMUP_STEPS = 50


@dataclass
class ClipTrainConfig:
    out: Path
    minutes: float | None = 15.0
    steps: int | None = None
    seed: int = 0
    device: str = "auto"
    resume: bool = False
    batch_scenes: int = 48
    lr: float = 5e-4
    weight_decay: float = 0.1
    threads: int | None = None
    checkpoint_minutes: float = 5.0
    probe_scenes: int = 150
    progress: bool = True


# ---------------------------------------------------------------- batches

@dataclass(frozen=True)
class View:
    """An image the model sees and the shapes in it."""
    image: object            # PIL image
    shapes: tuple
    size_visible: bool


@dataclass(frozen=True)
class Text:
    text: str
    phrases: tuple[Phrase, ...]
    count: int | None = None

    @property
    def says_size(self) -> bool:
        return any(p.size is not None for p in self.phrases)

    @classmethod
    def of_caption(cls, caption: Caption) -> "Text":
        return cls(caption.text, caption.phrases, caption.count)

    @classmethod
    def of_phrase(cls, phrase: Phrase) -> "Text":
        return cls(phrase.text(), (phrase,))


def match_matrix(views: list[View], texts: list[Text]) -> tuple[np.ndarray, np.ndarray]:
    """(targets, weights), views x texts: 1 where the text is true of the view;
    weight 0 where the view cannot show what the text claims (size on a resized crop)."""
    targets = np.zeros((len(views), len(texts)), dtype=np.float32)
    weights = np.ones_like(targets)
    for i, view in enumerate(views):
        for j, text in enumerate(texts):
            if text.says_size and not view.size_visible:
                weights[i, j] = 0.0
                continue
            count_ok = text.count is None or text.count == len(view.shapes)
            targets[i, j] = float(count_ok and phrases_true(text.phrases, list(view.shapes)))
    return targets, weights


def partial_phrase(shape, rng, with_size: bool) -> Phrase:
    """A description of one shape by a random non-empty subset of its attributes."""
    attrs = ATTRIBUTES if with_size else tuple(a for a in ATTRIBUTES if a != "size")
    while True:
        keep = [a for a in attrs if rng.random() < 0.5]
        if keep:
            return Phrase(**{a: (getattr(shape, a) if a in keep else None) for a in ATTRIBUTES})


def shape_views(scene, index: int, image, padded: bool) -> View:
    shape = scene.shapes[index]
    if padded:
        return View(padded_crop(image, shape.box, PAD_CANVAS, CROP_MARGIN), (shape,), True)
    return View(image.crop(crop_box(shape.box, CROP_MARGIN)), (shape,), False)


def make_batch(rng: np.random.Generator, n_scenes: int) -> tuple[list[View], list[Text]]:
    views, texts = [], {}
    for _ in range(n_scenes):
        scene = make_scene(rng)
        clean = make_caption(scene, rng)
        polluted = pollute(clean, scene, rng)
        image = scene.image()
        views.append(View(image, tuple(scene.shapes), True))
        for caption in (clean, polluted):
            texts.setdefault(caption.text, Text.of_caption(caption))
        for index, shape in enumerate(scene.shapes):
            padded = bool(rng.random() < 0.5)
            views.append(shape_views(scene, index, image, padded))
            phrase = partial_phrase(shape, rng, with_size=padded)
            texts.setdefault(phrase.text(), Text.of_phrase(phrase))
        views.append(background_view(scene, image, rng))
    return views, list(texts.values())


def background_view(scene, image, rng) -> View:
    """A distractor region (mostly background), which no text describes: region
    scores at inference take the best match over regions like these too."""
    box = distractor_box(rng, scene) or (0, 0, 32, 32)
    if rng.random() < 0.5:
        return View(padded_crop(image, box, PAD_CANVAS, CROP_MARGIN), (), True)
    return View(image.crop(crop_box(box, CROP_MARGIN)), (), False)


# ---------------------------------------------------------------- model I/O

class Encoder:
    """Images and texts into normalised embeddings. Texts are cut to their real
    length: the causal text tower gives the same result as at full context."""

    def __init__(self, model, device):
        self.model, self.device = model, device
        self.tokenizer = demo_clip_tokenizer()
        size = model.visual.image_size
        self.preprocess = open_clip.image_transform(size, is_train=False)

    def images(self, pil_images):
        batch = torch.stack([self.preprocess(im) for im in pil_images]).to(self.device)
        return self.model.encode_image(batch, normalize=True)

    def texts(self, strings):
        tokens = self.tokenizer(strings)
        length = int((tokens != 0).sum(dim=1).max())
        return encode_text_short(self.model, tokens[:, :length].to(self.device))


def encode_text_short(model, tokens):
    length = tokens.shape[1]
    x = model.token_embedding(tokens) + model.positional_embedding[:length]
    x = model.transformer(x, attn_mask=model.attn_mask[:length, :length])
    x = model.ln_final(x)
    x = text_global_pool(x, tokens, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None))
    x = x @ model.text_projection
    return F.normalize(x, dim=-1)


def batch_loss(encoder: Encoder, views: list[View], texts: list[Text]):
    targets, weights = match_matrix(views, texts)
    image_emb = encoder.images([v.image for v in views])
    text_emb = encoder.texts([t.text for t in texts])
    model = encoder.model
    logits = model.logit_scale.exp() * image_emb @ text_emb.T + model.logit_bias
    targets = torch.from_numpy(targets).to(logits.device)
    weights = torch.from_numpy(weights).to(logits.device)
    loss = F.binary_cross_entropy_with_logits(logits, targets, weight=weights, reduction="sum")
    return loss / weights.sum()


# ---------------------------------------------------------------- probes

@dataclass
class ProbeSet:
    scenes: list
    captions: list   # (clean, polluted) per scene
    regions: list    # scene_regions per scene


def make_probe_set(seed: int, n: int) -> ProbeSet:
    """Held-out scenes: drawn from a seed sequence training never uses."""
    scenes, captions, regions = [], [], []
    for i in range(n):
        rng = np.random.default_rng(np.random.SeedSequence([seed, 1, i]))
        scene = make_scene(rng)
        clean = make_caption(scene, rng)
        captions.append((clean, pollute(clean, scene, rng)))
        regions.append(scene_regions(scene, rng))
        scenes.append(scene)
    return ProbeSet(scenes, captions, regions)


CHANCE = {
    "colour_word_acc": 1 / len(COLOURS), "shape_word_acc": 1 / len(KINDS), "size_word_acc": 1 / len(SIZES),
    "colour_word_acc_padded": 1 / len(COLOURS), "shape_word_acc_padded": 1 / len(KINDS),
    "clean_over_polluted": 0.5, "wrong_word_auroc": 0.5,
}


def run_probes(encoder: Encoder, probes: ProbeSet) -> dict:
    """Nearest colour / shape / size word on held-out crops; clean caption above
    its polluted twin on whole scenes; and training-free wrong-word AUROC where
    each colour/shape/size word scores its best similarity over the scene's
    regions (padded crops of every shape and distractor)."""
    model = encoder.model
    was_training = model.training
    model.eval()
    with torch.no_grad():
        figures = _probe_figures(encoder, probes)
    model.train(was_training)
    return figures


def _probe_figures(encoder: Encoder, probes: ProbeSet) -> dict:
    shapes = [(scene, i) for scene in probes.scenes for i in range(len(scene.shapes))]
    resized = encoder.images([shape_views(s, i, s.image(), False).image for s, i in shapes])
    padded = encoder.images([shape_views(s, i, s.image(), True).image for s, i in shapes])
    figures = {}
    for name, words, attr in (("colour", tuple(COLOURS), "colour"), ("shape", KINDS, "kind")):
        word_emb = encoder.texts(list(words))
        truth = [words.index(getattr(s.shapes[i], attr)) for s, i in shapes]
        figures[f"{name}_word_acc"] = _nearest_acc(resized @ word_emb.T, truth)
        figures[f"{name}_word_acc_padded"] = _nearest_acc(padded @ word_emb.T, truth)
    sizes = tuple(SIZES)
    figures["size_word_acc"] = _nearest_acc(
        padded @ encoder.texts(list(sizes)).T, [sizes.index(s.shapes[i].size) for s, i in shapes])

    scene_emb = encoder.images([s.image() for s in probes.scenes])
    clean_emb = encoder.texts([c.text for c, _ in probes.captions])
    polluted_emb = encoder.texts([p.text for _, p in probes.captions])
    wins = ((scene_emb * clean_emb).sum(-1) > (scene_emb * polluted_emb).sum(-1)).float().mean()
    figures["clean_over_polluted"] = float(wins)
    figures["wrong_word_auroc"] = _wrong_word_auroc(encoder, probes)
    return {k: round(v, 4) if v is not None else None for k, v in figures.items()}


def _nearest_acc(similarity, truth: list[int]) -> float:
    return float((similarity.argmax(dim=1) == torch.tensor(truth, device=similarity.device)).float().mean())


def _wrong_word_auroc(encoder: Encoder, probes: ProbeSet) -> float | None:
    vocabulary = sorted({w for values in (COLOURS, KINDS, SIZES) for w in values})
    word_emb = dict(zip(vocabulary, encoder.texts(vocabulary)))
    gold, scores = [], []
    for scene, captions, regions in zip(probes.scenes, probes.captions, probes.regions):
        image = scene.image()
        region_emb = encoder.images([padded_crop(image, r.box, PAD_CANVAS, CROP_MARGIN) for r in regions])
        for caption in captions:
            for w, word in enumerate(caption.words):
                if word.role in ATTRIBUTES:
                    gold.append(w == caption.wrong_word)
                    scores.append(-float((region_emb @ word_emb[word.text]).max()))
    return auroc(gold, scores)


def format_probes(figures: dict) -> str:
    return ", ".join(f"{k} {v:.3f} (chance {CHANCE[k]:.3f})" for k, v in figures.items() if v is not None)


# ---------------------------------------------------------------- training loop

def state_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".train.pt")


def learning_rate(config: ClipTrainConfig, state: TrainState) -> float:
    return warmup_cosine(config.lr, state.step, state.elapsed, warmup_steps=WARMUP_STEPS,
                         minutes=config.minutes, steps=config.steps, floor=0.1)


def finished(config: ClipTrainConfig, state: TrainState) -> bool:
    return budget_spent(state, config.steps, config.minutes)


def make_optimizer(model, config: ClipTrainConfig):
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr, betas=(0.9, 0.98), eps=1e-6,
    )


def save_training(model, optimizer, state: TrainState, config: ClipTrainConfig) -> None:
    save_demo_clip(model, config.out)
    payload = {"optimizer": optimizer.state_dict(), "state": asdict(state),
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}}
    write_atomically(state_path(config.out), lambda tmp: torch.save(payload, tmp))


def load_training(model, optimizer, config: ClipTrainConfig) -> TrainState:
    model.load_state_dict(read_checkpoint(config.out, "demo CLIP", weights_only=True))
    payload = read_checkpoint(state_path(config.out), "demo CLIP training state")
    optimizer.load_state_dict(payload["optimizer"])
    return TrainState(**payload["state"])


def train_clip(config: ClipTrainConfig) -> TrainState:
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    model = new_demo_clip().to(device).train()
    optimizer = make_optimizer(model, config)
    state = load_training(model, optimizer, config) if config.resume else TrainState()
    encoder = Encoder(model, device)
    probes = make_probe_set(config.seed, config.probe_scenes) if config.probe_scenes else None
    log.info("training demo CLIP on %s from step %d (%.1f min done); checkpoint %s",
             device, state.step, state.elapsed / 60, config.out)

    bar = tqdm(total=config.steps, initial=state.step, desc="train clip", unit="step",
               disable=not config.progress, mininterval=5.0)
    last_save, losses = time.monotonic(), []
    while not finished(config, state):
        started = time.monotonic()
        losses.append(train_step(encoder, optimizer, config, state))
        state.elapsed += time.monotonic() - started
        state.step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", min=f"{state.elapsed / 60:.1f}")
        if time.monotonic() - last_save >= 60 * config.checkpoint_minutes:
            checkpoint(model, optimizer, state, config, encoder, probes, losses, bar)
            last_save, losses = time.monotonic(), []
    bar.close()
    checkpoint(model, optimizer, state, config, encoder, probes, losses, bar)
    return state


def train_step(encoder: Encoder, optimizer, config: ClipTrainConfig, state: TrainState) -> float:
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, 0, state.step]))
    views, texts = make_batch(rng, config.batch_scenes)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(config, state)
    loss = batch_loss(encoder, views, texts)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def checkpoint(model, optimizer, state, config, encoder, probes, losses, bar) -> None:
    if losses:
        state.loss_history.append((state.step, float(np.mean(losses))))
    figures = run_probes(encoder, probes) if probes else {}
    if figures:
        state.probes.append((state.step, figures))
    save_training(model, optimizer, state, config)
    rate = state.step / state.elapsed if state.elapsed else 0.0
    loss_text = f"{np.mean(losses):.4f}" if losses else "n/a"
    bar.write(f"step {state.step} ({state.elapsed / 60:.1f} min, {rate:.2f} steps/s) loss {loss_text}; "
              f"held-out: {format_probes(figures)}; saved {config.out}")
