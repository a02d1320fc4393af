"""The losses of a fine-tuning step (see the finetune package's docstring):
the labelled words' shares of the text attention, the verifier, the region
attention, the parent's own outputs on the replayed items, and the L2 pull
towards the parent's weights."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from capscope.metrics.constants import BETA
from capscope.metrics.words import word_threshold
from capscope.train.finetune.tensors import UNKNOWN
from capscope.train.infometic_losses import text_token_loss, verify_loss, vision_token_loss


def region_loss(out: dict, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 10 on mentioned regions, and each labelled-unmentioned region's
    attention logit pushed below the null slot's (a region nobody mentions
    should draw less mass than "nothing")."""
    mentioned = vision_token_loss(out["region_log_attention"], labels)
    log_attention = out["region_log_attention"]
    n = labels.shape[1]
    null = log_attention[:, n:n + 1] if log_attention.shape[1] > n else None
    unmentioned = labels == 0
    if null is None or not unmentioned.any():
        return mentioned
    margin = (log_attention[:, :n] - null)[unmentioned]
    return mentioned + F.softplus(margin).mean()


def token_losses(out: dict, labels: torch.Tensor, token_rule: str, balanced_shares: bool = False) -> torch.Tensor:
    loss = share_loss(out["text_log_attention"], labels, token_rule, balanced=balanced_shares)
    if out.get("checks") is not None and "logits" in out["checks"]:
        return loss + verify_loss(out["checks"]["logits"], labels)
    return loss + text_token_loss(out["text_log_attention"], labels)


def share_loss(log_attention: torch.Tensor, labels: torch.Tensor, token_rule: str, sharpness: float = 2.0,
               balanced: bool = False):
    """What decides a verdict, trained directly: each labelled piece's share of
    the text attention against the token rule's threshold for its caption
    (metrics.words.word_threshold), as a logistic loss on
    sharpness * log(share / threshold). Every labelled piece weighs the same,
    so the boundary stays where the labels' odds of a wrong word put it;
    `balanced` weighs wrong and correct pieces as two equal halves instead,
    which moves it by those odds (about 1:10) and flags more words."""
    semantic = ((labels == 0) | (labels == 1) | (labels == UNKNOWN)).sum(-1)
    thresholds = torch.tensor([word_threshold(token_rule, BETA, int(n), 1.0) for n in semantic],
                              device=log_attention.device, dtype=log_attention.dtype)
    margin = sharpness * (log_attention - thresholds.log()[:, None])
    labelled = (labels == 0) | (labels == 1)
    if not labelled.any():
        return log_attention.sum() * 0
    correct = labels[labelled] == 1
    losses = F.binary_cross_entropy_with_logits(margin[labelled], correct.to(margin.dtype), reduction="none")
    if not balanced:
        return losses.mean()
    return torch.stack([losses[side].mean() for side in (correct, ~correct) if side.any()]).mean()


def parent_loss(out: dict, targets: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """KL(parent || child) of the text and the region attention on the items
    whose parent outputs were kept (the replayed ones): in its own world the
    child keeps saying what the parent said, not only the labels' verdicts."""
    if targets is None:
        return out["text_log_attention"].sum() * 0
    rows, text, region = targets

    def kl(log_p, log_q):
        return (log_p.exp() * (log_p - log_q)).sum(-1)

    return (kl(text, out["text_log_attention"][rows]) + kl(region, out["region_log_attention"][rows])).mean()


def anchor_loss(params: list[torch.Tensor], parent: list[torch.Tensor]) -> torch.Tensor:
    return sum(((p - p0) ** 2).sum() for p, p0 in zip(params, parent))
