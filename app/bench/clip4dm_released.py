"""CLIP4DM for one pair the way its released code computes it (naver-ai/clip4dm,
`src/clip4dm.py` and `src/utils.py`, commit cb9e52d), on an open_clip model:
one image and one caption per pass, the image encoded afresh, the caption at
the full 77-token context, float32, the attention probabilities of the last
text blocks kept by giving those blocks an `attention` that records them, and
the words aggregated by its loop over space-split words.

It is `capscope bench`'s naive loop for `clip4dm` and the reference that
tests/test_clip4dm.py holds capscope's batched metric to. It shares no code
with metrics/clip4dm.py on purpose.
"""
from __future__ import annotations

import math

import torch

TEMPLATE = "A photo depicts "
PUNCTUATION = '.,!"?;:" '


def released_clip4dm(model, preprocess, tokenizer, image, caption: str, epsilon: float = -5e-5,
                     layers: int = 3) -> dict:
    """clip_score, the caption's (word, attribution) list and the threshold
    reading's words and sum, for one pair."""
    text = TEMPLATE + caption
    device = next(model.parameters()).device
    ids = tokenizer([text]).to(device)
    probs: list[torch.Tensor] = []
    blocks = list(model.transformer.resblocks)[-layers:]
    for block in blocks:
        block.attention = _recording(block, probs)
    try:
        with torch.enable_grad():
            image_emb = model.encode_image(preprocess(image.convert("RGB")).unsqueeze(0).to(device))
            text_emb = model.encode_text(ids)
            cosine = (image_emb / image_emb.norm(dim=-1, keepdim=True) * text_emb / text_emb.norm(dim=-1, keepdim=True)).sum()
            grads = torch.autograd.grad(cosine, probs)
    finally:
        for block in blocks:
            del block.attention
    relevance = sum((g * p.detach()).mean(dim=1)[0] for g, p in zip(grads, probs)) / len(probs)
    relevance = relevance.cpu()
    eot = int(ids[0].argmax())
    scored = list(zip(tokenizer.encode(text), relevance[eot, 1:eot].tolist()))  # zip drops pieces past 77
    words, used = [], 0
    for word in space_tokenize(text):
        n = len(tokenizer.encode(word))
        chunk = [s for _, s in scored[used : used + n]]
        used += n
        if chunk:
            words.append((word, sum(chunk) / len(chunk)))
    words = words[len(TEMPLATE.split()):]
    kept = [(w, s) for w, s in words if w not in PUNCTUATION and w.strip()]
    negative = [s for _, s in kept if s < epsilon]
    return {"clip_score": max(cosine.item(), 0) * 2.5, "words": words,
            "negative_words": [w for w, s in kept if s < epsilon],
            "sum_negative_attribution": sum(negative) if negative else 0}


def _recording(block, probs: list):
    """A replacement for a block's `attention` (input already layer-normed,
    batch first) that appends its softmax probabilities to `probs`."""
    attn = block.attn

    def attention(q_x, k_x=None, v_x=None, attn_mask=None):
        batch, length, width = q_x.shape
        heads = attn.num_heads
        q, k, v = (q_x @ attn.in_proj_weight.T + attn.in_proj_bias).split(width, dim=-1)
        q, k, v = (t.view(batch, length, heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(width // heads)
        prob = torch.softmax(scores if attn_mask is None else scores + attn_mask, dim=-1)
        probs.append(prob)
        out = torch.einsum("bhqk,bhkd->bhqd", prob, v).permute(0, 2, 1, 3).reshape(batch, length, width)
        return attn.out_proj(out)

    return attention


def space_tokenize(text: str) -> list[str]:
    """Words split on spaces, with "." and "," words of their own."""
    tokens, token = [], ""
    for char in text:
        if char == " " or char in ".,":
            if token:
                tokens.append(token)
                token = ""
            if char != " ":
                tokens.append(char)
        else:
            token += char
    if token:
        tokens.append(token)
    return tokens
