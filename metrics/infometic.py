"""InfoMetIC (Hu et al., ACL 2023) computed exactly as the released code does
(see INFOMETIC_REFERENCE.md in the project's shared notes), and InfoCLIP, its
training-free baseline.

Released-code facts that matter for fidelity: the four 512x512 attention
matrices and the box matrix are used as `x @ W`; the encoders get no attention
mask (padding positions attend and are attended to); one LayerNorm `ln` is
shared by all three encoders; the global image slot is masked out of the final
softmax only; text tokens get no positional features.

capscope's own checkpoints may switch on what the paper describes and the
released code lacks (learnable text positions) and a word-region evidence
feature; both are off for the released checkpoint.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

NEG = -10000.0
RELEASED_HEAD_KEYS = 128  # 430 keys in all with the ViT-B/32 backbone's 302


@dataclass
class HeadConfig:
    width: int = 512
    heads: int = 16
    intra_layers: int = 4
    inter_layers: int = 2
    text_len: int = 32
    text_positions: bool = False   # capscope: the paper's learnable text positions
    evidence: bool = False         # capscope: each piece's best region similarity as an input feature


def _encoder(width: int, layers: int, heads: int) -> nn.Module:
    from open_clip.transformer import QuickGELU, Transformer

    return Transformer(width, layers, heads, act_layer=QuickGELU, batch_first=True)


class InfoMetIC(nn.Module):
    """The CLIP backbone plus the InfoMetIC head, with the released state-dict names."""

    def __init__(self, clip_backbone: nn.Module, config: HeadConfig):
        super().__init__()
        self.config = config
        w = config.width
        self.clip_backbone = clip_backbone
        self.image_encoder = _encoder(w, config.intra_layers, config.heads)
        self.text_encoder = _encoder(w, config.intra_layers, config.heads)
        self.fusion_encoder = _encoder(w, config.inter_layers, config.heads)
        self.ln = nn.LayerNorm(w)
        self.bbox_position_embedding = nn.Parameter(torch.randn(4, w) * 0.01)
        self.logit_scale = nn.Parameter(torch.tensor(float(torch.log(torch.tensor(1 / 0.07)))))
        for name in ("img_att_query", "img_att_key", "text_att_query", "text_att_key"):
            setattr(self, name, nn.Parameter(torch.randn(w, w) * w ** -0.5))
        if config.text_positions:
            self.text_position_embedding = nn.Parameter(torch.randn(config.text_len, w) * 0.01)
        if config.evidence:
            self.evidence_embedding = nn.Parameter(torch.randn(2, w) * 0.01)

    def head_parameters(self):
        return [p for n, p in self.named_parameters() if not n.startswith("clip_backbone.")]

    def forward(self, v_g, regions, boxes, sizes, t_g, tokens, text_mask):
        """One batch of pairs with the same number n of regions.

        v_g B x D, regions B x n x D, boxes B x n x 4 (pixels), sizes B x 2 (W, H),
        t_g B x D, tokens B x L x D (every position encoded alone), text_mask B x L.
        Returns recall, precision, cos(v_g, t_g) (B each), region attention
        B x (n+1) (regions, then the null slot) and text attention B x L."""
        batch, n, width = regions.shape
        zeros = regions.new_zeros(batch, 1, width)
        seq = torch.cat([v_g[:, None], regions, zeros], dim=1)
        whole = torch.cat([torch.zeros_like(sizes), sizes], dim=1)
        all_boxes = torch.cat([whole[:, None], boxes, boxes.new_zeros(batch, 1, 4)], dim=1)
        all_boxes = all_boxes / torch.cat([sizes, sizes], dim=1)[:, None]
        image_in = seq + all_boxes @ self.bbox_position_embedding
        text_in = tokens
        if self.config.text_positions:
            text_in = text_in + self.text_position_embedding[: tokens.shape[1]]
        if self.config.evidence:
            text_in = text_in + self._evidence(tokens, regions) @ self.evidence_embedding

        image_out = self.ln(self.image_encoder(image_in))
        text_out = self.ln(self.text_encoder(text_in))
        fused = self.ln(self.fusion_encoder(torch.cat([image_out, text_out], dim=1)))
        image_out, text_out = fused[:, : n + 2], fused[:, n + 2 :]

        image_mask = torch.ones(batch, n + 2, device=regions.device)
        image_mask[:, 0] = 0
        a_v = attention((t_g @ self.img_att_query), image_out @ self.img_att_key, image_mask)
        a_t = attention((v_g @ self.text_att_query), text_out @ self.text_att_key, text_mask)
        scale = self.logit_scale.exp()
        recall = scale * cosine(torch.einsum("bk,bkd->bd", a_v, image_out), v_g)
        precision = scale * cosine(torch.einsum("bk,bkd->bd", a_t, text_out), t_g)
        return recall, precision, cosine(v_g, t_g), a_v[:, 1:], a_t

    @staticmethod
    def _evidence(tokens, regions):
        """Each position's best and mean cosine to the regions (B x L x 2)."""
        if regions.shape[1] == 0:
            return tokens.new_zeros(*tokens.shape[:2], 2)
        sims = F.normalize(tokens, dim=-1) @ F.normalize(regions, dim=-1).transpose(1, 2)
        return torch.stack([sims.max(dim=-1).values, sims.mean(dim=-1)], dim=-1)


def attention(query, keys, mask):
    """softmax(q . k + (1 - mask) * -10000) without 1/sqrt(d), as released."""
    logits = torch.einsum("bd,bkd->bk", query, keys) + (1 - mask) * NEG
    return logits.softmax(dim=-1)


def cosine(x, y):
    """x/|x| . y/|y| with no epsilon, as released."""
    return (x / x.norm(dim=-1, keepdim=True) * (y / y.norm(dim=-1, keepdim=True))).sum(-1)


def infoclip(v_g, regions, t_g, tokens, text_mask, scale: float):
    """InfoCLIP (InfoMetIC appendix D): the same attention and scores on raw
    CLIP features, no encoders, no box term; the null slot's logit is 0."""
    batch, n, width = regions.shape
    seq = torch.cat([v_g[:, None], regions, regions.new_zeros(batch, 1, width)], dim=1)
    image_mask = torch.ones(batch, n + 2)
    image_mask[:, 0] = 0
    a_v = attention(t_g, seq, image_mask)
    a_t = attention(v_g, tokens, text_mask)
    recall = scale * cosine(torch.einsum("bk,bkd->bd", a_v, seq), v_g)
    precision = scale * cosine(torch.einsum("bk,bkd->bd", a_t, tokens), t_g)
    return recall, precision, a_v[:, 1:], a_t


# ---------------------------------------------------------------- checkpoints

OPENAI_VIT_BY_PATCH = {32: "ViT-B-32-quickgelu", 16: "ViT-B-16-quickgelu", 14: "ViT-L-14-quickgelu"}


def released_backbone_name(state: dict) -> str:
    """The open_clip architecture of an InfoMetIC checkpoint's OpenAI CLIP backbone."""
    conv = state.get("clip_backbone.visual.conv1.weight")
    if conv is None:
        raise ValueError("no clip_backbone.visual.conv1.weight: not an InfoMetIC ViT checkpoint")
    name = OPENAI_VIT_BY_PATCH.get(conv.shape[-1])
    if name is None:
        raise ValueError(f"unsupported InfoMetIC backbone with patch size {conv.shape[-1]}")
    return name


def released_head_config(state: dict) -> HeadConfig:
    width = state["ln.weight"].shape[0]
    layers = lambda prefix: len({k.split(".")[2] for k in state if k.startswith(prefix + ".resblocks.")})
    return HeadConfig(
        width=width, heads=width // 32,
        intra_layers=layers("image_encoder"), inter_layers=layers("fusion_encoder"),
    )


def load_strict(model: InfoMetIC, state: dict) -> None:
    """Strict load with every tensor cast to the model's dtype (the released
    file mixes fp16 backbone weights with fp32 head weights)."""
    own = model.state_dict()
    state = {k: v for k, v in state.items() if not k.endswith("attn_mask")}
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(f"InfoMetIC checkpoint does not fit: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()}, strict=True)


def capscope_checkpoint(model: InfoMetIC, clip_name: str, clip_config: dict | None, **extra) -> dict:
    """What `capscope train infometic` saves: the state dict plus what is needed to rebuild it."""
    return {
        "format": "capscope-infometic/1",
        "head_config": asdict(model.config),
        "clip_model": clip_name,
        "clip_config": clip_config,
        "state_dict": model.state_dict(),
        **extra,
    }
