"""HICE-S (eq. 2-11) against hand-computed values, phrases, Alpha-CLIP loading,
and `capscope score --metric hice` end to end."""
import json
import math

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image

from capscope.cli import main
from capscope.metrics.hice import (
    HiceMetric, hice_scores, hmean, local_scores, masked_crop, token_scores, _alpha_input,
)
from capscope.metrics.phrases import chunk_phrases, dependency_phrases
from capscope.metrics.regions import Region
from capscope.metrics.text import Phrase, Token, tokenize

S = 1 / math.sqrt(2)


# ---------------------------------------------------------------- formulas by hand

def test_harmonic_means():
    assert hmean(0.5, 0.25) == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    assert hmean(0.2, 0.4, 0.5, 0.8) == pytest.approx(4 / (5 + 2.5 + 2 + 1.25))
    assert hmean(0.3, -0.1) == 0.0 and hmean(0.0, 0.7) == 0.0


def test_local_precision_and_recall_by_hand():
    # 3 regions x 2 phrases of cosines
    sim = torch.tensor([[0.9, 0.1], [0.2, 0.4], [0.3, 0.3]])
    precision, recall, per_phrase, per_region = local_scores(sim)
    assert precision == pytest.approx((0.9 + 0.4) / 2)          # eq. 4: mean over phrases of the best region
    assert recall == pytest.approx((0.9 + 0.4 + 0.3) / 3)       # eq. 5: mean over regions of the best phrase
    assert per_phrase.tolist() == pytest.approx([0.9, 0.4])
    assert per_region.tolist() == pytest.approx([0.9, 0.4, 0.3])


def test_hice_and_ref_hice_by_hand():
    e = torch.eye(3)
    v = torch.tensor([1.0, 1.0, 0.0])            # image
    t = torch.tensor([2.0, 0.0, 0.0])            # caption (norm does not matter)
    regions = torch.stack([e[0], e[1]])          # N = 2
    phrases = torch.stack([e[0], (e[1] + e[2])])  # M = 2
    refs = torch.stack([torch.tensor([1.0, 1.0, 0.0]), e[2]])
    ref_phrases = torch.stack([e[2]])
    out = hice_scores(v, t, regions, phrases, refs, ref_phrases)
    g_itc = S                                     # cos([1,1,0],[1,0,0])
    precision = (1.0 + S) / 2                     # phrase 1 best 1, phrase 2 best cos(e1, e1+e2) = 1/sqrt2
    recall = (1.0 + S) / 2                        # region e0 best 1, region e1 best 1/sqrt2
    l_itc = hmean(precision, recall)
    g_ttc = S                                     # best reference: [1,1,0]
    p_ref = (0.0 + S) / 2                         # phrases against the one reference phrase e2
    r_ref = S                                     # the reference phrase's best caption phrase
    l_ttc = hmean(p_ref, r_ref)
    assert out["g_itc"] == pytest.approx(g_itc, abs=1e-6)
    assert out["precision"] == pytest.approx(precision, abs=1e-6)
    assert out["recall"] == pytest.approx(recall, abs=1e-6)
    assert out["l_itc"] == pytest.approx(l_itc, abs=1e-6)
    assert out["hice"] == pytest.approx(hmean(g_itc, l_itc), abs=1e-6)
    assert out["g_ttc"] == pytest.approx(g_ttc, abs=1e-6)
    assert out["l_ttc"] == pytest.approx(l_ttc, abs=1e-6)
    assert out["ref_hice"] == pytest.approx(4 / (1 / g_itc + 1 / l_itc + 1 / g_ttc + 1 / l_ttc), abs=1e-6)
    assert "ref_hice" not in hice_scores(v, t, regions, phrases)


def test_match_threshold_is_a_sigmoid_models_own_boundary():
    from types import SimpleNamespace

    from capscope.metrics.hice import THRESHOLD, match_threshold

    sigmoid = SimpleNamespace(model=SimpleNamespace(logit_bias=torch.tensor(-5.0), logit_scale=torch.tensor(np.log(10.0))))
    assert match_threshold(sigmoid) == pytest.approx(0.5)  # sigmoid(10 * 0.5 - 5) = 0.5
    softmax = SimpleNamespace(model=SimpleNamespace(logit_scale=torch.tensor(np.log(100.0))))
    assert match_threshold(softmax) == THRESHOLD == 0.2


def test_token_scores_take_the_best_phrase():
    tokens = [Token("a", 0, 1, False), Token("red", 2, 5, True), Token("dog", 6, 9, True), Token("runs", 10, 14, True)]
    found = [Phrase("red dog", (1, 2)), Phrase("dog runs", (2, 3))]
    scores, correct = token_scores(tokens, found, [0.1, 0.3], threshold=0.2)
    assert scores == [None, 0.1, 0.3, 0.3]
    assert correct == [None, False, True, True]


# ---------------------------------------------------------------- phrases

def test_rule_based_phrases_know_their_tokens():
    caption = "A man riding a horse on the beach, and a small red circle."
    tokens = tokenize(caption)
    found = chunk_phrases(tokens)
    texts = [p.text for p in found]
    assert texts == ["man riding horse", "horse on beach", "small red circle"]
    for phrase in found:
        assert [tokens[i].text for i in phrase.tokens] == phrase.text.split()


def test_dependency_phrases_from_a_parse():
    import spacy
    from spacy.tokens import Doc

    nlp = spacy.blank("en")
    words = ["a", "dog", "chases", "a", "red", "ball", "on", "the", "grass"]
    doc = Doc(nlp.vocab, words=words, spaces=[True] * 8 + [False],
              pos=["DET", "NOUN", "VERB", "DET", "ADJ", "NOUN", "ADP", "DET", "NOUN"],
              heads=[1, 2, 2, 5, 5, 2, 2, 8, 6],
              deps=["det", "nsubj", "ROOT", "det", "amod", "dobj", "prep", "det", "pobj"])
    caption = doc.text
    tokens = [Token(t.text, t.idx, t.idx + len(t.text), t.pos_ in ("NOUN", "VERB", "ADJ")) for t in doc]
    texts = {p.text for p in dependency_phrases(doc, tokens)}
    assert texts == {"dog chases red ball", "dog chases on grass"}
    assert caption.startswith("a dog chases")


# ---------------------------------------------------------------- region inputs

def test_masked_crop_neutralises_the_background():
    image = Image.new("RGB", (40, 20), (255, 0, 0))
    mask = np.zeros((20, 40), dtype=bool)
    mask[5:15, 10:20] = True
    mask[5, 10] = False
    crop = np.asarray(masked_crop(image, Region((10, 5, 30, 15), None, "sam", mask)))
    assert crop.shape == (20, 20, 3)                       # padded to a square
    assert tuple(crop[10, 5]) == (255, 0, 0)               # inside the mask
    assert tuple(crop[10, 15]) == (123, 117, 104)          # outside the mask: CLIP's mean colour
    assert tuple(crop[0, 0]) == (123, 117, 104)            # padding


def test_masked_crop_in_a_canvas_style_keeps_true_scale_and_the_local_background():
    from capscope.metrics.encoder import CropStyle

    image = Image.new("RGB", (100, 80), (230, 230, 230))
    image.paste((255, 0, 0), (40, 30, 60, 50))         # a 20 x 20 red square ...
    image.paste((0, 0, 255), (60, 30, 64, 50))         # ... with a blue neighbour outside its mask
    mask = np.zeros((80, 100), dtype=bool)
    mask[30:50, 40:60] = True
    crop = np.asarray(masked_crop(image, Region((40, 30, 60, 50), None, "sam", mask), CropStyle(margin=0.5, canvas=64)))
    assert crop.shape == (64, 64, 3)                   # the canvas, not the box, sets the size
    assert tuple(crop[32, 32]) == (255, 0, 0)          # the square in the middle, at its own scale:
    assert tuple(crop[32, 22]) == (255, 0, 0) and tuple(crop[32, 43]) == (230, 230, 230)
    assert tuple(crop[32, 44]) == (230, 230, 230)      # the blue neighbour is outside the mask: background
    assert tuple(crop[0, 0]) == (230, 230, 230)        # the canvas takes the local background colour


def test_alpha_input_follows_the_image_geometry():
    mask = np.zeros((100, 200), dtype=bool)
    mask[:, 50:150] = True  # the centre square of a wide image
    alpha = _alpha_input(mask, 32)
    assert alpha.shape == (1, 32, 32)
    assert torch.allclose(alpha, torch.full_like(alpha, (1 - 0.5) / 0.26), atol=1e-5)


@pytest.fixture(scope="module")
def backbone(clip_checkpoint):
    from capscope.metrics.encoder import ClipBackbone
    from capscope.metrics.loading import create_open_clip

    model = create_open_clip("ViT-B-32", str(clip_checkpoint), torch.device("cpu"))
    return ClipBackbone.from_model(model, "ViT-B-32", "ViT-B-32/test", torch.device("cpu"))


def alpha_clip_state(visual: torch.nn.Module) -> dict:
    """A visual state dict in Alpha-CLIP's released layout (OpenAI names, `attn.in_proj.*`)."""
    state = {}
    for key, value in visual.state_dict().items():
        key = key.replace("attn.in_proj_weight", "attn.in_proj.weight").replace("attn.in_proj_bias", "attn.in_proj.bias")
        state[key] = value.clone().half()
    state["conv1_alpha.weight"] = torch.randn(visual.conv1.out_channels, 1, *visual.conv1.kernel_size).half() * 0.05
    return state


@pytest.mark.slow
def test_alpha_clip_visual_checkpoint_loads(backbone, tmp_path):
    torch.manual_seed(3)
    donor = open_clip.create_model("ViT-B-32", pretrained=None).visual
    path = tmp_path / "clip_b32_alpha.pth"
    state = alpha_clip_state(donor)
    torch.save(state, path)
    metric = HiceMetric(backbone, alpha_clip_checkpoint=str(path))
    alpha = metric.backbone.alpha
    assert torch.equal(alpha.conv1_alpha.weight, state["conv1_alpha.weight"].float())
    assert torch.equal(alpha.visual.transformer.resblocks[0].attn.in_proj_weight,
                       state["transformer.resblocks.0.attn.in_proj.weight"].float())
    assert not torch.equal(backbone.model.visual.conv1.weight, alpha.visual.conv1.weight)  # the shared CLIP is untouched
    image = Image.new("RGB", (64, 48), (200, 200, 200))
    mask = np.zeros((48, 64), dtype=bool)
    mask[10:30, 10:40] = True
    regions = [Region((10, 10, 40, 30), 1.0, "sam", mask), Region((0, 0, 32, 48), 1.0, "given")]
    features = metric.backbone.image_features([image], [regions])[0]
    assert features.extra["region_features"] == "alpha-clip"
    assert features.region_feats.shape == (2, backbone.dim)
    assert not torch.allclose(features.region_feats[0], features.global_feat)  # the mask changes the feature
    bad = tmp_path / "plain.pth"
    torch.save(donor.state_dict(), bad)
    from capscope.metrics.loading import ModelUnavailable

    with pytest.raises(ModelUnavailable, match="conv1_alpha"):
        HiceMetric(backbone, alpha_clip_checkpoint=str(bad))


def test_an_image_with_several_captions_is_encoded_once_per_batch(backbone, monkeypatch):
    metric = HiceMetric(backbone)
    image = Image.new("RGB", (64, 48), (90, 140, 200))
    other = Image.new("RGB", (64, 48), (200, 40, 40))
    regions = [Region((4, 4, 30, 30), 1.0, "given")]
    seen = []
    encode = backbone.encode_images
    monkeypatch.setattr(backbone, "encode_images", lambda images, **kw: seen.append(len(images)) or encode(images, **kw))
    feats = metric.backbone.image_features([image, other, image, image], [regions] * 4)
    assert seen == [4]  # two images with one region each, not four
    assert feats[0] is feats[2] is feats[3] and feats[0] is not feats[1]
    plain = backbone.image_features([other, other, image], [regions] * 3)
    assert seen == [4, 4] and plain[0] is plain[1]


# ---------------------------------------------------------------- end to end

@pytest.mark.slow
def test_capscope_score_hice_on_generated_pngs(tmp_path, clip_checkpoint):
    from capscope.bench.speed import scene

    rng = np.random.default_rng(5)
    rows = []
    for i in range(2):
        image, boxes, caption = scene(rng)
        image.save(tmp_path / f"s{i}.png")
        rows.append({"id": f"s{i}", "image": f"s{i}.png", "caption": caption,
                     "references": ["a red circle next to a blue square.", "two shapes"],
                     "regions": [{"box": b} for b in boxes]})
    rows.append({"id": "proposed", "image": "s0.png", "caption": "a large green star on a white wall."})
    (tmp_path / "pairs.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out.jsonl"
    code = main(["score", "--input", str(tmp_path / "pairs.jsonl"), "--output", str(out), "--metric", "hice",
                 "--clip-model", "ViT-B-32", "--clip-pretrained", str(clip_checkpoint), "--device", "cpu",
                 "--regions", "classic", "--max-regions", "5"])
    assert code == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in results] == ["s0", "s1", "proposed"]
    for row in results:
        assert row["error"] is None
        hice = row["metrics"]["hice"]
        keys = {"hice", "g_itc", "l_itc", "precision", "recall"}
        assert keys <= set(hice["scores"])
        assert ({"ref_hice", "g_ttc", "l_ttc"} <= set(hice["scores"])) == (row["id"] != "proposed")
        s = hice["scores"]
        assert s["l_itc"] == pytest.approx(hmean(s["precision"], s["recall"]), abs=1e-6)
        assert s["hice"] == pytest.approx(hmean(s["g_itc"], s["l_itc"]), abs=1e-6)
        assert len(hice["token_scores"]) == len(hice["token_correct"]) == len(row["tokens"])
        assert len(hice["region_scores"]) == len(hice["region_mentioned"]) == len(row["regions"])
        assert hice["phrases"], "every caption has phrases"
        for phrase in hice["phrases"]:
            assert set(phrase) == {"text", "tokens", "score", "correct"}
            assert [row["tokens"][i]["text"] for i in phrase["tokens"]] == phrase["text"].split()
        assert hice["features"]["regions"] == "masked-crop"
    assert results[0]["metrics"]["hice"]["phrases"][0]["text"].split()[-1] in ("circle", "square", "triangle")
