"""clip4dm's packed passes (metrics/clip4dm_relevance.py): each distinct text runs forward
once in a pass of fixed shape, each (text, image) row backward once on its
`<eot>` row only. A caption's row must be the same floats whatever it is batched
with, and the `<eot>`-row gradient must be the gradient through the whole text."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from capscope.metrics.clip4dm_relevance import WINDOW_ATTRIBUTION_ROWS, TextRelevance
from capscope.metrics.clipscore import PROMPT
from capscope.metrics.scorer import Scorer

SHORT = ["a red square above a blue square.", "a cat", "a red square above a blue square.",
         "two giraffes depicts a photo. a t-shirt, 3.5 bananas"]
LONG = " ".join(["a small red circle beside a large blue square, under a green sky."] * 8)


@pytest.fixture(scope="module")
def scorer(clip_checkpoint):
    return Scorer(["clip4dm"], device="cpu", clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint),
                  clip4dm_epsilon=0.0)


@pytest.fixture(scope="module")
def images():
    rng = np.random.RandomState(5)
    blocks = np.zeros((200, 200, 3), dtype="uint8")
    blocks[:100] = (220, 30, 30)
    return [Image.fromarray((rng.rand(160, 200, 3) * 255).astype("uint8")), Image.fromarray(blocks)]


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_a_caption_gets_the_same_floats_alone_and_in_any_batch(scorer, images):
    pairs = [(i, c) for c in SHORT + [LONG] for i in (0, 1)]
    alone = {(i, c): scorer.score(images[i], c)["metrics"]["clip4dm"] for i, c in dict.fromkeys(pairs)}
    assert len(alone[(0, LONG)]["windows"]) > 1
    rows = [{"id": str(k), "image": images[i], "caption": c} for k, (i, c) in enumerate(pairs * 3)]
    assert sum(len(alone[p]["windows"]) for p in pairs * 3) > 2 * WINDOW_ATTRIBUTION_ROWS["cpu"]  # several passes
    for batch in (rows, rows[::-1]):
        for given, row in zip(batch, scorer.score_batch(batch)):
            pair = (images.index(given["image"]), given["caption"])
            assert row["metrics"]["clip4dm"] == alone[pair], pair


def whole_graph(relevance: TextRelevance, image: torch.Tensor, ids: list[int]) -> tuple[float, list[float]]:
    """The plain computation: the text alone at its own length, every position
    of the attributed blocks in the graph, their probabilities differentiated."""
    tower, blocks = relevance.tower, relevance.blocks
    x = tower.token_embedding(torch.tensor([ids])) + tower.positional_embedding[: len(ids)]
    mask = torch.full((len(ids), len(ids)), float("-inf")).triu(1)
    probs = []
    with torch.enable_grad():
        for n, block in enumerate(blocks):
            attn = block.attn
            heads, width = attn.num_heads, x.shape[-1]
            q, k, v = (t.reshape(1, len(ids), heads, -1).transpose(1, 2) for t in
                       F.linear(block.ln_1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1))
            p = ((q * (width // heads) ** -0.5) @ k.transpose(-2, -1) + mask).softmax(dim=-1)
            if n >= len(blocks) - relevance.layers:
                probs.append(p)
            x = x + block.ls_1(attn.out_proj((p @ v).transpose(1, 2).reshape(1, len(ids), width)))
            x = x + block.ls_2(block.mlp(block.ln_2(x)))
        text = tower.ln_final(x[:, -1]) @ tower.text_projection
        cosine = F.cosine_similarity(text, image[None])[0]
        grads = torch.autograd.grad(cosine, probs)
    relevance_map = sum((g * p.detach()).mean(dim=1) for g, p in zip(grads, probs)) / len(probs)
    return float(cosine.detach()), relevance_map[0, -1, 1:-1].tolist()


@pytest.mark.parametrize("template", [PROMPT, ""])
def test_the_eot_row_gradient_is_the_whole_texts_gradient(scorer, template):
    backbone = scorer.metrics["clip4dm"].backbone
    relevance = TextRelevance(backbone, template=template)  # with the cached template prefix and without
    texts = [PROMPT + c for c in SHORT[1:]] + ["no template here", PROMPT + LONG]
    sequences = [relevance.ids(t) for t in texts]
    torch.manual_seed(4)
    image_embeddings = torch.randn(len(texts), backbone.dim)
    ours = relevance(image_embeddings, sequences)
    for image, ids, attribution in zip(image_embeddings, sequences, ours):
        cosine, pieces = whole_graph(relevance, image, ids)
        scale = max(abs(s) for s in pieces)
        assert attribution.cosine == pytest.approx(cosine, abs=1e-6)
        assert len(attribution.piece_scores) == len(pieces) == len(ids) - 2
        assert np.allclose(attribution.piece_scores, pieces, rtol=0, atol=2e-5 * scale)
