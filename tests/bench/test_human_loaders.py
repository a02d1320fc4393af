"""Loaders of the human-judgement benchmarks (bench/human.py): small files in each
public layout, built from the documented schema in tmp_path, rows checked exactly."""
import csv
import json
import random

import numpy as np
import pytest
from PIL import Image
from scipy.io import savemat

from capscope.bench.human import BENCHMARKS, Loaded, load, missing_data_hint
from capscope.bench.human_pairs import PASCAL_DRAWS, PASCAL_JUDGEMENTS
from capscope.bench.human_rows import Pair, Rated
from capscope.metrics.text import load_spacy, tokenize


def png(folder, name):
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 6), (200, 30, 30)).save(folder / name, format="PNG")
    return (folder / name).resolve()


# ---------------------------------------------------------------- Flickr8k

def flickr_file(root, name="flickr8k.json"):
    """Three images: one with NaN, odd whitespace and a repeated caption, one whose
    image is missing, one with a missing and an empty caption and a null rating."""
    png(root / "images", "1000_a.jpg")
    png(root / "images", "3000_c.jpg")
    data = {
        "1000_a": {"image_path": "Flicker8k_Dataset/1000_a.jpg",
                   "ground_truth": ["A  dog runs\n on grass .", "a dog"],
                   "human_judgement": [
                       {"caption": "  a brown\tdog  runs ", "rating": 3.0},
                       {"caption": "a cat", "rating": float("nan")},
                       {"caption": "a brown dog runs", "rating": 4.0}]},
        "2000_b": {"image_path": "Flicker8k_Dataset/2000_b.jpg", "ground_truth": ["x"],
                   "human_judgement": [{"caption": "a man", "rating": 1.0}, {"caption": "a woman", "rating": 2.0}]},
        "3000_c": {"image_path": "Flicker8k_Dataset/3000_c.jpg", "ground_truth": [],
                   "human_judgement": [{"rating": 2.0}, {"caption": "   ", "rating": 1.0},
                                       {"caption": "two birds", "rating": None},
                                       {"caption": "two birds", "rating": 0.5}]},
    }
    (root / name).write_text(json.dumps(data))      # json writes NaN as the released files do
    return root / name


def test_flickr8k_expert_rows_exactly(tmp_path):
    flickr_file(tmp_path)
    loaded = load("flickr8k-expert", tmp_path)
    image_a, image_c = (tmp_path / "images" / "1000_a.jpg").resolve(), (tmp_path / "images" / "3000_c.jpg").resolve()
    refs_a = ["A dog runs on grass .", "a dog"]
    assert loaded.rows == [
        Rated(image_a, "a brown dog runs", 3.0, refs_a, "1000_a"),
        Rated(image_a, "a brown dog runs", 4.0, refs_a, "1000_a"),
        Rated(image_c, "two birds", 0.5, [], "3000_c"),
    ]
    assert (loaded.kind, loaded.tau_variant, loaded.statistic, loaded.benchmark) == ("rating", "c", "kendall", "flickr8k-expert")
    assert loaded.base_dir == tmp_path.resolve()
    assert "1 NaN ratings skipped" in loaded.protocol and "compute_correlations.py" in loaded.protocol
    assert len(loaded.problems) == 4
    missing_image, no_caption, empty_caption, null_rating = loaded.problems
    assert "2000_b" in missing_image and "2 judgements skipped" in missing_image and "not found" in missing_image
    assert "3000_c judgement 0" in no_caption and "caption missing" in no_caption
    assert "3000_c judgement 1" in empty_caption
    assert "3000_c judgement 2" in null_rating and "rating missing" in null_rating


def test_flickr8k_rows_match_the_pacs_procedure(tmp_path):
    """PAC-S data/dataset.py: per key, per judgement, NaN skipped, ' '.join(split())
    on candidate and references, image = file name of image_path (no bad rows here)."""
    path = flickr_file(tmp_path)
    data = json.loads(path.read_text())
    del data["2000_b"], data["3000_c"]
    path.write_text(json.dumps(data))
    expected = [(entry["image_path"].split("/")[-1], [" ".join(g.split()) for g in entry["ground_truth"]],
                 " ".join(j["caption"].split()), j["rating"])
                for entry in data.values() for j in entry["human_judgement"] if not np.isnan(j["rating"])]
    rows = load("flickr8k-expert", path).rows
    assert [(r.image.name, r.references, r.caption, r.rating) for r in rows] == expected


def test_flickr8k_cf_reads_the_crowdflower_file_and_the_clipscore_image_folder(tmp_path):
    png(tmp_path / "Flicker8k_Dataset", "9_x.jpg")   # clipscore's download.py layout, no images/
    data = {"9_x.jpg": {"image_path": "Flicker8k_Dataset/9_x.jpg", "ground_truth": ["r1", "r2"],
                        "human_judgement": [{"caption": "c1", "rating": 0.6666666}, {"caption": "c2", "rating": 0.0}]}}
    (tmp_path / "crowdflower_flickr8k.json").write_text(json.dumps(data))
    loaded = load("flickr8k-cf", tmp_path)
    image = (tmp_path / "Flicker8k_Dataset" / "9_x.jpg").resolve()
    assert loaded.rows == [Rated(image, "c1", 0.6666666, ["r1", "r2"], "9_x.jpg"),
                           Rated(image, "c2", 0.0, ["r1", "r2"], "9_x.jpg")]
    assert loaded.tau_variant == "b" and loaded.problems == []


def test_file_path_and_folder_give_the_same_rows(tmp_path):
    path = flickr_file(tmp_path)
    assert load("flickr8k-expert", path).rows == load("flickr8k-expert", tmp_path).rows


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "expected an object keyed by image"),
    ('{"k": {"image_path": "a.jpg"}}', "has no human_judgement list"),
    ("{not json", "not JSON"),
])
def test_a_file_that_is_not_the_flickr_layout_is_one_clear_error(tmp_path, content, message):
    (tmp_path / "flickr8k.json").write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        load("flickr8k-expert", tmp_path)
    assert "\n" not in str(err.value)


def test_unknown_benchmark_missing_folder_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown benchmark 'flickr30k'.*flickr8k-expert"):
        load("flickr30k", tmp_path)
    with pytest.raises(ValueError, match="does not exist.*flickr8k.json"):
        load("flickr8k-expert", tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no crowdflower_flickr8k.json in"):
        load("flickr8k-cf", tmp_path)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_has_a_one_line_hint_with_a_source(name):
    hint = missing_data_hint(name)
    assert "\n" not in hint and ("http" in hint or "capscope" in hint)


# ---------------------------------------------------------------- Composite

def test_composite_csv_rows_exactly(tmp_path):
    image = png(tmp_path / "images", "COCO_1.jpg")
    with open(tmp_path / "en_test_composite_da.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["mt", "refs", "score", "imgid"])
        writer.writerow(["a  red bus", "['a bus', 'a red  bus']", "4", "COCO_1.jpg"])
        writer.writerow(["a dog", "['r']", "nan", "COCO_1.jpg"])
        writer.writerow(["a cat", "['r']", "2", "COCO_2.jpg"])
        writer.writerow(["a car", "not a list", "3", "COCO_1.jpg"])
        writer.writerow(["", "['r']", "1", "COCO_1.jpg"])
        writer.writerow(["a bus", "['r']", "five", "COCO_1.jpg"])
        writer.writerow(["a bus again", "['a bus']", "5", "COCO_1.jpg"])
    loaded = load("composite", tmp_path)
    assert loaded.rows == [Rated(image, "a red bus", 4.0, ["a bus", "a red bus"], "COCO_1.jpg"),
                           Rated(image, "a bus again", 5.0, ["a bus"], "COCO_1.jpg")]
    assert loaded.tau_variant == "c" and "1 NaN skipped" in loaded.protocol
    assert [p.split(": ")[1] for p in loaded.problems] == ["line 4", "line 5", "line 6", "line 7"]
    assert "COCO_2.jpg" in loaded.problems[0] and "refs" in loaded.problems[1]
    assert "caption" in loaded.problems[2] and "bad rating 'five'" in loaded.problems[3]


def test_composite_json_in_the_flickr_layout(tmp_path):
    image = png(tmp_path / "images", "44.jpg")
    data = {"44": {"image_path": "flickr30k_images/44.jpg", "ground_truth": ["g"],
                   "human_judgement": [{"caption": "c", "rating": 5.0}]}}
    (tmp_path / "composite.json").write_text(json.dumps(data))
    assert load("composite", tmp_path).rows == [Rated(image, "c", 5.0, ["g"], "44")]


def test_composite_csv_without_the_columns_is_one_clear_error(tmp_path):
    (tmp_path / "composite.csv").write_text("caption_text,value\nx,1\n")
    with pytest.raises(ValueError, match="no mt or cand or caption column"):
        load("composite", tmp_path)


# ---------------------------------------------------------------- PASCAL-50S

def cell(*values):
    out = np.empty((1, len(values)), dtype=object)
    for i, value in enumerate(values):
        out[0, i] = value
    return out


def pascal_folder(root, pairs, votes_for_a):
    """pair_pascal.mat as cells and consensus_pascal.mat as a struct array whose text
    fields are 1x1 cells, the nesting the public loaders unpack with x[0][0]."""
    savemat(root / "pair_pascal.mat", {
        "new_input": cell(*(cell(name, " " + a + " ", b) for name, a, b, _ in pairs)),
        "category": np.array([[category for *_, category in pairs]], dtype=float),
        "new_data": np.zeros((len(pairs), 2))})
    triplets = np.zeros((1, PASCAL_JUDGEMENTS * len(pairs)), dtype=[("a", "O"), ("b", "O"), ("c", "O"), ("d", "O")])
    for p, (name, a, b, _) in enumerate(pairs):
        for j in range(PASCAL_JUDGEMENTS):
            k = p * PASCAL_JUDGEMENTS + j
            vote_a = j < votes_for_a[p]
            first, second = (a, b) if j % 2 else (b, a)       # the pair's captions in either order
            triplets[0, k] = (cell(f"ref {p}-{j}"), cell(first), cell(second),
                              np.array([[1 if (first == a) == vote_a else 2]], dtype=float))
    savemat(root / "consensus_pascal.mat", {"triplets": triplets})


def test_pascal50s_labels_categories_and_ties(tmp_path):
    for name in ("p0.jpg", "p1.jpg", "p2.jpg"):
        png(tmp_path / "images", name)
    pairs = [("p0.jpg", "a tie here", "the other", 1), ("p1.jpg", "tie again", "other two", 2),
             ("p2.jpg", "loses", "wins", 3), ("gone.jpg", "x", "y", 4)]
    pascal_folder(tmp_path, pairs, votes_for_a=[24, 24, 10, 30])
    loaded = load("pascal-50s", tmp_path)
    # ties: random.Random(42) gives 0.639 then 0.025: 24 > 24 + r - 0.5 is False, then True
    assert [r.preferred for r in loaded.rows] == [1, 0, 1]
    assert [r.category for r in loaded.rows] == ["HC", "HI", "HM"]
    assert [r.captions for r in loaded.rows] == [("a tie here", "the other"), ("tie again", "other two"),
                                                 ("loses", "wins")]
    assert [r.group for r in loaded.rows] == ["p0.jpg", "p1.jpg", "p2.jpg"]
    assert loaded.rows[0].image == (tmp_path / "images" / "p0.jpg").resolve()
    assert len(loaded.problems) == 1 and "pair 3" in loaded.problems[0] and "gone.jpg" in loaded.problems[0]
    assert (loaded.kind, loaded.statistic, loaded.tau_variant) == ("pairwise", "accuracy", None)


def test_pascal50s_draws_five_of_the_48_references_five_times_from_the_seed(tmp_path):
    png(tmp_path / "images", "p0.jpg")
    png(tmp_path / "images", "p1.jpg")
    pascal_folder(tmp_path, [("p0.jpg", "a", "b", 1), ("p1.jpg", "c", "d", 4)], votes_for_a=[40, 3])
    first, again, other = (load("pascal-50s", tmp_path, seed=s).rows for s in (7, 7, 8))
    rng = random.Random(7)
    for p, row in enumerate(first):
        expected = [[f"ref {p}-{i}" for i in rng.sample(range(PASCAL_JUDGEMENTS), 5)] for _ in range(PASCAL_DRAWS)]
        assert row.reference_draws == expected
        assert all(len(set(draw)) == 5 for draw in row.reference_draws)
    assert [r.reference_draws for r in again] == [r.reference_draws for r in first]
    assert [r.reference_draws for r in other] != [r.reference_draws for r in first]
    assert [r.preferred for r in first] == [0, 1]


def test_pascal50s_without_the_mat_files_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no pair_pascal.mat in"):
        load("pascal-50s", tmp_path)
    (tmp_path / "pair_pascal.mat").write_text("not matlab")
    (tmp_path / "consensus_pascal.mat").write_text("not matlab")
    with pytest.raises(ValueError, match="not a MATLAB file"):
        load("pascal-50s", tmp_path)


# ---------------------------------------------------------------- FOIL

def test_foil_pairs_foil_words_and_references(tmp_path):
    image = png(tmp_path / "images", "COCO_val2014_000000000001.jpg")
    foil = {
        "images": [{"id": 1, "file_name": "COCO_val2014_000000000001.jpg"},
                   {"id": 2, "file_name": "COCO_val2014_000000000002.jpg"}],
        "annotations": [
            {"id": 10, "image_id": 1, "caption": "A dog on a  sofa.", "foil": False, "foil_word": "ORIG", "target_word": "ORIG"},
            {"id": 10, "image_id": 1, "caption": "A cat on a sofa.", "foil": True, "foil_word": "cat", "target_word": "dog", "foil_id": 100},
            {"id": 10, "image_id": 1, "caption": "A dog on a bed.", "foil": True, "foil_word": "bed", "target_word": "sofa", "foil_id": 101},
            {"id": 20, "image_id": 2, "caption": "A bus.", "foil": False, "foil_word": "ORIG"},
            {"id": 20, "image_id": 2, "caption": "A car.", "foil": True, "foil_word": "car", "foil_id": 200},
            {"id": 30, "image_id": 1, "caption": "A boat.", "foil": True, "foil_word": "boat", "foil_id": 300},
        ]}
    (tmp_path / "foilv1.0_test_2017.json").write_text(json.dumps(foil))
    coco = {"annotations": [{"image_id": 1, "caption": c} for c in ("A dog on a  sofa.", "a  dog", "a pet")]}
    (tmp_path / "captions_val2014.json").write_text(json.dumps(coco))
    loaded = load("foil", tmp_path)
    refs = [["a dog", "a pet"]]
    assert loaded.rows == [
        Pair(image, ("A dog on a sofa.", "A cat on a sofa."), 0, refs, "foil", "1", "cat", "dog"),
        Pair(image, ("A dog on a sofa.", "A dog on a bed."), 0, refs, "foil", "1", "bed", "sofa"),
    ]
    assert len(loaded.problems) == 2
    assert "foil id 200" in loaded.problems[0] and "COCO_val2014_000000000002.jpg" in loaded.problems[0]
    assert "caption id 30" in loaded.problems[1] and "0 clean captions" in loaded.problems[1]


def test_foil_without_coco_captions_has_no_references(tmp_path):
    png(tmp_path / "images", "i.jpg")
    foil = {"images": [{"id": 1, "file_name": "i.jpg"}], "annotations": [
        {"id": 1, "image_id": 1, "caption": "a dog", "foil": False},
        {"id": 1, "image_id": 1, "caption": "a cat", "foil": True, "foil_word": "cat", "foil_id": 5}]}
    (tmp_path / "foilv1.0_test_2017.json").write_text(json.dumps(foil))
    (row,) = load("foil", tmp_path).rows
    assert row.reference_draws == [[]] and row.foil_word == "cat" and row.target_word is None


# ---------------------------------------------------------------- THumB 1.0

def test_thumb_rows_aspects_systems_and_references(tmp_path):
    image = png(tmp_path / "images", "COCO_val2014_000000000974.jpg")
    lines = [
        {"SYS": "Up-Down", "seg_id": "974", "set_id": 5, "hyp": "A group of  people.",
         "image": "COCO_val2014_000000000974.jpg", "P": 4.0, "R": 3.0, "Fl": -0.0, "Inc": -0.0, "Con": -0.5,
         "human_score": 3.0},
        {"SYS": "Human", "seg_id": "974", "set_id": 5, "hyp": "Riders on an elephant.",
         "image": "COCO_val2014_000000000974.jpg", "P": 5.0, "R": 4.0, "Fl": 0, "Inc": 0, "Con": 0,
         "human_score": 4.5},
        {"SYS": "VinVL-base", "seg_id": "975", "set_id": 6, "hyp": "A cat.", "image": "COCO_val2014_000000000975.jpg",
         "human_score": 2.0},
        {"SYS": "VinVL-large", "seg_id": "974", "set_id": 5, "hyp": "", "image": "COCO_val2014_000000000974.jpg",
         "human_score": 2.0},
    ]
    (tmp_path / "mscoco_THumB-1.0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "mscoco_references.json").write_text(json.dumps({"seg_id": "974", "set_id": 5, "refs": ["r  one", "r two"]}) + "\n")
    loaded = load("thumb", tmp_path)
    assert loaded.rows == [
        Rated(image, "A group of people.", 3.0, ["r one", "r two"], "974", "Up-Down",
              {"P": 4.0, "R": 3.0, "Fl": -0.0, "Con": -0.5, "Inc": -0.0}),
        Rated(image, "Riders on an elephant.", 4.5, ["r one", "r two"], "974", "Human",
              {"P": 5.0, "R": 4.0, "Fl": 0.0, "Con": 0.0, "Inc": 0.0}),
    ]
    assert loaded.statistic == "pearson" and loaded.tau_variant is None
    assert ["row 3" in loaded.problems[0], "row 4" in loaded.problems[1]] == [True, True]
    assert "COCO_val2014_000000000975.jpg" in loaded.problems[0] and "caption" in loaded.problems[1]


# ---------------------------------------------------------------- HAT

def test_hat_words_map_onto_spacy_tokens(tmp_path):
    png(tmp_path / "images", "COCO_val2014_000000016903.jpg")
    samples = [
        {"sample_id": "s1", "caption": "A street sign with a detour pointing in different directions.",
         "grounding": [["A", False], ["street", False], ["sign", False], ["with", False], ["a", False],
                       ["detour", False], ["pointing", True], ["in", True], ["different", True], ["directions.", True]],
         "contains_hallucination": True, "image_path": "COCO_val2014_000000016903.jpg", "references": ["a  sign"]},
        {"sample_id": "s2", "caption": "A boy's bike.", "grounding": [["A", False], ["boy's", True], ["bike.", False]],
         "contains_hallucination": True, "image_path": "COCO_val2014_000000016903.jpg", "references": []},
        {"sample_id": "s3", "caption": "A cat.", "grounding": [["A", False], ["dog.", True]],
         "image_path": "COCO_val2014_000000016903.jpg"},
        {"sample_id": "s4", "caption": "A cat.", "grounding": [["A", False], ["cat.", True]],
         "image_path": "COCO_val2014_000000099999.jpg"},
    ]
    (tmp_path / "hat-trainval.json").write_text(json.dumps(samples))
    loaded = load("hat", tmp_path)
    assert (loaded.kind, loaded.statistic) == ("token", "token") and [r["id"] for r in loaded.rows] == ["s1", "s2"]
    first, second = loaded.rows
    expected = tokenize(first["caption"], load_spacy())
    assert [(t["text"], t["start"], t["end"], t["semantic"]) for t in first["tokens"]] == \
           [(t.text, t.start, t.end, t.semantic) for t in expected]
    labels = {t["text"]: t["label"] for t in first["tokens"]}
    assert [labels[w] for w in ("A", "street", "detour", "pointing", "in", "directions", ".")] == \
           ["correct", "correct", "correct", "incorrect", "incorrect", "incorrect", None]
    assert [(t["text"], t["label"]) for t in second["tokens"]] == \
           [("A", "correct"), ("boy", "incorrect"), ("'s", "incorrect"), ("bike", "correct"), (".", None)]
    assert first["regions"] == [] and first["references"] == ["a sign"] and first["contains_hallucination"]
    assert first["image"] == str((tmp_path / "images" / "COCO_val2014_000000016903.jpg").resolve())
    assert "s3" in loaded.problems[0] and "grounding words differ" in loaded.problems[0]
    assert "s4" in loaded.problems[1] and "not found" in loaded.problems[1]


# ---------------------------------------------------------------- CapTokenEval

def test_captokeneval_items_resolve_images_relative_to_the_file(tmp_path):
    png(tmp_path / "bench" / "images", "a.png")
    token = {"text": "dog", "start": 2, "end": 5, "semantic": True, "label": "incorrect"}
    items = [{"id": "1", "image": "images/a.png", "caption": "a dog", "tokens": [token], "regions": []},
             {"id": "2", "image": "images/missing.png", "caption": "a dog", "tokens": [token]},
             {"id": "3", "image": "images/a.png", "caption": "", "tokens": []}]
    path = tmp_path / "bench" / "mine.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    loaded = load("captokeneval", path)
    assert loaded.rows == [items[0]] and loaded.base_dir == path.parent
    assert "item 2" in loaded.problems[0] and "missing.png" in loaded.problems[0]
    assert "item 3" in loaded.problems[1] and "caption" in loaded.problems[1]
    assert isinstance(loaded, Loaded)
