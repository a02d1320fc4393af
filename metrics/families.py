"""The built-in metric classes of the CLIP-S and InfoMetIC families (HICE-S is
in hice.py). Each is built by its entry in registry.py and turns prepared pairs
and their image features into `MetricResult`s."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext

import torch

from .clipscore import PROMPT, clip_s, ref_score
from .encoder import ClipBackbone, ImageFeatures, filled_to, pass_rows
from .tower_passes import TEXT_ROWS
from .infometic import InfoMetIC, infoclip
from .pairs import PreparedPair
from .result import MetricResult, PieceScore
from .text import Piece, bpe_pieces, model_ids
from capscope.common.threads import few_threads
from .verdict import Verdict
from .words import word_scores


class ClipScoreMetric:
    """CLIP-S (w = 2.5) or PAC-S (w = 2.0, a PAC-S backbone): global only;
    the score key is `key`, with references also `ref_<key>`."""

    def __init__(self, name: str, backbone: ClipBackbone, weight: float, key: str):
        self.name, self.backbone, self.weight, self.key = name, backbone, weight, key
        if not backbone.reads_length:  # a tokenizer that cannot say where it cuts: no windows
            self.fits = None

    def fits(self, caption: str) -> bool:
        """Whether CLIP reads the prompted caption whole (77 tokens)."""
        return self.backbone.reads_whole(PROMPT + caption)

    def compute(self, pairs: list[PreparedPair], images: list[ImageFeatures]) -> list[MetricResult]:
        texts = self.backbone.encode_texts([PROMPT + p.caption for p in pairs])
        image = torch.stack([f.global_feat for f in images])
        scores = clip_s(image, texts, self.weight)
        with_refs = [i for i, p in enumerate(pairs) if p.references]
        ref_scores = {}
        if with_refs:
            refs = [[PROMPT + r for r in pairs[i].references] for i in with_refs]
            flat = self.backbone.encode_texts([r for group in refs for r in group])
            groups, start = [], 0
            for group in refs:
                groups.append(flat[start : start + len(group)])
                start += len(group)
            values = ref_score(scores[with_refs], texts[with_refs], groups)
            ref_scores = dict(zip(with_refs, values.tolist()))
        results = []
        for i, pair in enumerate(pairs):
            result = {self.key: float(scores[i])}
            if i in ref_scores:
                result["ref_" + self.key] = ref_scores[i]
            results.append(MetricResult.global_only(result, len(pair.tokens)))
        return results


class InfoFamilyMetric:
    """Shared by InfoCLIP and InfoMetIC: pieces, attention shares, word scores."""

    max_len = 32

    def __init__(self, name: str, backbone: ClipBackbone, verdict: Verdict | None):
        """`verdict`: the rule its words and regions are decided by (None for
        a metric that only prepares text, as training does)."""
        self.name, self.backbone, self.verdict = name, backbone, verdict
        self._captions: ThreadPoolExecutor | None = None

    def fits(self, caption: str) -> bool:
        """Whether the model sees every BPE piece of the caption (30 of its 32 ids)."""
        return self.backbone.reads_whole(caption, self.max_len)

    @property
    def options(self) -> dict:
        """Settings of its own, recorded in every row's model block: a fitted
        word threshold scale decides the row's `token_correct`, so rows say it."""
        return {} if self.word_scale == 1.0 else {"word_threshold_scale": self.word_scale}

    @property
    def word_scale(self) -> float:
        """A fine-tuned checkpoint's calibration of the word threshold (1 otherwise)."""
        return self.verdict.word_scale if self.verdict is not None else 1.0

    def text_inputs(self, pairs: list[PreparedPair], overlap: bool = False):
        """Per pair: pieces, ids (32), mask; then t_g (B x D) and every position's
        feature encoded alone (B x 32 x D). `overlap`: a lone pair's t_g may come
        as a Future, encoded on a thread of its own (the head waits for it)."""
        pieces, ids, masks, kept = [], [], [], []
        for pair in pairs:
            p = bpe_pieces(pair.caption, pair.tokens, self.backbone.tokenizer)
            i, m, k = model_ids(p, self.max_len)
            pieces.append(p[:k]); ids.append(i); masks.append(m); kept.append(k)
        work = sum(k + 2 for k in kept)
        # one caption a pass on a CPU, not the short texts' token budget: InfoMetIC's
        # re-score went from 66 to 102 ms (p50) when its caption shared a padded pass
        captions = [i[: k + 2] for i, k in zip(ids, kept)]
        rows = pass_rows(TEXT_ROWS, self.backbone.device)
        with few_threads(work, device=self.backbone.device):  # a re-score: one thread is faster
            flat = self.backbone.encode_pieces([x for i in ids for x in i])
            if overlap and len(pairs) == 1 and self.backbone.device.type == "cpu":
                t_g = self._caption_thread().submit(self.backbone.encode_ids, captions, rows=rows)
            else:
                t_g = self.backbone.encode_ids(captions, rows=rows)
        tokens = flat.view(len(pairs), self.max_len, -1)
        return pieces, t_g, tokens, torch.tensor(masks, dtype=torch.float32)

    def _caption_thread(self) -> ThreadPoolExecutor:
        """A thread of its own for a lone caption's text pass: on a CPU a
        re-score runs it (one thread, 18 ms) while the head's encoders run on
        another (22 ms), which do not read it. Nothing else touches the
        backbone meanwhile: the pieces are encoded before. The caller holds
        one intra-op thread for the whole re-score, so the two make two."""
        if self._captions is None:
            self._captions = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-caption")
        return self._captions

    def rows(self, pairs, pieces, scores, a_v, a_t) -> list[MetricResult]:
        rows = []
        for b, pair in enumerate(pairs):
            piece_scores = a_t[b, 1 : 1 + len(pieces[b])].tolist()
            region = a_v[b].tolist()
            rows.append(self._row(pair.tokens, pieces[b], piece_scores, region[:-1], region[-1], scores[b]))
        return rows

    def _row(self, tokens, pieces: list[Piece], piece_scores, region_scores, null_score, scores) -> MetricResult:
        word = word_scores(tokens, pieces, piece_scores)
        return MetricResult(
            scores=scores,
            token_scores=word,
            token_correct=self.verdict.decide([t.semantic for t in tokens], word),
            region_scores=region_scores,
            region_mentioned=self.verdict.decide_regions(region_scores),
            null_score=null_score,
            pieces=[PieceScore(p.text, p.token, s) for p, s in zip(pieces, piece_scores)],
        )


HEAD_ROWS = {"cpu": 1, "cuda": 32}  # pairs per pass of the InfoMetIC head (and InfoCLIP's formulas)
# windows of long captions: on a CPU a pass of 8 costs 11.5 ms a row on 2 threads against 31 ms for a lone
# row on one (the head's matrix products are short); a lone re-score keeps its one-row pass
WINDOW_HEAD_ROWS = {"cpu": 8, "cuda": 32}


def head_batches(images: list[ImageFeatures], size: int,
                 windows: list[bool] | None = None,
                 window_size: int | None = None) -> list[tuple[int, list[int], list[int]]]:
    """(region count, up to `size` pair indices, those indices filled up to the
    pass's rows with copies of the first) per pass of the head. Every pass has
    `size` rows, because a matrix product's float result depends on its shape:
    so a pair's scores do not depend on how many others share its region count. Windows of long captions
    (`windows[i]`) go in passes of `window_size` rows: a caption's windows are
    decided by the caption alone, so its numbers still do not depend on its batch."""
    windows = windows or [False] * len(images)
    out = []
    for (n, wide), idx in group_by_region_count(images, windows).items():
        step = window_size if wide and window_size else size
        out += [(n, idx[start : start + step], filled_to(idx[start : start + step], step))
                for start in range(0, len(idx), step)]
    return out


def group_by_region_count(images: list[ImageFeatures], windows: list[bool]) -> dict[tuple[int, bool], list[int]]:
    """The released model has no image-side mask, so only pairs with the same
    number of regions can share a batch without changing the result."""
    groups: dict[tuple[int, bool], list[int]] = {}
    for i, (features, window) in enumerate(zip(images, windows)):
        groups.setdefault((len(features.regions), window), []).append(i)
    return groups


class InfoClipMetric(InfoFamilyMetric):
    def compute(self, pairs, images) -> list[MetricResult]:
        pieces, t_g, tokens, masks = self.text_inputs(pairs)
        rows: list[MetricResult | None] = [None] * len(pairs)
        size = pass_rows(HEAD_ROWS, torch.device("cpu"))  # the formulas run on the cached (CPU) features
        for n, idx, filled in head_batches(images, size):  # a fixed shape, as for the InfoMetIC head
            v_g = torch.stack([images[i].global_feat for i in filled])
            regions = torch.stack([images[i].region_feats for i in filled]).reshape(size, n, v_g.shape[-1])
            recall, precision, a_v, a_t = (x[: len(idx)] for x in infoclip(
                v_g, regions, t_g[filled], tokens[filled], masks[filled], self.backbone.logit_scale))
            scores = [
                {"precision": float(p), "recall": float(r), "overall": float(p + r)} for p, r in zip(precision, recall)
            ]
            for i, row in zip(idx, self.rows([pairs[i] for i in idx], [pieces[i] for i in idx], scores, a_v, a_t)):
                rows[i] = row
        return rows


IMAGE_SIDE = "infometic image side"  # ImageFeatures.extra key: (the model's id, its image encoder's output)


class InfoMetICMetric(InfoFamilyMetric):
    def __init__(self, model: InfoMetIC, backbone: ClipBackbone, verdict: Verdict):
        """`verdict`: the scorer's rule, at the checkpoint's fitted word scale."""
        super().__init__("infometic", backbone, verdict.scaled(getattr(model, "word_threshold_scale", 1.0)))
        self.model = model
        self.max_len = model.config.text_len

    def compute(self, pairs, images) -> list[MetricResult]:
        device = next(self.model.parameters()).device
        # a lone pair on a CPU: one intra-op thread throughout, its caption's text pass on a second thread
        with few_threads(device=device) if len(pairs) == 1 else nullcontext():
            return self._compute(pairs, images, device)

    @torch.inference_mode()
    def _compute(self, pairs, images, device) -> list[MetricResult]:
        pieces, t_g, tokens, masks = self.text_inputs(pairs, overlap=True)
        rows: list[MetricResult | None] = [None] * len(pairs)
        passes = head_batches(images, pass_rows(HEAD_ROWS, device), [p.window for p in pairs],
                              pass_rows(WINDOW_HEAD_ROWS, device))
        for n, idx, filled in passes:  # a fixed shape: see head_batches
            windows, size = pairs[idx[0]].window, len(filled)
            v_g = torch.stack([images[i].global_feat for i in filled])
            batch = [
                v_g,
                torch.stack([images[i].region_feats for i in filled]).reshape(size, n, v_g.shape[-1]),
                torch.stack([images[i].boxes for i in filled]).reshape(size, n, 4),
                torch.tensor([images[i].size for i in filled], dtype=torch.float32),
                t_g if isinstance(t_g, Future) else t_g[filled], tokens[filled], masks[filled],
            ]
            # the head runs in float32 at every --precision: its softmaxes over up to 20 regions and 32
            # tokens decide the verdicts at a cut of 0.1, and it costs a fraction of the towers
            # (a window pass is never a lone re-score; one thread or two give it the same numbers)
            with nullcontext() if windows else few_threads(size * (n + 2 + self.max_len), device=device):
                image_out = self._image_sides([images[i] for i in filled]) if device.type == "cpu" else None
                recall, precision, cos, a_v, a_t = (
                    x[: len(idx)] for x in self.model(*[x if isinstance(x, Future) else x.to(device) for x in batch],
                                                      image_out=image_out))
            scores = [
                {"precision": float(p), "recall": float(r), "overall": float(p + r),
                 "overall_plus": float(p + r + 100.0 * c)}
                for p, r, c in zip(precision, recall, cos)
            ]
            sub = self.rows([pairs[i] for i in idx], [pieces[i] for i in idx], scores, a_v.float().cpu(), a_t.float().cpu())
            for i, row in zip(idx, sub):
                rows[i] = row
        return rows

    def _image_sides(self, images: list[ImageFeatures]) -> torch.Tensor:
        """The head's image encoder output for each image, run once per image
        (alone, the shape of a re-score's pass) and kept with its cached
        features: a keystroke's re-score skips 4 of the head's 10 layers
        (7.6 of 32 ms on one thread), a long caption's windows share it."""
        out = []
        for features in images:
            kept = features.extra.get(IMAGE_SIDE)
            if kept is None or kept[0] != id(self.model):
                side = self.model.image_side(features.global_feat[None], features.region_feats[None],
                                             features.boxes[None], torch.tensor([features.size], dtype=torch.float32))
                kept = features.extra[IMAGE_SIDE] = (id(self.model), side[0])
            out.append(kept[1])
        return torch.stack(out)
