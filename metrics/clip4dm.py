"""CLIP4DM (Nam et al., "Extract Free Dense Misalignment from CLIP", AAAI 2025):
which words of a caption the image contradicts, from any open_clip model, with
no training.

For a caption, the text "A photo depicts <caption>" goes through CLIP's text
tower; `s` is the cosine of its embedding with the image's. In each of the last
`layers` text blocks the attention probabilities `A` (heads x T x T) and their
gradient `dA = ds/dA` give `mean over heads of (dA * A)`; the relevance `R` is
the mean of those maps over the layers, with no ReLU, so a negative value is
evidence against the image. A BPE piece's attribution is `R[eot, piece]`; a
word's, the mean of its pieces' (words as the released code splits them:
spaces, with "." and "," words of their own). A word scoring below `epsilon`
is misaligned. F-CLIPScore = (sum of the misaligned words' attributions) *
(1 - CLIP-S / 2.5): 0 for a caption with none, lower is worse.

How capscope differs from the released code, none of it changing a number
beyond float noise: the image embedding comes from the scorer's per-image
cache (the gradient is taken with respect to text attentions only, so the
image side is a constant); captions run in chunks of `CHUNK` per forward and
backward pass, each at the chunk's real length instead of 77 (the causal mask
makes positions after `<eot>` irrelevant to it), the blocks before the last
`layers` without autograd; and the text pass and its gradients run in float32
at every `--precision` (the released code casts CLIP to float16 on CUDA;
attributions are ~1e-4 and need the precision): only the cached image embedding
follows the scorer's precision.

The row format (scores, token_scores, token_correct, words, pieces) is in
docs/formats.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from .clipscore import CLIP_S_WEIGHT, PROMPT
from .encoder import ClipBackbone, ImageFeatures, padded_ids
from capscope.common.errors import ModelUnavailable
from .pairs import PreparedPair
from .result import MetricResult, PieceScore, WordScore
from .text import Token, bpe_pieces
from .windows import weighted_mean

EPSILON = -5e-5      # main.py --epsilon: a word below it is misaligned
LAYERS = 3           # main.py --start_layer_text -3: the last three text blocks
CHUNK = 16           # captions per forward/backward pass: bounds memory for long batches
PUNCTUATION = '.,!"?;:" '  # the released threshold reading drops a word that is a substring of this


@dataclass(frozen=True)
class Word:
    """A word as the released code splits text: its characters in the text,
    and once scored its attribution and how many piece scores it averages."""

    text: str
    start: int
    end: int
    score: float = 0.0
    pieces: int = 0


def split_words(text: str) -> list[Word]:
    """Words separated by spaces, with "." and "," words of their own (other
    punctuation stays inside its word), with their character spans."""
    words, start = [], None
    for i, char in enumerate(text):
        if char == " " or char in ".,":
            if start is not None:
                words.append(Word(text[start:i], start, i))
                start = None
            if char != " ":
                words.append(Word(char, i, i + 1))
        elif start is None:
            start = i
    if start is not None:
        words.append(Word(text[start:], start, len(text)))
    return words


def is_punctuation(word: str) -> bool:
    """The released threshold reading's test (a substring test, kept as it is)."""
    return word in PUNCTUATION or not word.strip()


@dataclass
class Attribution:
    """One caption's raw CLIP4DM output: the cosine, and one attribution per
    BPE piece of the templated text that the model saw (at most context - 2)."""

    cosine: float
    piece_scores: list[float]


class TextRelevance:
    """Gradient x attention relevance of an open_clip text tower (any model whose
    text blocks are open_clip's `ResidualAttentionBlock`)."""

    def __init__(self, backbone: ClipBackbone, layers: int = LAYERS):
        tower = backbone.text_tower
        blocks = getattr(getattr(tower, "transformer", None), "resblocks", None)
        if blocks is None or not all(hasattr(getattr(b, "attn", None), "in_proj_weight") for b in blocks):
            raise ModelUnavailable(f"clip4dm: needs an open_clip text transformer with standard attention; {backbone.name} has none")
        if not hasattr(backbone.tokenizer, "encode") or not hasattr(backbone.tokenizer, "eot_token_id"):
            raise ModelUnavailable(f"clip4dm: needs CLIP's BPE tokenizer; {backbone.name} uses another")
        if not 1 <= layers <= len(blocks):  # unavailable, not wrong: a server leaves clip4dm out and goes on
            raise ModelUnavailable(f"clip4dm: --clip4dm-layers must be between 1 and {len(blocks)} for "
                                   f"{backbone.name}, not {layers}")
        self.backbone, self.tower, self.blocks, self.layers = backbone, tower, blocks, layers
        self.context = int(tower.positional_embedding.shape[0])
        self.batch_first = getattr(tower.transformer, "batch_first", True)

    def ids(self, text: str) -> list[int]:
        """`<sot> pieces <eot>`, cut to the context with `<eot>` last, as open_clip's tokenizer does."""
        tok = self.backbone.tokenizer
        ids = [tok.sot_token_id] + tok.encode(text) + [tok.eot_token_id]
        if len(ids) > self.context:
            ids = ids[: self.context]
            ids[-1] = tok.eot_token_id
        return ids

    def __call__(self, image_embeddings: torch.Tensor, sequences: list[list[int]]) -> list[Attribution]:
        """Attributions of each id sequence against the image embedding of its row."""
        out: list[Attribution] = []
        for start in range(0, len(sequences), CHUNK):
            out += self.attribute_chunk(image_embeddings[start : start + CHUNK], sequences[start : start + CHUNK])
        return out

    def attribute_chunk(self, images: torch.Tensor, sequences: list[list[int]]) -> list[Attribution]:
        device = self.backbone.device
        length = max(len(s) for s in sequences)
        ids = padded_ids(sequences, length).to(device)
        eot = torch.tensor([len(s) - 1 for s in sequences], device=device)
        mask = self._causal_mask(length, device)
        with torch.inference_mode(False), torch.enable_grad():
            x = self._frozen_blocks(ids, mask)
            probs = []
            for block in self.blocks[len(self.blocks) - self.layers :]:
                x, p = attend(block, x, mask)
                probs.append(p)
            text = self._project(self.tower.ln_final(x)[torch.arange(len(sequences), device=device), eot])
            image = images.clone().to(device)
            cosine = F.cosine_similarity(text, image, dim=-1)
            grads = torch.autograd.grad(cosine.sum(), probs)
        cosine = cosine.detach().cpu()
        relevance = sum((g * p.detach()).mean(dim=1) for g, p in zip(grads, probs)) / self.layers
        rows = relevance[torch.arange(len(sequences), device=device), eot].cpu()
        return [Attribution(float(cosine[b]), rows[b, 1 : len(seq) - 1].tolist()) for b, seq in enumerate(sequences)]

    def _causal_mask(self, length: int, device) -> torch.Tensor:
        mask = getattr(self.tower, "attn_mask", None)
        if mask is not None:
            return mask[:length, :length].to(device)
        return torch.full((length, length), float("-inf"), device=device).triu(1)

    @torch.no_grad()
    def _frozen_blocks(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Embeddings through the blocks before the attributed ones (B x T x W)."""
        tower = self.tower
        x = tower.token_embedding(ids) + tower.positional_embedding[: ids.shape[1]]
        x = x if self.batch_first else x.transpose(0, 1)
        for block in self.blocks[: len(self.blocks) - self.layers]:
            x = block(x, attn_mask=mask)
        return (x if self.batch_first else x.transpose(0, 1)).detach().requires_grad_()  # in the graph even when the weights are frozen

    def _project(self, pooled: torch.Tensor) -> torch.Tensor:
        proj = self.tower.text_projection
        return proj(pooled) if isinstance(proj, torch.nn.Module) else pooled @ proj


def attend(block, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One open_clip `ResidualAttentionBlock` on B x T x W, computing its attention
    by hand so that the probabilities (B x heads x T x T) are in the graph."""
    attn = block.attn
    batch, length, width = x.shape
    heads = attn.num_heads
    q, k, v = F.linear(block.ln_1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(batch, length, heads, width // heads).transpose(1, 2) for t in (q, k, v))
    probs = ((q * (width // heads) ** -0.5) @ k.transpose(-2, -1) + mask).softmax(dim=-1)
    out = attn.out_proj((probs @ v).transpose(1, 2).reshape(batch, length, width))
    x = x + block.ls_1(out)
    x = x + block.ls_2(block.mlp(block.ln_2(x)))
    return x, probs


class Clip4DMMetric:
    """CLIP4DM's word verdicts and F-CLIPScore on the scorer's CLIP."""

    def __init__(self, backbone: ClipBackbone, epsilon: float = EPSILON, layers: int = LAYERS, name: str = "clip4dm"):
        self.name, self.backbone, self.epsilon, self.layers = name, backbone, epsilon, layers
        self.options = {"epsilon": epsilon, "layers": layers}  # recorded in every row's model block
        self.relevance = TextRelevance(backbone, layers)
        self._template_words = len(PROMPT.split())

    def fits(self, caption: str) -> bool:
        """Whether the text tower reads the prompted caption whole."""
        return self.backbone.reads_whole(PROMPT + caption, self.relevance.context)

    def compute(self, pairs: list[PreparedPair], images: list[ImageFeatures]) -> list[MetricResult]:
        texts = [PROMPT + p.caption for p in pairs]
        embeddings = torch.stack([f.global_feat for f in images])
        attributions = self.relevance(embeddings, [self.relevance.ids(t) for t in texts])
        return [self._row(pair, text, a) for pair, text, a in zip(pairs, texts, attributions)]

    def merge_scores(self, scores: list[dict[str, float]], weights: list[int]) -> dict[str, float]:
        """A caption read in windows: CLIP-S the windows' weighted mean, the
        negative attribution their sum (every misaligned word of the caption
        counts, as in one window), F-CLIPScore from those two by its formula."""
        clip_s = weighted_mean([{"c": s["clip_s"]} for s in scores], weights)["c"]
        negative = sum(s["negative_attribution"] for s in scores)
        return {"clip_s": clip_s, "f_clip_s": negative * (1 - clip_s / CLIP_S_WEIGHT), "negative_attribution": negative}

    def _row(self, pair: PreparedPair, text: str, attribution: Attribution) -> MetricResult:
        words = self.word_scores(text, attribution.piece_scores)
        token_scores = token_attributions(pair.tokens, words, len(PROMPT))
        clip_s = CLIP_S_WEIGHT * max(attribution.cosine, 0.0)
        negative = sum((w.score for w in words if not is_punctuation(w.text) and w.score < self.epsilon), 0.0)
        return MetricResult(
            scores={"clip_s": clip_s, "f_clip_s": negative * (1 - clip_s / CLIP_S_WEIGHT),
                    "negative_attribution": negative},
            token_scores=[None if s is None else s[0] for s in token_scores],
            token_correct=[(s[0] >= self.epsilon) if (t.semantic and s is not None) else None
                           for t, s in zip(pair.tokens, token_scores)],
            pieces=self._pieces(pair, attribution.piece_scores),
            words=[WordScore(w.text, w.start - len(PROMPT), w.end - len(PROMPT), w.score) for w in words],
        )

    def word_scores(self, text: str, piece_scores: list[float]) -> list[Word]:
        """The caption's words with their attributions, as the released code
        aggregates them: each word takes as many of the text's piece scores as
        its own BPE has pieces, in order; a word left without any (past the
        context) is dropped, and so are the template's words. Spans are in
        `text`; `pieces` counts the scores averaged."""
        scored, used = [], 0
        for word in split_words(text):
            n = len(self._encode(word.text))
            chunk = piece_scores[used : used + n]
            used += n
            if chunk:
                scored.append(Word(word.text, word.start, word.end, sum(chunk) / len(chunk), len(chunk)))
        return scored[self._template_words :]

    def _pieces(self, pair: PreparedPair, piece_scores: list[float]) -> list[PieceScore]:
        """The caption's pieces the model saw, linked to tokens (the template's are left out)."""
        offset = len(self.backbone.tokenizer.encode(PROMPT))
        pieces = bpe_pieces(pair.caption, pair.tokens, self.backbone.tokenizer)
        return [PieceScore(p.text, p.token, s) for p, s in zip(pieces, piece_scores[offset:])]

    def _encode(self, word: str) -> tuple[int, ...]:
        return _encode_word(self.backbone.tokenizer, word)


@lru_cache(maxsize=65536)
def _encode_word(tokenizer, word: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(word))


def token_attributions(tokens: list[Token], words: list[Word], offset: int) -> list[tuple[float, int] | None]:
    """Per token: (score, pieces) from the released code's words that overlap it
    (`words` spans in the templated text, `offset` the template's length). A
    token inside one word gets that word's attribution; one spanning several
    ("3.5") the mean over all their pieces; one that no scored word covers
    (past the context) None."""
    out: list[tuple[float, int] | None] = []
    for token in tokens:
        start, end = token.start + offset, token.end + offset
        hit = [w for w in words if w.start < end and start < w.end]
        n = sum(w.pieces for w in hit)
        if len(hit) == 1:
            out.append((hit[0].score, n))
        else:
            out.append((sum(w.score * w.pieces for w in hit) / n, n) if n else None)
    return out
