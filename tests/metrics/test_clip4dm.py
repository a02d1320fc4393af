"""clip4dm against the released CLIP4DM computation, re-done the way its code
does it (`capscope.bench.clip4dm_released`: one image and one caption per pass,
the full 77-token context, the image encoded afresh, attention probabilities
taken from open_clip's own blocks, the words aggregated by its loop).
capscope's metric batches captions, cuts them to their real length and reads
the image from its cache; the numbers must not move."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from capscope.bench.clip4dm_released import released_clip4dm, space_tokenize
from capscope.metrics.clip4dm import split_words
from capscope.metrics.clip4dm_relevance import CHUNK
from capscope.common.errors import ModelUnavailable
from capscope.metrics.scorer import Scorer

CAPTIONS = [
    "a man's dog, running on the grass.",
    "A photo of a skateboarder doing a kickflip, with zebras behind him.",
    "two giraffes depicts a photo. a t-shirt, 3.5 bananas",
    "Unicyclists juggle pineapples near the lighthouse",
    "a cat",
    "a red bus , parked ,near a stop sign .",
]


@pytest.fixture(scope="module")
def images():
    rng = np.random.RandomState(3)
    noise = Image.fromarray((rng.rand(240, 320, 3) * 255).astype("uint8"))
    blocks = np.zeros((200, 200, 3), dtype="uint8")
    blocks[:100] = (220, 30, 30)
    blocks[100:, 50:150] = (40, 70, 220)
    return [noise, Image.fromarray(blocks)]


@pytest.fixture(scope="module")
def epsilon_scorer(clip_checkpoint):
    """clip4dm at epsilon 0: a random CLIP's attributions (about 1e-5) then split into both verdicts."""
    return Scorer(["clip4dm", "clip-s"], device="cpu", clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint),
                  clip4dm_epsilon=0.0)


@pytest.fixture(scope="module")
def reference_model(epsilon_scorer):
    backbone = epsilon_scorer.metrics["clip4dm"].backbone
    return backbone.model, backbone.preprocess, backbone.tokenizer


def _close(ours, theirs, scale):
    return abs(ours - theirs) <= 1e-3 * abs(theirs) + 1e-3 * scale


def test_split_words_follows_the_released_code():
    text = "A photo depicts a man's dog,running. 3.5 t-shirts!  end"
    assert [w.text for w in split_words(text)] == space_tokenize(text)
    assert all(text[w.start : w.end] == w.text for w in split_words(text))


def test_clip4dm_equals_the_released_clip4dm(epsilon_scorer, reference_model, images):
    rows = [{"id": f"{i}-{j}", "image": image, "caption": caption}
            for i, image in enumerate(images) for j, caption in enumerate(CAPTIONS)]
    scored = epsilon_scorer.score_batch(rows)
    verdicts = {True: 0, False: 0}
    for row, given in zip(scored, rows):
        ours = row["metrics"]["clip4dm"]
        ref = released_clip4dm(*reference_model, given["image"], given["caption"], epsilon=0.0)
        scale = max(abs(s) for _, s in ref["words"])
        assert [w["text"] for w in ours["words"]] == [w for w, _ in ref["words"]]
        for word, (_, theirs) in zip(ours["words"], ref["words"]):
            assert _close(word["score"], theirs, scale), (given["caption"], word, theirs)
        assert abs(ours["scores"]["clip_s"] - ref["clip_score"]) <= 1e-4
        assert abs(ours["scores"]["clip_s"] - row["metrics"]["clip-s"]["scores"]["clip_s"]) <= 1e-4
        assert _close(ours["scores"]["negative_attribution"], ref["sum_negative_attribution"], scale * 10)
        f_clip_s = ref["sum_negative_attribution"] * (1 - ref["clip_score"] / 2.5)
        assert _close(ours["scores"]["f_clip_s"], f_clip_s, scale * 10)
        # every verdict given is the released one: a semantic token inside one word is wrong iff that word is
        by_span = {(w["start"], w["end"]): theirs for w, (_, theirs) in zip(ours["words"], ref["words"])}
        for token, correct in zip(row["tokens"], ours["token_correct"]):
            if correct is None:
                continue
            theirs = by_span.get((token["start"], token["end"]))
            if theirs is None or abs(theirs) < 1e-3 * scale:
                continue  # a token spanning several words, or a score within float noise of epsilon
            assert correct == (theirs >= 0.0), (given["caption"], token["text"], theirs)
            verdicts[correct] += 1
        assert len(ours["token_scores"]) == len(row["tokens"])
        assert all(p["token"] is None or 0 <= p["token"] < len(row["tokens"]) for p in ours["pieces"])
    assert verdicts[True] >= 5 and verdicts[False] >= 5, verdicts  # both verdicts were compared


@pytest.mark.slow
def test_words_past_the_context_get_no_score_when_cut(clip_checkpoint, reference_model, images):
    scorer = Scorer(["clip4dm"], device="cpu", clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint),
                    clip4dm_epsilon=0.0, long_captions="cut")  # the released code's reading
    caption = " ".join(["a small red circle beside a large blue square,"] * 10)
    row = scorer.score(images[1], caption)
    ours = row["metrics"]["clip4dm"]
    ref = released_clip4dm(*reference_model, images[1], caption, epsilon=0.0)
    assert [w["text"] for w in ours["words"]] == [w for w, _ in ref["words"]]
    assert len(ours["words"]) < len(split_words(caption))
    assert ours["token_scores"][0] is not None and ours["token_scores"][-1] is None
    assert ours["token_correct"][-1] is None
    last_seen = ours["words"][-1]["end"]
    assert all(s is None for t, s in zip(row["tokens"], ours["token_scores"]) if t["start"] >= last_seen)
    assert ours["truncated"] is True and ours["windows"][0][1] <= last_seen


def test_a_long_caption_is_read_in_windows_each_as_the_released_code_reads_it(epsilon_scorer, reference_model, images):
    caption = " ".join(["a small red circle beside a large blue square,"] * 10)
    row = epsilon_scorer.score(images[1], caption)
    ours = row["metrics"]["clip4dm"]
    assert len(ours["windows"]) > 1 and ours["truncated"] is False
    assert all(s is not None for t, s in zip(row["tokens"], ours["token_scores"]) if t["semantic"])
    start, end = ours["windows"][-1]
    ref = released_clip4dm(*reference_model, images[1], caption[start:end], epsilon=0.0)
    last = [w for w in ours["words"] if w["start"] >= start]
    owned_from = min(w["start"] for w in last)
    expected = [(w, s) for w, s in ref["words"]]
    got = [(w["text"], w["score"]) for w in last]
    # the last window's words the merged row takes are the released code's words of that window, same scores
    assert [w for w, _ in got] == [w for w, _ in expected][-len(got):]
    for (_, a), (_, b) in zip(got, expected[-len(got):]):
        assert a == pytest.approx(b, abs=1e-6)
    assert owned_from >= start


def test_a_caption_scores_the_same_alone_and_in_any_batch(epsilon_scorer, images):
    captions = CAPTIONS * 4  # more than one chunk of captions per pass
    assert len(captions) > CHUNK
    alone = {}
    for caption in CAPTIONS:
        alone[caption] = epsilon_scorer.score(images[0], caption)["metrics"]["clip4dm"]
    for size in (3, len(captions)):
        rows = [{"id": str(i), "image": images[i % 2 if size == 3 else 0], "caption": c}
                for i, c in enumerate(captions[:size])]
        for given, row in zip(rows, epsilon_scorer.score_batch(rows)):
            if given["image"] is not images[0]:
                continue
            ours, single = row["metrics"]["clip4dm"], alone[given["caption"]]
            for key, value in single["scores"].items():
                assert abs(ours["scores"][key] - value) <= 1e-6
            for a, b in zip(ours["token_scores"], single["token_scores"]):
                assert (a is None) == (b is None) and (a is None or abs(a - b) <= 1e-4 * abs(b) + 1e-12)
            assert ours["token_correct"] == single["token_correct"]


@pytest.mark.slow
def test_options_land_in_the_model_block_and_bad_layers_are_one_line(clip_checkpoint, images):
    scorer = Scorer(["clip4dm"], device="cpu", clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint),
                    clip4dm_layers=2, clip4dm_epsilon=-1e-4)
    row = scorer.score(images[1], "a red square")
    assert row["model"]["metric_options"] == {"clip4dm": {"epsilon": -1e-4, "layers": 2}}
    with pytest.raises(ModelUnavailable, match="clip4dm-layers must be between 1 and 12"):
        Scorer(["clip4dm"], device="cpu", clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint),
               clip4dm_layers=13)
