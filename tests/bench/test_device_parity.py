"""The CPU-against-GPU check (`python -m capscope.bench.device_parity`): its
comparisons by hand, a run on the CPU against itself, and, where CUDA is
visible, the real check (skipped on CPU-only machines)."""
import pytest
import torch

from capscope.bench.device_parity import compare, off_device, random_weight_files, row_gaps, within_tolerance


def _row(scores, token_scores=None, token_correct=None, region_scores=None, region_mentioned=None):
    return {"metrics": {"m": {"scores": scores, "token_scores": token_scores, "token_correct": token_correct,
                              "region_scores": region_scores, "region_mentioned": region_mentioned}}}


def test_row_gaps_by_hand():
    base = [_row({"overall": 0.5}, [0.2, None, -0.4], [True, None, False], [0.1, 0.9], [False, True])]
    other = [_row({"overall": 0.50003}, [0.2002, None, -0.4], [True, None, True], [0.1, 0.8999], [False, True])]
    gaps = row_gaps("m", base, other)
    assert gaps["score"] == pytest.approx(3e-5)
    assert gaps["token"] == pytest.approx(2e-4)
    assert gaps["attribution_relative"] == pytest.approx(2e-4 / 0.4)  # the row's largest |attribution| is 0.4
    assert gaps["region"] == pytest.approx(1e-4)
    assert (gaps["verdicts"], gaps["verdicts_flipped"]) == (4, 1)  # 2 words (None skipped) and 2 regions
    assert not within_tolerance("infometic", gaps)  # token gap 2e-4 > 1e-4
    assert within_tolerance("clip4dm", {**gaps, "region": 0.0})  # relative 5e-4 <= 1e-3


@pytest.mark.slow
def test_a_cpu_scorer_is_reported_off_a_gpu(tmp_path):
    from capscope.metrics.scorer import Scorer

    files = random_weight_files(tmp_path, ("clip-s",))
    scorer = Scorer(["clip-s"], device="cpu", regions="given", **files["clip-s"])
    stray, checked = off_device(scorer, torch.device("cuda"))
    assert checked > 100 and len(stray) == checked
    assert off_device(scorer, torch.device("cpu")) == ([], checked)


@pytest.mark.slow
def test_the_cpu_against_itself_is_exact():
    result = compare("cpu", "cpu", n_pairs=2, weights=("random",), metrics=("clip-s", "infometic"))
    assert result["ok"]
    for gaps in result["weights"]["random"].values():
        assert gaps["score"] == gaps["token"] == gaps["region"] == 0.0 and gaps["verdicts_flipped"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gives_the_cpu_numbers():
    result = compare("cpu", "cuda", n_pairs=6)
    bad = {f"{kind} {name}": gaps for kind, per in result["weights"].items() for name, gaps in per.items()
           if not gaps["ok"]}
    assert result["ok"], bad
