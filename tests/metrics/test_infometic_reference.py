"""capscope's InfoMetIC and InfoCLIP against the official code's own outputs.

tests/fixtures/infometic_reference/ holds official-format feature files and
what the official CLIPSeqModel computed on them with the seeded weights of
released_weights.py (see make_infometic_reference.py there)."""
import json
from pathlib import Path

import pytest
import torch

from capscope.metrics.scorer import Scorer

FIXTURE = Path(__file__).parents[1] / "fixtures" / "infometic_reference"
CASES = json.loads((FIXTURE / "outputs.json").read_text())["cases"]
TOL = 1e-4


@pytest.fixture(scope="module")
def scorer(released_checkpoint):
    # the released code cuts a caption at 30 pieces; case 2 is longer
    return Scorer(["infometic"], device="cpu", infometic_checkpoint=str(released_checkpoint), long_captions="cut")


def test_released_layout_loads_strictly(released_checkpoint):
    state = torch.load(released_checkpoint)
    assert len(state) == 430
    assert state["clip_backbone.visual.conv1.weight"].dtype == torch.float16
    assert state["ln.weight"].dtype == torch.float32


@pytest.mark.parametrize("case", CASES, ids=[c["features"] for c in CASES])
def test_infometic_equals_official(scorer, case):
    row = scorer.score(None, case["caption"], features=str(FIXTURE / case["features"]))
    out, ref = row["metrics"]["infometic"], case["infometic"]
    for key in ("recall", "precision", "overall", "overall_plus"):
        assert out["scores"][key] == pytest.approx(ref[key], abs=TOL), key
    assert out["region_scores"] + [out["null_score"]] == pytest.approx(ref["region_scores"], abs=TOL)
    pieces = [p["score"] for p in out["pieces"]]
    # official piece list = <sot>, pieces, <eot>; both ends get exactly 0
    assert ref["piece_scores"][0] == 0 and ref["piece_scores"][-1] == 0
    assert pieces == pytest.approx(ref["piece_scores"][1:-1], abs=TOL)


@pytest.mark.parametrize("case", CASES, ids=[c["features"] for c in CASES])
def test_infoclip_equals_official(released_checkpoint, case):
    # InfoCLIP runs on the raw features of the same backbone
    scorer = _infoclip_scorer(released_checkpoint)
    row = scorer.score(None, case["caption"], features=str(FIXTURE / case["features"]))
    out, ref = row["metrics"]["infoclip"], case["infoclip"]
    assert out["scores"]["recall"] == pytest.approx(ref["recall"], abs=TOL)
    assert out["scores"]["precision"] == pytest.approx(ref["precision"], abs=TOL)
    assert out["region_scores"] + [out["null_score"]] == pytest.approx(ref["region_scores"], abs=TOL)
    assert [p["score"] for p in out["pieces"]] == pytest.approx(ref["piece_scores"][1:-1], abs=TOL)


_INFOCLIP = {}


def _infoclip_scorer(checkpoint):
    if "s" not in _INFOCLIP:
        state = torch.load(checkpoint)
        backbone = {k[len("clip_backbone."):]: v for k, v in state.items() if k.startswith("clip_backbone.")}
        path = checkpoint.parent / "backbone.pt"
        torch.save(backbone, path)
        _INFOCLIP["s"] = Scorer(["infoclip"], device="cpu", clip_model="ViT-B-32-quickgelu", clip_pretrained=str(path),
                                long_captions="cut")
    return _INFOCLIP["s"]


def test_piece_ids_match_official_tokenizer(scorer):
    from capscope.metrics.text import bpe_pieces, model_ids, tokenize

    backbone = scorer.metrics["infometic"].backbone
    for case in CASES:
        pieces = bpe_pieces(case["caption"], tokenize(case["caption"]), backbone.tokenizer)
        ids, mask, kept = model_ids(pieces)
        assert ids[: kept + 2] == case["ids"]
