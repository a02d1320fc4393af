"""InfoMetIC (Hu et al., ACL 2023) computed exactly as the released code does
(see INFOMETIC_REFERENCE.md in the project's shared notes), and InfoCLIP, its
training-free baseline.

Released-code facts that matter for fidelity: the four 512x512 attention
matrices and the box matrix are used as `x @ W`; the encoders get no attention
mask (padding positions attend and are attended to); one LayerNorm `ln` is
shared by all three encoders; the global image slot is masked out of the final
softmax only; text tokens get no positional features.

capscope's own checkpoints may switch on what the paper describes and the
released code lacks (learnable text positions), a word-region evidence
feature and a token verifier (`TokenVerifier`); all are off for the released
checkpoint, whose computation does not change.
"""
from __future__ import annotations

from concurrent.futures import Future
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
    verify: bool = False           # capscope: phrase-level word-region checks feeding the text attention


def _encoder(width: int, layers: int, heads: int) -> nn.Module:
    from open_clip.transformer import QuickGELU, Transformer

    return Transformer(width, layers, heads, act_layer=QuickGELU, batch_first=True)


class InfoMetIC(nn.Module):
    """The CLIP backbone plus the InfoMetIC head, with the released state-dict names."""

    def __init__(self, clip_backbone: nn.Module, config: HeadConfig):
        super().__init__()
        self.config = config
        self.word_threshold_scale = 1.0  # a fine-tuned checkpoint's, fitted on its labels (capscope)
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
        if config.verify:
            self.verifier = TokenVerifier(w, *clip_match_calibration(clip_backbone))
            # the text attention is the verifier's alone: a learned q . k (v_g against each piece)
            # drew the mass to shape words whatever their truth, as text precision rewards that
            nn.init.zeros_(self.text_att_query)
            self.text_att_query.requires_grad_(False)

    def head_parameters(self):
        return [p for n, p in self.named_parameters() if not n.startswith("clip_backbone.")]

    def forward(self, v_g, regions, boxes, sizes, t_g, tokens, text_mask, image_out=None):
        """One batch of pairs with the same number n of regions.

        v_g B x D, regions B x n x D, boxes B x n x 4 (pixels), sizes B x 2 (W, H),
        t_g B x D, tokens B x L x D (every position encoded alone), text_mask B x L.
        Returns recall, precision, cos(v_g, t_g) (B each), region attention
        B x (n+1) (regions, then the null slot) and text attention B x L.
        `image_out`: `image_side` of these images, when already computed."""
        out = self.outputs(v_g, regions, boxes, sizes, t_g, tokens, text_mask, image_out)
        return out["recall"], out["precision"], out["cos"], out["region_attention"], out["text_attention"]

    def image_side(self, v_g, regions, boxes, sizes):
        """The image encoder's output (B x (n+2) x D): it depends on the image alone,
        so a re-score of a cached image may pass it to `outputs` instead of running it again."""
        return self.ln(self.image_encoder(self._image_in(v_g, regions, boxes, sizes)[0]))

    @staticmethod
    def _normalised_boxes(boxes, sizes):
        """B x (n+2) x 4: the whole image, the regions and the null slot, as shares of the image's size."""
        batch = boxes.shape[0]
        whole = torch.cat([torch.zeros_like(sizes), sizes], dim=1)
        all_boxes = torch.cat([whole[:, None], boxes, boxes.new_zeros(batch, 1, 4)], dim=1)
        return all_boxes / torch.cat([sizes, sizes], dim=1)[:, None]

    def _image_in(self, v_g, regions, boxes, sizes):
        batch, n, width = regions.shape
        seq = torch.cat([v_g[:, None], regions, regions.new_zeros(batch, 1, width)], dim=1)
        all_boxes = self._normalised_boxes(boxes, sizes)
        return seq + all_boxes @ self.bbox_position_embedding, all_boxes

    def outputs(self, v_g, regions, boxes, sizes, t_g, tokens, text_mask, image_out=None) -> dict:
        """`forward` with its intermediates (what training needs) in a dict;
        `image_out`: `image_side` of these images, already computed; `t_g` may
        be a Future, waited for only after the encoders, which do not read it."""
        batch, n, width = regions.shape
        if image_out is None:
            image_in, all_boxes = self._image_in(v_g, regions, boxes, sizes)
            image_out = self.ln(self.image_encoder(image_in))
        else:
            all_boxes = self._normalised_boxes(boxes, sizes)
        text_in = tokens
        if self.config.text_positions:
            text_in = text_in + self.text_position_embedding[: tokens.shape[1]]
        if self.config.evidence:
            text_in = text_in + self._evidence(tokens, regions) @ self.evidence_embedding

        text_out = self.ln(self.text_encoder(text_in))
        checks = None
        if self.config.verify:
            checks = self.verifier.check(text_out, tokens, regions, all_boxes[:, 1 : n + 1], text_mask)
            text_out = text_out + self.verifier.inject(checks["features"])
        fused = self.ln(self.fusion_encoder(torch.cat([image_out, text_out], dim=1)))
        image_out, text_out = fused[:, : n + 2], fused[:, n + 2 :]
        if isinstance(t_g, Future):  # the caption's features, encoded on another thread meanwhile
            t_g = t_g.result()

        image_mask = torch.ones(batch, n + 2, device=regions.device)
        image_mask[:, 0] = 0
        region_bias = self.verifier.region_bias(checks, n) if checks is not None else None
        region_logits = attention_logits((t_g @ self.img_att_query), image_out @ self.img_att_key, image_mask, region_bias)
        a_v = region_logits.softmax(dim=-1)
        text_bias = None
        if checks is not None:
            checks["logits"] = self.verifier.judge(text_out, checks["features"])
            text_bias = self.verifier.attention_bias(checks["logits"])
        text_query, text_keys = v_g @ self.text_att_query, text_out @ self.text_att_key
        text_logits = attention_logits(text_query, text_keys, text_mask, text_bias)
        a_t = text_logits.softmax(dim=-1)
        a_t_score = a_t
        if checks is not None and self.training:
            # same values; the precision losses may not move the verifier (a precision NCE
            # with polluted negatives would rather put a polluted caption's mass on its wrong word)
            a_t_score = attention(text_query, text_keys, text_mask, self.verifier.attention_bias(checks["logits"].detach()))
        scale = self.logit_scale.exp()
        return {
            "recall": scale * cosine(torch.einsum("bk,bkd->bd", a_v, image_out), v_g),
            "precision": scale * cosine(torch.einsum("bk,bkd->bd", a_t_score, text_out), t_g),
            "cos": cosine(v_g, t_g),
            "region_attention": a_v[:, 1:],
            "text_attention": a_t,
            "region_log_attention": region_logits.log_softmax(dim=-1)[:, 1:],   # for training losses
            "text_log_attention": text_logits.log_softmax(dim=-1),
            "checks": checks,
        }

    @staticmethod
    def _evidence(tokens, regions):
        """Each position's best and mean cosine to the regions (B x L x 2)."""
        if regions.shape[1] == 0:
            return tokens.new_zeros(*tokens.shape[:2], 2)
        sims = F.normalize(tokens, dim=-1) @ F.normalize(regions, dim=-1).transpose(1, 2)
        return torch.stack([sims.max(dim=-1).values, sims.mean(dim=-1)], dim=-1)


def attention(query, keys, mask, bias=None):
    """softmax(q . k + (1 - mask) * -10000) without 1/sqrt(d), as released;
    capscope's verifier may add a per-key `bias` (B x K)."""
    return attention_logits(query, keys, mask, bias).softmax(dim=-1)


def attention_logits(query, keys, mask, bias=None):
    logits = torch.einsum("bd,bkd->bk", query, keys) + (1 - mask) * NEG
    if bias is not None:
        logits = logits + bias
    return logits


class TokenVerifier(nn.Module):
    """capscope's answer to "is this word true of some region, together with
    the words of its phrase?" (a binding error such as "a red square" where
    the square is blue and a circle red has every word true of some region,
    but no region true of the whole phrase).

    - match[i, r]: log-probability that piece i is true of region r, from the
      raw CLIP cosine (calibrated) plus a learned bilinear term on the raw
      features and the region's box (size and place are in the box);
    - grouping: an attention over the caption's pieces, computed from the
      text encoder's output (which sees the text positions), that learns
      which pieces form a phrase with piece i;
    - per piece: how well its phrase fits the best region, how well it fits
      any region alone, how well the *rest* of its phrase fits the best
      region and how well the piece itself fits that region (a piece is
      wrong where the rest of its phrase finds a region and it does not).
    These features are added to the text tokens before the fusion encoder,
    and a small judge turns them (with the fused token) into a per-piece
    logit that is added to the text attention logits."""

    N_FEATURES = 7
    FLOOR = -12.0
    REACH = 4   # offsets beyond this share the outermost bias

    def __init__(self, width: int, match_scale: float = 10.0, match_bias: float = -2.0):
        super().__init__()
        self.text_proj = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width))
        self.region_proj = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width))
        self.box_proj = nn.Linear(6, width)
        # the learned match starts as the CLIP's own calibrated word-crop match
        for layer in (self.region_proj[1], self.box_proj):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.cos_weight = nn.Parameter(torch.tensor(float(match_scale)))
        self.match_bias = nn.Parameter(torch.tensor(float(match_bias)))
        self.group_query = nn.Linear(width, width)
        self.group_key = nn.Linear(width, width)
        # phrases are local: a learned bias per relative offset, starting at "within two pieces"
        offsets = torch.arange(-self.REACH, self.REACH + 1).abs()
        self.group_offset_bias = nn.Parameter(torch.where(offsets <= 2, 0.0, -3.0))
        self.bias_scale = nn.Parameter(torch.tensor(2.0))  # the verifier's weight in the text attention
        self.visual = nn.Linear(width, 1)                   # how much a piece's phrase speaks about regions
        self.region_scale = nn.Parameter(torch.tensor(1.0))
        self.region_offset = nn.Parameter(torch.tensor(4.0))  # against the null slot's 0
        self.focus = nn.Parameter(torch.tensor(2.0))   # log temperature of the soft region choice
        self.feature_proj = nn.Linear(self.N_FEATURES, width)
        self.judge_mlp = nn.Sequential(
            nn.Linear(width + self.N_FEATURES, width), nn.GELU(), nn.Linear(width, 1),
        )
        self.judge_skip = nn.Linear(self.N_FEATURES, 1)   # a direct path: the features alone decide early on

    def match(self, tokens, regions, norm_boxes):
        """B x L x n log-probabilities that each piece is true of each region."""
        w, h = norm_boxes[..., 2] - norm_boxes[..., 0], norm_boxes[..., 3] - norm_boxes[..., 1]
        box = torch.cat([norm_boxes, w[..., None], h[..., None]], dim=-1)
        t = self.text_proj(tokens)
        r = self.region_proj(regions) + self.box_proj(box)
        cos = F.normalize(tokens, dim=-1) @ F.normalize(regions, dim=-1).transpose(1, 2)
        logits = t @ r.transpose(1, 2) / t.shape[-1] ** 0.5 + self.cos_weight * cos + self.match_bias
        return F.logsigmoid(logits).clamp(min=self.FLOOR)

    def grouping(self, text_out, text_mask):
        """B x L x L: how much piece j belongs to the phrase of piece i (rows sum to 1)."""
        q, k = self.group_query(text_out), self.group_key(text_out)
        length = text_out.shape[1]
        position = torch.arange(length, device=text_out.device)
        offset = (position[None, :] - position[:, None]).clamp(-self.REACH, self.REACH) + self.REACH
        logits = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5 + self.group_offset_bias[offset]
        return (logits + (1 - text_mask[:, None, :]) * NEG).softmax(dim=-1)

    def check(self, text_out, tokens, regions, norm_boxes, text_mask) -> dict:
        batch, length, _ = tokens.shape
        if regions.shape[1] == 0:
            return {"features": tokens.new_zeros(batch, length, self.N_FEATURES), "phrase": None, "mentions": None}
        match = self.match(tokens, regions, norm_boxes)
        group = self.grouping(text_out, text_mask)
        others = group * (1 - torch.eye(length, device=group.device))
        others = others / others.sum(-1, keepdim=True).clamp(min=1e-6)
        phrase = group @ match                  # B x L x n
        rest = others @ match
        sharp = self.focus.exp()
        at_phrase = (phrase * sharp).softmax(-1)
        at_rest = (rest * sharp).softmax(-1)
        mentions = self._mentions(phrase, text_out, text_mask)
        features = torch.stack([
            phrase.max(-1).values,
            match.max(-1).values,
            rest.max(-1).values,
            (at_rest * match).sum(-1),
            (at_phrase * match).sum(-1),
            match.mean(-1),
            (at_phrase * rest).sum(-1),
        ], dim=-1) / -self.FLOOR
        return {"features": features, "phrase": phrase * sharp, "match": match, "mentions": mentions}

    def _mentions(self, phrase, text_out, text_mask):
        """B x n: how well the caption's best-fitting visual phrase fits each region."""
        weight = F.logsigmoid(self.visual(text_out).squeeze(-1)) + (1 - text_mask) * NEG
        return torch.logsumexp(phrase + weight[..., None], dim=1)

    def region_bias(self, checks, n: int):
        """B x (n + 2) logits for the region attention (global and null slots get 0)."""
        mentions = checks.get("mentions")
        if mentions is None:
            return None
        pad = mentions.new_zeros(mentions.shape[0], 1)
        return torch.cat([pad, self.region_scale * mentions + self.region_offset, pad], dim=1)

    def inject(self, features):
        return self.feature_proj(features)

    def judge(self, fused_text, features):
        """B x L logits, added to the text attention: high for a piece that checks out."""
        return (self.judge_mlp(torch.cat([fused_text, features], dim=-1)) + self.judge_skip(features)).squeeze(-1)

    def attention_bias(self, logits):
        """gamma * log P(piece checks out): a share is scaled by that probability
        (to the power gamma), so wrong pieces lose their share while correct ones
        keep equal footing, however sure the verifier is about each."""
        return self.bias_scale * F.logsigmoid(logits)


def clip_match_calibration(clip_model) -> tuple[float, float]:
    """(scale, bias) turning a CLIP cosine into a match logit: the CLIP's own for
    a sigmoid-trained model (capscope's demo CLIP, SigLIP), else a mild default."""
    bias = getattr(clip_model, "logit_bias", None)
    scale = getattr(clip_model, "logit_scale", None)
    if bias is None or scale is None:
        return 10.0, -2.0
    return float(scale.detach().exp()), float(bias.detach())


def cosine(x, y):
    """x/|x| . y/|y| with no epsilon, as released."""
    return (x / x.norm(dim=-1, keepdim=True) * (y / y.norm(dim=-1, keepdim=True))).sum(-1)


def cosine_or_zero(pooled, y):
    """cosine(pooled, y), and 0 where the pooled vector is all zeros: InfoCLIP's
    null slot is a zero vector, so attention that falls wholly on it pools to
    nothing (the official code never meets this; an epsilon-free cosine gave NaN)."""
    norm = pooled.norm(dim=-1, keepdim=True)
    unit = torch.where(norm > 0, pooled / norm.clamp_min(torch.finfo(pooled.dtype).tiny), torch.zeros_like(pooled))
    return (unit * (y / y.norm(dim=-1, keepdim=True))).sum(-1)


def infoclip(v_g, regions, t_g, tokens, text_mask, scale: float):
    """InfoCLIP (InfoMetIC appendix D): the same attention and scores on raw
    CLIP features, no encoders, no box term; the null slot's logit is 0."""
    batch, n, width = regions.shape
    seq = torch.cat([v_g[:, None], regions, regions.new_zeros(batch, 1, width)], dim=1)
    image_mask = torch.ones(batch, n + 2)
    image_mask[:, 0] = 0
    a_v = attention(t_g, seq, image_mask)
    a_t = attention(v_g, tokens, text_mask)
    recall = scale * cosine_or_zero(torch.einsum("bk,bkd->bd", a_v, seq), v_g)
    precision = scale * cosine_or_zero(torch.einsum("bk,bkd->bd", a_t, tokens), t_g)
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
