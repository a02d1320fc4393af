"""CLIP features: dynamic-length text equals the full context, CLIP-S equals an
independent open_clip computation, checkpoints load through the user's path."""
import subprocess
import sys

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image

from capscope.metrics import encoder, image_cache, tower_passes
from capscope.metrics.encoder import bucket_groups
from capscope.metrics.loading import ModelUnavailable, create_open_clip
from capscope.metrics.scorer import Scorer

# short, long, short: the long one runs in its own length group, out of input order
CAPTIONS = ["a dog.", "A very large sheep is standing under clouds, near an old wooden fence and a tree.", "two cats."]


@pytest.fixture(scope="module")
def scorer(clip_checkpoint, tmp_path_factory):
    torch.manual_seed(1)
    pacs = open_clip.create_model("ViT-B-32-quickgelu", pretrained=None)
    path = tmp_path_factory.mktemp("pacs") / "clip_ViT-B-32.pth"
    torch.save({"epoch": 3, "state_dict": pacs.state_dict()}, path)  # PAC-S's checkpoint layout
    return Scorer(["clip-s", "pac-s"], device="cpu", clip_model="ViT-B-32",
                  clip_pretrained=str(clip_checkpoint), pacs_checkpoint=str(path))


@pytest.mark.slow
def test_dynamic_length_equals_full_context(scorer):
    backbone = scorer.metrics["clip-s"].backbone
    with torch.no_grad():
        full = backbone.model.encode_text(open_clip.get_tokenizer("ViT-B-32")(CAPTIONS)).float()
    assert torch.allclose(backbone.encode_texts(CAPTIONS), full, atol=1e-4)
    ids = [320, 1929, 49407, 0, 49406]
    with torch.no_grad():
        triples = torch.zeros(len(ids), 77, dtype=torch.long)
        triples[:, 0], triples[:, 1], triples[:, 2] = 49406, torch.tensor(ids), 49407
        full_pieces = backbone.model.encode_text(triples).float()
    assert torch.allclose(backbone.encode_pieces(ids), full_pieces, atol=1e-4)


def test_texts_met_before_are_not_encoded_again_and_keep_their_floats(scorer, monkeypatch):
    backbone = scorer.metrics["clip-s"].backbone
    backbone.clear_caches()
    passes = []
    encode_group = backbone._encode_group
    monkeypatch.setattr(backbone, "_encode_group", lambda ids: passes.append(ids.shape) or encode_group(ids))
    first = backbone.encode_texts(CAPTIONS + ["a dog."])  # "a dog." twice: encoded once
    rows = {length: encoder.text_rows(backbone.device, length, backbone.runtime) for length in (8, 24)}
    assert rows == ({8: 8, 24: 2} if backbone.runtime == "eager" else {8: 2, 24: 1})
    assert [tuple(shape) for shape in passes] == [(rows[8], 8), (rows[24], 24)]  # two short texts in one pass
    again = backbone.encode_texts(["two cats.", "a dog.", "a red bus."])
    assert len(passes) == 3  # only "a red bus." went through the tower
    assert torch.equal(again[0], first[2]) and torch.equal(again[1], first[0]) and torch.equal(first[3], first[0])
    backbone.clear_caches()
    assert torch.equal(backbone.encode_texts(["two cats."])[0], first[2])  # a fresh pass gives the same floats
    (kept,) = backbone._texts._entries.values()
    assert kept.untyped_storage().nbytes() == backbone.dim * 4  # a kept row does not hold its whole pass
    for key in ("cpu", "onnx"):  # another pass shape: not the same floats, so not a hit
        monkeypatch.setitem(tower_passes.TEXT_TOKENS, key, 32)
    backbone.encode_texts(["two cats."])
    assert tuple(passes[-1]) == (4, 8)


def test_bucket_groups_depend_on_each_length_alone_and_keep_every_index():
    assert bucket_groups([3, 20, 4, 5, 30, 3]) == {4: [0, 2, 5], 8: [3], 24: [1], 32: [4]}
    assert bucket_groups([76, 77, 9]) == {16: [2], 77: [0, 1]}
    assert bucket_groups([10, 12], context=12) == {12: [0, 1]}
    assert bucket_groups([]) == {}


def test_clip_s_and_ref_clip_s_equal_independent_open_clip(scorer, clip_checkpoint):
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (224, 224, 3), dtype=np.uint8))
    refs = ["a cat on a mat.", "two dogs."]
    row = scorer.score(image, CAPTIONS[0], references=refs)
    model, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32", pretrained=str(clip_checkpoint))
    tok = open_clip.get_tokenizer("ViT-B-32")
    with torch.no_grad():
        v = torch.nn.functional.normalize(model.encode_image(preprocess(image)[None]), dim=-1)
        t = torch.nn.functional.normalize(model.encode_text(tok(["A photo depicts " + CAPTIONS[0]])), dim=-1)
        r = torch.nn.functional.normalize(model.encode_text(tok(["A photo depicts " + x for x in refs])), dim=-1)
    clip_s = 2.5 * max((v @ t.T).item(), 0)
    best = max((t @ r.T).max().item(), 0)
    ref = 2 * clip_s * best / (clip_s + best) if clip_s + best > 0 else 0
    scores = row["metrics"]["clip-s"]["scores"]
    assert scores["clip_s"] == pytest.approx(clip_s, abs=1e-4)
    assert scores["ref_clip_s"] == pytest.approx(ref, abs=1e-4)
    assert set(row["metrics"]["pac-s"]["scores"]) == {"pac_s", "ref_pac_s"}


def test_pacs_checkpoint_loads_with_state_dict_key(scorer):
    assert scorer.metrics["pac-s"].weight == 2.0
    assert "PAC-S" in scorer.metrics["pac-s"].backbone.name


def test_wrong_architecture_is_one_clear_line(clip_checkpoint):
    with pytest.raises(ModelUnavailable, match="(does not fit|other shapes than) this architecture"):
        create_open_clip("ViT-B-16", str(clip_checkpoint), torch.device("cpu"))


@pytest.mark.slow
def test_offline_error_is_one_line_without_traceback(tmp_path):
    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"id": "a", "image": "x.png", "caption": "a cat"}\n')
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CAPSCOPE_NO_DEMO": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "capscope.cli", "score", "--input", str(pairs), "--output", str(tmp_path / "o.jsonl"),
         "--metric", "clip-s", "--clip-pretrained", "openai"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert "ViT-B-32/openai" in errors[0] and "--clip-pretrained" in errors[0]


def test_missing_infometic_checkpoint_names_file_and_flag(tmp_path):
    with pytest.raises(ModelUnavailable, match="--infometic-checkpoint"):
        Scorer(["infometic"], device="cpu", infometic_checkpoint=str(tmp_path / "nope.pth"))


def test_remembered_bpe_ids_are_open_clips_tokenizer_ids_cut_as_it_cuts(scorer, monkeypatch):
    backbone = scorer.metrics["clip-s"].backbone
    texts = ["A café’s  naïve dog!!", " ".join(["word"] * 100), "", "Ünïcödé “quotes” – dash"]
    tokens = open_clip.get_tokenizer("ViT-B-32")(texts)
    expected = [tokens[i, : n].tolist() for i, n in enumerate((tokens.argmax(dim=-1) + 1).tolist())]
    sent = []
    monkeypatch.setattr(backbone, "encode_ids", lambda sequences, rows=None: sent.extend(sequences))
    backbone.encode_texts(texts)
    assert sent == expected and len(sent[1]) == 77 and sent[1][-1] == 49407
    calls = []
    encode = backbone.tokenizer.encode
    monkeypatch.setattr(backbone.tokenizer, "encode", lambda text: calls.append(text) or encode(text))
    assert backbone.reads_whole(texts[0]) and not backbone.reads_whole(texts[1])
    assert calls == []  # each text was split into BPE pieces once


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_an_image_is_hashed_once_for_every_metric_and_its_pixels_not_copied(scorer, monkeypatch):
    hashed, image_key = [], image_cache.image_key
    monkeypatch.setattr(image_cache, "image_key", lambda image: hashed.append(image) or image_key(image))
    images = [Image.fromarray(np.full((40, 50, 3), shade, dtype=np.uint8)) for shade in (10, 200)]
    for metric in scorer.metrics.values():
        metric.backbone.clear_caches()
    rows = scorer.score_batch([{"id": str(i), "image": im, "caption": "a dog."} for i, im in enumerate(images)])
    assert all(set(r["metrics"]) == {"clip-s", "pac-s"} for r in rows)
    assert hashed == images  # two metrics, one hash an image, and of the caller's own image (an RGB image is not copied)
    for metric in scorer.metrics.values():
        metric.backbone.clear_caches()
    hashed.clear()
    scorer.score_batch([{"id": "0", "image": images[0], "caption": "a dog."}],
                       ahead=[{"id": "1", "image": images[1], "caption": "a cat."}])
    assert hashed == images  # the look-ahead's image filled both metrics' spare rows on one hash


def test_a_batchs_image_keys_are_made_together_each_once(monkeypatch):
    hashed, image_key = [], image_cache.image_key
    monkeypatch.setattr(image_cache, "image_key", lambda image: hashed.append(image) or image_key(image))
    images = [Image.fromarray(np.full((20, 30, 3), shade, dtype=np.uint8)) for shade in (1, 2, 3)]
    hashes = [image_cache.ImageHash(im) for im in images]
    made_before = hashes[1]()
    assert image_cache.image_keys(hashes + hashes[:1]) == [image_key(im) for im in images + images[:1]]
    assert made_before == image_key(images[1])
    assert sorted(map(id, hashed)) == sorted(map(id, images))  # each once, the one made before not again


def test_the_host_part_of_a_gpus_path_sends_the_pixels_as_bytes_and_restores_the_cpus(scorer):
    from capscope.bench.speed.precision_timings import free_towers, host_as_for_gpu

    backbone = scorer.metrics["clip-s"].backbone
    images = [Image.fromarray(np.full((224, 224, 3), shade, dtype=np.uint8)) for shade in (5, 250)]
    sent, widths = [], (dict(tower_passes.IMAGE_ROWS), dict(tower_passes.TEXT_ROWS))
    with free_towers(backbone), host_as_for_gpu(backbone):
        stand_in = backbone.model.encode_image
        backbone.model.encode_image = lambda pixels: sent.append(pixels.clone()) or stand_in(pixels)
        assert encoder.pass_rows(encoder.IMAGE_ROWS, torch.device("cpu")) == encoder.IMAGE_ROWS["cuda"]
        backbone.encode_images(images)
        del backbone.model.encode_image
    assert len(sent) == 1 and sent[0].dtype == torch.uint8
    assert sent[0].shape == (encoder.IMAGE_ROWS["cuda"], 224, 224, 3)
    assert sent[0][0].eq(5).all() and sent[0][1].eq(250).all() and sent[0][2:].eq(5).all()
    assert (tower_passes.IMAGE_ROWS, tower_passes.TEXT_ROWS) == widths and "passes" not in vars(backbone.pixels)
    features = backbone.encode_images(images)  # the real tower again, floats on the host
    assert features.shape == (2, backbone.dim) and features.abs().sum() > 0
