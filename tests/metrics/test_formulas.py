"""Each formula against values computed by hand on small tensors."""
import math

import pytest
import torch

from capscope.metrics.clipscore import clip_s, harmonic_mean, ref_score
from capscope.metrics.words import decide_words, word_scores, word_threshold
from capscope.metrics.infometic import attention, cosine, infoclip
from capscope.metrics.regions import Region, clip_box, select_regions
from capscope.metrics.text import EOT_ID, SOT_ID, Piece, Token, model_ids


def test_clip_s_is_w_times_clipped_cosine():
    v = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    t = torch.tensor([[1.0, 1.0], [-1.0, 0.2]])
    assert clip_s(v, t, 2.5).tolist() == pytest.approx([2.5 / math.sqrt(2), 0.0])
    assert clip_s(v[:1], t[:1], 2.0).item() == pytest.approx(2.0 / math.sqrt(2))


def test_harmonic_mean_and_ref_score():
    assert harmonic_mean(torch.tensor(1.0), torch.tensor(0.5)).item() == pytest.approx(2 * 0.5 / 1.5)
    assert harmonic_mean(torch.tensor(0.0), torch.tensor(0.0)).item() == 0
    # candidate t = (1, 0); references (0, 1) and (1, 1): best cos = 1/sqrt(2)
    score = ref_score(torch.tensor([0.8]), torch.tensor([[1.0, 0.0]]), [torch.tensor([[0.0, 1.0], [1.0, 1.0]])])
    best = 1 / math.sqrt(2)
    assert score.item() == pytest.approx(2 * 0.8 * best / (0.8 + best))
    # references all pointing away: max(0, .) = 0 gives 0
    assert ref_score(torch.tensor([0.8]), torch.tensor([[1.0, 0.0]]), [torch.tensor([[-1.0, 0.0]])]).item() == 0


def test_attention_is_plain_softmax_with_additive_mask():
    q = torch.tensor([[1.0, 2.0]])
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    a = attention(q, k, torch.tensor([[1.0, 1.0, 0.0]]))
    e1, e2 = math.exp(1), math.exp(2)
    assert a[0].tolist() == pytest.approx([e1 / (e1 + e2), e2 / (e1 + e2), 0.0], abs=1e-6)


def test_cosine_has_no_epsilon():
    assert cosine(torch.tensor([3.0, 4.0]), torch.tensor([4.0, 3.0])).item() == pytest.approx(24 / 25)
    assert math.isnan(cosine(torch.zeros(2), torch.ones(2)).item())


def test_infoclip_by_hand():
    v_g = torch.tensor([[1.0, 0.0]])
    regions = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    t_g = torch.tensor([[1.0, 0.0]])
    tokens = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[0.0, 1.0, 0.0]])
    recall, precision, a_v, a_t = infoclip(v_g, regions, t_g, tokens, mask, scale=100.0)
    # logits over [v_g (masked), r1, r2, null]: t_g . r = 1, 0, null 0
    e = math.e
    assert a_v[0].tolist() == pytest.approx([e / (e + 2), 1 / (e + 2), 1 / (e + 2)], abs=1e-6)
    attended = torch.tensor([e / (e + 2), 1 / (e + 2)])
    assert recall.item() == pytest.approx(100 * (attended[0] / attended.norm()).item(), abs=1e-4)
    assert a_t[0].tolist() == pytest.approx([0, 1, 0], abs=1e-6)
    assert precision.item() == pytest.approx(100.0, abs=1e-4)


def test_infoclip_recall_is_zero_when_attention_pools_to_the_null_slot():
    v_g = torch.tensor([[1.0, 0.0]])
    regions = torch.tensor([[[-200.0, 0.0]]])  # t_g . r = -200: every share goes to the zero null slot
    t_g = torch.tensor([[1.0, 0.0]])
    tokens = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[0.0, 1.0, 0.0]])
    recall, precision, a_v, _ = infoclip(v_g, regions, t_g, tokens, mask, scale=100.0)
    assert a_v[0, -1].item() == 1.0
    assert recall.item() == 0.0 and precision.item() == pytest.approx(100.0, abs=1e-4)


def test_model_ids_pad_and_truncate_as_released():
    pieces = [Piece(i, "w", 0) for i in range(1, 4)]
    ids, mask, kept = model_ids(pieces, 8)
    assert ids == [SOT_ID, 1, 2, 3, EOT_ID, 0, 0, 0] and mask == [0, 1, 1, 1, 0, 0, 0, 0] and kept == 3
    ids, mask, kept = model_ids([Piece(i, "w", 0) for i in range(1, 20)], 8)
    assert ids == [SOT_ID, 1, 2, 3, 4, 5, 6, EOT_ID] and mask == [0, 1, 1, 1, 1, 1, 1, 0] and kept == 6


def test_word_score_is_sum_of_piece_shares():
    tokens = [Token("unbelievably", 0, 12, True), Token("red", 13, 16, True), Token("x", 17, 18, False)]
    pieces = [Piece(1, "unbeliev", 0), Piece(2, "ably", 0), Piece(3, "red", 1)]
    first, second, third = word_scores(tokens, pieces, [0.2, 0.05, 0.7])
    assert first == pytest.approx(0.25) and second == pytest.approx(0.7) and third is None


def test_relative_rule_scales_beta_with_semantic_words():
    assert word_threshold("relative", 0.1, 20, 1.0) == pytest.approx(0.025)   # half of 1/20
    assert word_threshold("relative", 0.1, 4, 1.0) == 0.1                    # never above beta
    assert word_threshold("paper", 0.1, 20, 1.0) == 0.1
    assert word_threshold("relative", 0.1, 0, 1.0) == 0.1


def test_decide_words_counts_the_semantic_words_seen():
    # 12 semantic words seen -> relative threshold 0.1 * 5 / 12 = 0.0417; the unseen and
    # the function word are not judged and do not count
    semantic = [True] * 13 + [False]
    scores = [0.05] * 11 + [0.04, None, 0.3]
    decided = decide_words("relative", 0.1, semantic, scores, 1.0)
    assert decided == [True] * 11 + [False, None, None]
    assert decide_words("paper", 0.1, semantic, scores, 1.0) == [False] * 12 + [None, None]


def test_a_word_threshold_scale_multiplies_the_rules_threshold():
    assert word_threshold("relative", 0.1, 20, 0.6) == pytest.approx(0.015)   # 0.025 * 0.6
    assert word_threshold("paper", 0.1, 20, 0.5) == pytest.approx(0.05)
    # 12 words seen: 0.0417 at scale 1 flags the 0.04 word; 0.0417 * 0.9 = 0.0375 does not
    semantic, scores = [True] * 12, [0.05] * 11 + [0.04]
    assert decide_words("relative", 0.1, semantic, scores, 0.9) == [True] * 12


def test_select_regions_keeps_most_confident_per_cluster():
    near = [Region((0, 0, 10, 10), 0.2), Region((1, 1, 11, 11), 0.9), Region((0, 1, 10, 11), 0.5)]
    far = [Region((100, 100, 150, 150), 0.3), Region((101, 100, 150, 151), 0.1)]
    kept = select_regions(near + far, max_regions=2)
    assert [r.confidence for r in kept] == [0.9, 0.3]
    assert select_regions(near, max_regions=5) == sorted(near, key=lambda r: -r.confidence)


def test_clip_box_clamps_and_rejects():
    assert clip_box([-5, 10, 300, 20], 200, 100) == (0, 10, 200, 20)
    with pytest.raises(ValueError):
        clip_box([10, 10, 10, 50], 200, 100)
    with pytest.raises(ValueError):
        clip_box("abc", 200, 100)


def test_the_region_rule_by_hand():
    """`paper`: beta at any count; `relative`: beta * 5 / n regions, never above beta."""
    from capscope.metrics.words import decide_regions, region_threshold

    assert region_threshold("paper", 0.1, 40) == 0.1
    assert region_threshold("relative", 0.1, 4) == 0.1 and region_threshold("relative", 0.1, 5) == 0.1
    assert region_threshold("relative", 0.1, 15) == pytest.approx(1 / 30)
    assert region_threshold("relative", 0.1, 40) == pytest.approx(0.0125)
    shares = [0.06] * 4 + [0.01] * 11  # 4 named shapes among 15 regions (the null token takes the rest)
    assert decide_regions("paper", 0.1, shares) == [False] * 15
    assert decide_regions("relative", 0.1, shares) == [True] * 4 + [False] * 11
