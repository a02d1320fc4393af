"""CLIP4DM's gradient x attention relevance of an open_clip text tower
(`TextRelevance`): a forward pass per distinct text, a backward per (text,
image) row on the `<eot>` row only, every pass of a fixed shape. Why this is the
released computation, number for number, is in clip4dm.py's docstring."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from capscope.common.errors import ModelUnavailable

from .encoder import ClipBackbone
from .tower_passes import filled_to, padded_ids, pass_rows, text_rows

LAYERS = 3           # main.py --start_layer_text -3: the last three text blocks
# (caption, image) rows per attribution pass on a CPU: a lone re-score runs one pass, filled with copies
# (8 against 16: 52.0 against 56.5 ms, pairs/s the same within 1%; BENCHMARKS.md run 18)
CHUNK = 8
ATTRIBUTION_ROWS = {"cpu": CHUNK, "cuda": 64}
WINDOW_ATTRIBUTION_ROWS = {"cpu": 16, "cuda": 64}  # a long caption's windows: 8 a pass cost its pairs/s 7%
# a forward pass runs a text's ids after the template padded to the first of these that holds them,
# `tower_passes.text_rows` texts to a pass; 12 because a sentence window is 5 to 10 ids past the template
SUFFIX_LENGTHS = (4, 8, 12, 16, 24, 32, 48, 64)
# windows of long captions: their forwards 16 texts a pass on a CPU (6.9 ms a text on 2 threads against 10.2 at
# the 5 of a 12-id bucket); a lone re-score never holds a window, so it keeps its narrow pass
WINDOW_TEXT_ROWS = {"cpu": 16, "cuda": 32}
MAX_TEXTS = 512      # distinct texts whose states are held at once (3 layers' keys and values, <= 1 MB each)


@dataclass
class Attribution:
    """One caption's raw CLIP4DM output: the cosine, and one attribution per
    BPE piece of the templated text that the model saw (at most context - 2)."""

    cosine: float
    piece_scores: list[float]


class TextRelevance:
    """Gradient x attention relevance of an open_clip text tower (any model whose
    text blocks are open_clip's `ResidualAttentionBlock`). `template`: the text
    that the sequences start with, whose states are computed once."""

    def __init__(self, backbone: ClipBackbone, layers: int = LAYERS, template: str = ""):
        tower = backbone.text_tower
        blocks = getattr(getattr(tower, "transformer", None), "resblocks", None)
        if blocks is None or not all(hasattr(getattr(b, "attn", None), "in_proj_weight") for b in blocks):
            raise ModelUnavailable(f"clip4dm: needs an open_clip text transformer with standard attention; {backbone.name} has none")
        if not hasattr(backbone.tokenizer, "encode") or not hasattr(backbone.tokenizer, "eot_token_id"):
            raise ModelUnavailable(f"clip4dm: needs CLIP's BPE tokenizer; {backbone.name} uses another")
        if not 1 <= layers <= len(blocks):  # unavailable, not wrong: a server leaves clip4dm out and goes on
            raise ModelUnavailable(f"clip4dm: --clip4dm-layers must be between 1 and {len(blocks)} for "
                                   f"{backbone.name}, not {layers}")
        self.backbone, self.tower, self.blocks, self.layers = backbone, tower, list(blocks), layers
        self.context = int(tower.positional_embedding.shape[0])
        self.prefix = tuple(self.ids(template)[:-1]) if template else ()  # <sot> and the template's pieces
        self._prefix_states: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def ids(self, text: str) -> list[int]:
        """`<sot> pieces <eot>`, cut to the context with `<eot>` last, as open_clip's tokenizer does
        (the tower's context is the backbone's)."""
        return self.backbone.text_ids(text)

    def __call__(self, image_embeddings: torch.Tensor, sequences: list[list[int]],
                 windows: list[bool] | None = None) -> list[Attribution]:
        """Attributions of each id sequence against the image embedding of its row,
        at most `MAX_TEXTS` distinct texts at a time (their states are held in memory);
        `windows[i]`: sequence i is a window of a long caption (wider forward passes)."""
        windows = windows or [False] * len(sequences)
        out, start = [], 0
        while start < len(sequences):
            end, seen = start, set()
            while end < len(sequences) and (len(seen) < MAX_TEXTS or tuple(sequences[end]) in seen):
                seen.add(tuple(sequences[end]))
                end += 1
            out += self.attribute_chunk(image_embeddings[start:end], sequences[start:end], windows[start:end])
            start = end
        return out

    def attribute_chunk(self, images: torch.Tensor, sequences: list[list[int]],
                        windows: list[bool]) -> list[Attribution]:
        """Each distinct text forward once, each distinct (text, image) row
        backward once: a repeat gets the same floats, as its passes would be the same.
        A text is distinct by its ids and whether it is a window (windows' passes are wider)."""
        with torch.inference_mode(False):
            images = images.detach().float().cpu().clone()  # not an inference tensor: the graph keeps it
            pairs = [((tuple(s), w), images[i].numpy().tobytes()) for i, (s, w) in enumerate(zip(sequences, windows))]
            row_of: dict = {}  # each distinct (text, image) and its first row
            for i, pair in enumerate(pairs):
                row_of.setdefault(pair, i)
            distinct = list(row_of)
            texts = list(dict.fromkeys(text for text, _ in distinct))
            states = self.text_states([list(ids) for ids, _ in texts], [w for _, w in texts])
            done = {}
            for window in (False, True):  # a window's rows go in wider passes, as its forward does
                group = [p for p in distinct if p[0][1] == window]
                size = pass_rows(WINDOW_ATTRIBUTION_ROWS if window else ATTRIBUTION_ROWS, self.backbone.device)
                for start in range(0, len(group), size):
                    chunk = filled_to(group[start : start + size], size)
                    found = self.attribute_rows(images[[row_of[p] for p in chunk]], [states[p[0]] for p in chunk])
                    done.update(zip(group[start : start + size], found))
        return [done[p] for p in pairs]

    # ------------------------------------------------------------ forward, per text

    def text_states(self, sequences: list[list[int]], windows: list[bool]) -> dict[tuple, "TextStates"]:
        """What each text's attribution needs from the frozen forward, by (ids,
        is a window): texts grouped by their length bucket past the shared prefix,
        a fixed number to a pass (the last filled with copies), more for windows."""
        groups: dict[tuple[bool, int, int], list[list[int]]] = {}
        for seq, window in zip(sequences, windows):
            shared = self._shared(seq)
            bucket = suffix_bucket(len(seq) - shared, self.context - shared)
            groups.setdefault((window, shared, bucket), []).append(seq)
        out = {}
        for (window, shared, length), group in sorted(groups.items()):
            size = pass_rows(WINDOW_TEXT_ROWS, self.backbone.device) if window else text_rows(self.backbone.device, length)
            for start in range(0, len(group), size):
                chunk = group[start : start + size]
                found = self._forward(filled_to(chunk, size), shared, length)
                out.update(((tuple(seq), window), states) for seq, states in zip(chunk, found))
        return out

    def _shared(self, seq: list[int]) -> int:
        """How many of `seq`'s first ids are the cached prefix (all of it or none)."""
        n = len(self.prefix)
        return n if len(seq) > n and tuple(seq[:n]) == self.prefix else 0

    @torch.no_grad()
    def _forward(self, sequences: list[list[int]], shared: int, length: int) -> list["TextStates"]:
        """One pass over the ids after the first `shared` (whose keys and values
        are the cached prefix's): every block but the last in full, the last's
        keys and values only (nothing else of it reaches `<eot>`'s attribution)."""
        device, tower = self.backbone.device, self.tower
        ids = padded_ids([s[shared:] for s in sequences], length).to(device)
        x = tower.token_embedding(ids) + tower.positional_embedding[shared : shared + length]
        mask = causal_mask(length, shared + length, shared, device)
        eot = torch.tensor([len(s) - 1 - shared for s in sequences], device=device)
        rows = torch.arange(len(sequences), device=device)
        first = len(self.blocks) - self.layers
        past = self._prefix() if shared else [None] * len(self.blocks)
        entry, kept = None, []
        for i, block in enumerate(self.blocks):
            if i == first:
                entry = x[rows, eot]
            last = i == len(self.blocks) - 1
            x, k, v = run_block(block, x, mask, past[i], keys_only=last)
            if i >= first:
                kept.append((k, v))
        return [TextStates([k[r] for k, _ in kept], [v[r] for _, v in kept], entry[r], int(eot[r]) + shared)
                for r in range(len(sequences))]

    def _prefix(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every block's keys and values of the shared prefix (1 x heads x prefix x head width), once."""
        if self._prefix_states is None:
            device, tower, n = self.backbone.device, self.tower, len(self.prefix)
            with torch.inference_mode(False), torch.no_grad():
                x = tower.token_embedding(torch.tensor([self.prefix], device=device)) + tower.positional_embedding[:n]
                mask = causal_mask(n, n, 0, device)
                states = []
                for block in self.blocks:
                    x, k, v = run_block(block, x, mask, None)
                    states.append((k, v))
            self._prefix_states = states
        return self._prefix_states

    # ------------------------------------------------------------ backward, per (text, image) row

    def attribute_rows(self, images: torch.Tensor, states: list["TextStates"]) -> list[Attribution]:
        """The `<eot>` rows of the attributed blocks, run again with the other
        positions' keys and values held constant, and differentiated: the same
        gradient as through the whole text (see clip4dm.py's docstring)."""
        device, n = self.backbone.device, len(states)
        eot = torch.tensor([s.eot for s in states], device=device)
        positions = torch.arange(self.context, device=device)
        at_eot = (positions == eot[:, None])[:, None, :, None]  # n x 1 x context x 1
        hidden = torch.full((n, 1, 1, self.context), float("-inf"), device=device)
        hidden = hidden.masked_fill((positions <= eot[:, None])[:, None, None, :], 0.0)
        with torch.enable_grad():
            x = torch.stack([s.entry for s in states])[:, None]
            probs = []
            for layer, block in enumerate(self.blocks[len(self.blocks) - self.layers :]):
                keys = padded_keys([s.keys[layer] for s in states], self.context)
                values = padded_keys([s.values[layer] for s in states], self.context)
                x, p = attend_row(block, x, keys, values, at_eot, hidden)
                probs.append(p)
            text = self._project(self.tower.ln_final(x[:, 0]))
            cosine = F.cosine_similarity(text, images.to(device), dim=-1)
            grads = torch.autograd.grad(cosine.sum(), probs)
        relevance = (sum((g * p.detach()).mean(dim=1) for g, p in zip(grads, probs)) / self.layers)[:, 0].cpu()
        cosine = cosine.detach().cpu()
        return [Attribution(float(cosine[b]), relevance[b, 1 : s.eot].tolist()) for b, s in enumerate(states)]

    def _project(self, pooled: torch.Tensor) -> torch.Tensor:
        proj = self.tower.text_projection
        return proj(pooled) if isinstance(proj, torch.nn.Module) else pooled @ proj


@dataclass
class TextStates:
    """What one text's attribution needs from its forward pass: each attributed
    block's keys and values (heads x positions x head width), the residual
    stream at `<eot>` entering the first of them, and `<eot>`'s position."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    entry: torch.Tensor
    eot: int


def suffix_bucket(length: int, room: int) -> int:
    """The padded length a forward pass runs `length` ids at (at most `room`)."""
    return next((b for b in SUFFIX_LENGTHS if length <= b < room), room)


def causal_mask(queries: int, keys: int, offset: int, device) -> torch.Tensor:
    """Additive mask for `queries` positions starting at `offset` over `keys` positions from 0."""
    return torch.full((queries, keys), float("-inf"), device=device).triu(offset + 1)


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    batch, length, width = x.shape
    return x.reshape(batch, length, heads, width // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, length, width = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * width)


def run_block(block, x: torch.Tensor, mask: torch.Tensor, past, keys_only: bool = False):
    """One open_clip `ResidualAttentionBlock` on B x T x W after the positions
    whose keys and values are `past` (or none): (x, keys, values), keys and
    values over all positions (B x heads x positions x head width)."""
    heads = block.attn.num_heads
    q, k, v = (split_heads(t, heads) for t in
               F.linear(block.ln_1(x), block.attn.in_proj_weight, block.attn.in_proj_bias).chunk(3, dim=-1))
    if past is not None:
        k = torch.cat([past[0].expand(len(x), -1, -1, -1), k], dim=2)
        v = torch.cat([past[1].expand(len(x), -1, -1, -1), v], dim=2)
    if keys_only:
        return x, k, v
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    x = x + block.ls_1(block.attn.out_proj(merge_heads(out)))
    return x + block.ls_2(block.mlp(block.ln_2(x))), k, v


def padded_keys(tensors: list[torch.Tensor], length: int) -> torch.Tensor:
    """heads x positions x width tensors as one N x heads x `length` x width, zero-padded."""
    heads, _, width = tensors[0].shape
    out = tensors[0].new_zeros(len(tensors), heads, length, width)
    for row, t in enumerate(tensors):
        out[row, :, : t.shape[1]] = t
    return out


def attend_row(block, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, at_eot: torch.Tensor,
               hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One block on the `<eot>` rows (N x 1 x W), the other positions' keys and
    values given; `<eot>`'s own key and value are computed here, in the graph.
    Returns the new rows and the attention probabilities (N x heads x 1 x positions)."""
    attn = block.attn
    heads, width = attn.num_heads, x.shape[-1]
    q, k, v = (split_heads(t, heads) for t in F.linear(block.ln_1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1))
    keys, values = torch.where(at_eot, k, keys), torch.where(at_eot, v, values)
    probs = ((q * (width // heads) ** -0.5) @ keys.transpose(-2, -1) + hidden).softmax(dim=-1)
    x = x + block.ls_1(attn.out_proj(merge_heads(probs @ values)))
    x = x + block.ls_2(block.mlp(block.ln_2(x)))
    return x, probs
