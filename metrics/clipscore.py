"""CLIP-S / RefCLIP-S (Hessel et al., 2021) and PAC-S / RefPAC-S (Sarto et al.,
2023): the same formulas with w = 2.5 and w = 2.0 and another CLIP. The caption
and every reference are prefixed "A photo depicts ", as jmhessel/clipscore does."""
from __future__ import annotations

import torch

PROMPT = "A photo depicts "
CLIP_S_WEIGHT = 2.5
PAC_S_WEIGHT = 2.0


def clip_s(image: torch.Tensor, text: torch.Tensor, w: float) -> torch.Tensor:
    """w * max(cos(v, t), 0) for rows of image and text features."""
    cos = torch.nn.functional.cosine_similarity(image, text, dim=-1)
    return w * cos.clamp(min=0)


def ref_score(candidate_score: torch.Tensor, text: torch.Tensor, references: list[torch.Tensor]) -> torch.Tensor:
    """Harmonic mean of the candidate's image score and max(0, max_r cos(t, r))."""
    out = []
    for score, t, refs in zip(candidate_score, text, references):
        best = torch.nn.functional.cosine_similarity(t[None], refs, dim=-1).max().clamp(min=0)
        out.append(harmonic_mean(score, best))
    return torch.stack(out)


def harmonic_mean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    total = a + b
    return torch.where(total > 0, 2 * a * b / total.clamp(min=1e-12), torch.zeros_like(total))
