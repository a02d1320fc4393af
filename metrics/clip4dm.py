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
image side is a constant); the text pass and its gradients run in float32 at
every `--precision` (the released code casts CLIP to float16 on CUDA;
attributions are ~1e-4 and need the precision): only the cached image embedding
follows the scorer's precision. And the work is split in two:
- a forward pass per distinct text, image or not (`TextRelevance.text_states`):
  the causal mask makes the template's states the same in every text, so they
  are computed once and each pass runs the caption's ids only, padded to their
  length bucket, a fixed number of texts a pass (filled with copies);
- a backward per (text, image) row, on the `<eot>` row only
  (`TextRelevance.attribute_rows`): only `R[eot, :]` is read, and the output
  depends on an attributed block's `<eot>` row through that row's own query,
  key and value alone, so the `<eot>` rows are run again through the
  attributed blocks with the other positions' keys and values as constants,
  `CHUNK` rows a pass on a CPU (a long caption's windows in passes of their
  own, wider), keys padded to the context, and differentiated there.
Every pass has a fixed shape, so a caption's numbers do not depend on what it
is batched with (as in metrics/tower_passes.py). The relevance itself is
computed in clip4dm_relevance.py.

The row format (scores, token_scores, token_correct, words, pieces) is in
docs/formats.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from .clip4dm_relevance import LAYERS, Attribution, TextRelevance
from .clipscore import CLIP_S_WEIGHT, PROMPT
from .encoder import ClipBackbone
from .image_cache import ImageFeatures
from .pairs import PreparedPair
from .result import MetricResult, PieceScore, WordScore
from .text import Token, bpe_pieces
from .windows import weighted_mean

EPSILON = -5e-5      # main.py --epsilon: a word below it is misaligned
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



class Clip4DMMetric:
    """CLIP4DM's word verdicts and F-CLIPScore on the scorer's CLIP."""

    def __init__(self, backbone: ClipBackbone, epsilon: float = EPSILON, layers: int = LAYERS, name: str = "clip4dm"):
        self.name, self.backbone, self.epsilon, self.layers = name, backbone, epsilon, layers
        self.options = {"epsilon": epsilon, "layers": layers}  # recorded in every row's model block
        self.relevance = TextRelevance(backbone, layers, template=PROMPT)
        self._template_words = len(PROMPT.split())
        self._template_pieces = len(backbone.tokenizer.encode(PROMPT))

    def fits(self, caption: str) -> bool:
        """Whether the text tower reads the prompted caption whole."""
        return self.backbone.reads_whole(PROMPT + caption, self.relevance.context)

    def compute(self, pairs: list[PreparedPair], images: list[ImageFeatures]) -> list[MetricResult]:
        texts = [PROMPT + p.caption for p in pairs]
        embeddings = torch.stack([f.global_feat for f in images])
        attributions = self.relevance(embeddings, [self.relevance.ids(t) for t in texts], [p.window for p in pairs])
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
        pieces = bpe_pieces(pair.caption, pair.tokens, self.backbone.tokenizer)
        return [PieceScore(p.text, p.token, s) for p, s in zip(pieces, piece_scores[self._template_pieces :])]

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
