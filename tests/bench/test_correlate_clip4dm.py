"""`capscope correlate`'s dense-misalignment section (CLIP4DM's protocols): the
two word readings by hand, LA and AP against hand values and sklearn, the
published rows, the nocaps-FOIL loader, and FOIL, nocaps-FOIL and HAT end to end
against the readings applied to `capscope score`'s own rows of the same captions."""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw
from sklearn.metrics import average_precision_score

from capscope.bench import correlation_report as R
from capscope.bench import dense as D
from capscope.bench import candidates as K
from capscope.bench import published
from capscope.bench.human import Loaded, load
from capscope.bench.human_rows import Pair
from capscope.cli import main
from human_support import write_foil_file


def words(*pairs):
    """A clip4dm `words` list from (text, score) pairs (spans as if joined by spaces)."""
    out, start = [], 0
    for text, score in pairs:
        out.append({"text": text, "start": start, "end": start + len(text), "score": score})
        start += len(text) + 1
    return out


# ---------------------------------------------------------------- the readings

def test_most_negative_reading_keeps_punctuation_and_takes_the_first_of_ties():
    assert D.most_negative(words(("A", 0.2), ("dog", -0.5), ("cat", -0.5), (".", 0.1))) == ("dog", -0.5)
    assert D.most_negative(words(("A", 0.2), ("dog", 0.1), (".", -0.3))) == (".", -0.3)
    assert D.most_negative([]) is None
    # a positive lowest score is still the prediction and the attribution F-CLIPScore takes
    assert D.read_words(words(("Dog", 0.4), ("runs", 0.3)), "most_negative", -5e-5, "runs") == (True, 0.3)
    assert D.is_foil_word(" Elephant ", "elephant") and not D.is_foil_word("elephants", "elephant")
    assert D.is_foil_word("3_coke", "coke")                       # main.py keeps what follows the last "_"
    assert not D.is_foil_word("ball", "golf ball")                # a two-word foil is never one word
    assert D.read_words(words(("a", -1.0)), "most_negative", 0.0, None) == (False, -1.0)   # an original


def test_threshold_reading_runs_of_adjacent_words_after_punctuation_is_dropped():
    caption = words(("A", -0.1), ("Red", -0.3), (",", -0.9), ("dog", -0.5), ("sits", 0.2), ("on", -0.2),
                    (':"', -2.0), ("!?", -0.05), ("", -3.0), ("mat", 0.4))
    # punctuation dropped by the substring test (",", ':"', "") before numbering; "!?" is no substring of it
    assert D.negative_runs(caption, 0.0) == [("a red dog", pytest.approx(-0.3)), ("on !?", pytest.approx(-0.125))]
    assert D.lowest_run(caption, 0.0) == ("a red dog", pytest.approx(-0.3))
    # "A" and "!?" above -0.15: "sits" splits the rest in two runs; the dropped "," splits none
    assert D.negative_runs(caption, -0.15) == [("red dog", pytest.approx(-0.4)), ("on", -0.2)]
    assert D.lowest_run(caption, -0.15) == ("red dog", pytest.approx(-0.4))
    ties = words(("one", -0.2), ("two", 0.5), ("three", -0.2))
    assert D.lowest_run(ties, 0.0) == ("one", -0.2)
    assert D.lowest_run(words(("fine", 0.1), ("words", -1e-5)), -5e-5) is None


def test_hat_answer_and_the_substring_rule():
    answer = D.hat_answer(["pointing", "in", "different", "directions."])
    assert answer == "pointing in different directions"
    assert D.hat_answer(["Boy's,", "."]) == "boy's" and D.hat_answer([]) == ""
    run = words(("different", -0.4), ("directions", -0.2), (".", -1.0))
    assert D.read_words(run, "threshold", 0.0, answer) == (True, pytest.approx(-0.3))
    assert D.read_words(words(("rect", -0.4)), "threshold", 0.0, answer) == (True, -0.4)  # "di-rect-ions": a substring
    assert D.read_words(words(("sign", -0.4)), "threshold", 0.0, answer) == (False, -0.4)
    assert D.read_words(words(("sign", 0.4)), "threshold", 0.0, answer) == (False, 0.0)    # none below epsilon
    assert D.read_words(run, "threshold", 0.0, "") == (False, pytest.approx(-0.3))         # a clean caption


# ---------------------------------------------------------------- LA, AP and the published rows

def test_dense_caption_f_clip_score_and_which_clip_s():
    scores = {"clip4dm.clip_s": 1.0, "clip4dm.f_clip_s": -9.0}
    caption = D.dense_caption("im", "", "dog", words(("a", 0.1), ("dog", -0.5)), scores, "most_negative", 0.0)
    assert caption.misaligned and caption.found
    assert caption.values == {"clip4dm.f_clip_s": pytest.approx(-0.5 * (1 - 1.0 / 2.5)), "clip4dm.clip_s": 1.0}
    both = D.dense_caption("im", "", None, words(("a", 0.1)), dict(scores, **{"clip-s.clip_s": 0.7}),
                           "most_negative", 0.0)
    assert not both.misaligned and set(both.values) == {"clip4dm.f_clip_s", "clip4dm.clip_s", "clip-s.clip_s"}
    only_clip_s = D.dense_caption("im", "", "", None, {"clip-s.clip_s": 0.7}, "threshold", 0.0)
    assert only_clip_s.values == {"clip-s.clip_s": 0.7} and not only_clip_s.found and not only_clip_s.misaligned
    # AP of CLIP-S: clip-s's where it was scored, clip4dm's own otherwise
    assert D.dense_keys([caption, both]) == ["clip4dm.f_clip_s", "clip-s.clip_s"]
    assert D.dense_keys([caption]) == ["clip4dm.f_clip_s", "clip4dm.clip_s"]
    assert D.dense_keys([only_clip_s]) == ["clip-s.clip_s"]


def made_up_captions():
    """Six captions on three images: (image, misaligned, found, F-CLIPScore, CLIP-S)."""
    rows = [("a", True, True, -0.9, 0.50), ("a", False, False, -0.1, 0.70), ("b", True, False, -0.3, 0.65),
            ("b", False, False, -0.2, 0.60), ("c", True, True, -0.05, 0.40), ("c", False, False, -0.4, 0.80)]
    return [D.DenseCaption(g, "", m, f, {"clip4dm.f_clip_s": v, "clip-s.clip_s": s}) for g, m, f, v, s in rows]


def test_la_and_ap_by_hand_and_against_sklearn():
    captions = made_up_captions()
    foil = D.dense_figures(captions, "clip4dm.f_clip_s", True, 200, 3)
    assert foil["LA"] == pytest.approx(2 / 3) and foil["n"] == 6 and foil["n_misaligned"] == 3
    # originals positive, ranked by F-CLIPScore: -0.05(f) -0.1(o) -0.2(o) -0.3(f) -0.4(o) -0.9(f)
    # -> AP = (1/2 + 2/3 + 3/5) / 3
    assert foil["AP"] == pytest.approx((1 / 2 + 2 / 3 + 3 / 5) / 3)
    orig = np.array([not c.misaligned for c in captions])
    values = np.array([c.values["clip-s.clip_s"] for c in captions])
    clip = D.dense_figures(captions, "clip-s.clip_s", True, 200, 3)
    assert clip["AP"] == pytest.approx(average_precision_score(orig, values)) and clip["LA"] is None
    hat = D.dense_figures(captions, "clip-s.clip_s", False, 200, 3)     # HAT: misaligned positive, -score
    assert hat["AP"] == pytest.approx(average_precision_score(~orig, -values))
    for figures in (foil, clip, hat):
        lo, hi = figures["AP_ci95"]
        assert lo <= hi
    lo, hi = foil["LA_ci95"]
    assert 0 <= lo <= foil["LA"] <= hi <= 1
    assert D.dense_figures(captions, "clip4dm.f_clip_s", True, 200, 3) == foil      # seeded
    # the draws resample images: a lone image gives no interval
    assert D.dense_figures(captions[:2], "clip4dm.f_clip_s", True, 50, 0)["AP_ci95"] is None


def test_published_rows_verdict_only_for_the_scored_backbone():
    figures = {"LA": 0.75, "LA_ci95": [0.70, 0.80], "AP": 0.60, "AP_ci95": [0.55, 0.65]}
    rows = {r["row"]: r for r in D.dense_published("foil", "clip4dm.f_clip_s", figures, "ViT-B-32/openai")}
    assert set(rows) == {"Ours (ViT-B/32)", "Ours (ViT-H/14)"}
    b32, h14 = rows["Ours (ViT-B/32)"], rows["Ours (ViT-H/14)"]
    assert (b32["LA"], b32["AP"], b32["same_backbone"]) == (0.73, 0.71, True)
    assert b32["reproduced"] == {"LA": True, "AP": False} and b32["difference"]["AP"] == pytest.approx(0.60 - 0.71)
    assert not h14["same_backbone"] and h14["difference"] == {} and h14["reproduced"] == {}
    # CLIP-S from clip4dm's own pass is set beside the paper's CLIPScore; HAT's names no backbone
    (hat,) = D.dense_published("hat", "clip4dm.clip_s", figures, "ViT-B-32/openai")
    assert (hat["row"], hat["AP"], hat["backbone"], hat["same_backbone"]) == ("CLIPScore", 0.39, "", False)
    nocaps = published.lookup("nocaps-foil", "LA", "clip4dm.f_clip_s")
    assert sorted((p.backbone, p.value) for p in nocaps) == [("ViT-B/32", 0.60), ("ViT-H/14", 0.72)]
    assert "AAAI 2025" in nocaps[0].source.cite() and "poster" in nocaps[0].source.table


def test_foil_counts_a_shared_clean_caption_once_nocaps_every_entry(tmp_path):
    image = tmp_path / "a.png"
    scored = {K.Candidate(image, caption, ()): K.Scored({"clip4dm.clip_s": 0.0},
                                                        words={"clip4dm": words((caption, -1.0))})
              for caption in ("clean", "foil1", "foil2")}
    rows = [Pair(image, ("clean", "foil1"), 0, [[]], "near-domain", "a", "foil1"),
            Pair(image, ("clean", "foil2"), 0, [[]], "near-domain", "a", "x")]
    loaded = lambda name: Loaded(name, "pairwise", "", rows, [], tmp_path, None, "accuracy")
    foil = D.pair_dense_captions(loaded("foil"), scored, "most_negative", 0.0)
    assert [(c.misaligned, c.found, c.domain) for c in foil] == [(True, True, ""), (False, False, ""),
                                                                 (True, False, "")]
    nocaps = D.pair_dense_captions(loaded("nocaps-foil"), scored, "most_negative", 0.0)
    assert [c.misaligned for c in nocaps] == [True, False, True, False] and nocaps[0].domain == "near-domain"


# ---------------------------------------------------------------- files in the public layouts

COLOURS = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}


def shapes(folder: Path) -> list[str]:
    """Four images of a coloured shape on white."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, (colour, rgb) in enumerate(COLOURS.items()):
        image = Image.new("RGB", (96, 96), "white")
        draw = ImageDraw.Draw(image)
        (draw.ellipse if i % 2 else draw.rectangle)((20, 20, 76, 76), fill=rgb)
        names.append(f"{i:04d}{colour}.jpg")
        image.save(folder / names[-1])
    return names


def write_nocaps_foil(root: Path) -> Path:
    """ALOHa's nocaps-val-foil.json layout, one entry per image, the three domains."""
    names = shapes(root / "images")
    domains = ["in-domain", "near-domain", "out-domain", "near-domain"]
    entries = []
    for i, (name, colour, domain) in enumerate(zip(names, COLOURS, domains)):
        shape = "circle" if i % 2 else "square"
        entries.append({"image_path": name, "references": [f"a {colour} {shape}.", f"a {shape} on white. "],
                        "baseline": f"A {colour} {shape} on a white page. ",
                        "foil": f"A {colour} dog on a white page. ",
                        "replacement": [shape, "dog"], "domain": domain})
    path = root / "nocaps-val-foil.json"
    path.write_text(json.dumps(entries))
    return path


def write_hat(root: Path) -> Path:
    """ALOHa's hat-trainval.json layout: two captions with hallucinated words, two without."""
    names = shapes(root / "images")
    captions = [("A red square next to a cat.", {"cat."}), ("A green circle.", set()),
                ("A blue square, two dogs and a bird.", {"two", "dogs", "bird."}), ("A yellow circle on white.", set())]
    samples = [{"sample_id": f"s{i}", "caption": caption, "image_path": name, "references": ["a shape"],
                "grounding": [[w, w in wrong] for w in caption.split()], "contains_hallucination": bool(wrong)}
               for i, (name, (caption, wrong)) in enumerate(zip(names, captions))]
    path = root / "hat-trainval.json"
    path.write_text(json.dumps(samples))
    return path


def test_nocaps_foil_loader_rows_and_problems(tmp_path):
    write_nocaps_foil(tmp_path)
    entries = json.loads((tmp_path / "nocaps-val-foil.json").read_text())
    entries += [dict(entries[0], image_path="gone.jpg"), dict(entries[0], replacement=["dog", "dog"]),
                dict(entries[0], foil="  "), "not an entry"]
    (tmp_path / "nocaps-val-foil.json").write_text(json.dumps(entries))
    loaded = load("nocaps-foil", tmp_path)
    first = loaded.rows[0]
    assert first == Pair((tmp_path / "images" / "0000red.jpg").resolve(),
                         ("A red square on a white page.", "A red dog on a white page."), 0,
                         [["a red square.", "a square on white."]], "in-domain", "0000red.jpg", "dog", "square")
    assert [r.category for r in loaded.rows] == ["in-domain", "near-domain", "out-domain", "near-domain"]
    assert (loaded.kind, loaded.benchmark) == ("pairwise", "nocaps-foil") and "NoCapsDataset" in loaded.protocol
    assert [p.split(": ", 2)[1] for p in loaded.problems] == ["entry 4", "entry 5", "entry 6", "entry 7"]
    assert "gone.jpg" in loaded.problems[0] and "same word twice" in loaded.problems[1]
    assert "caption missing" in loaded.problems[2] and "not an object" in loaded.problems[3]
    assert load("nocaps-foil", tmp_path / "nocaps-val-foil.json").rows == loaded.rows


# ---------------------------------------------------------------- end to end against capscope score's rows

def released_captions(benchmark: str, folder: Path) -> list[dict]:
    """The captions CLIP4DM's datasets build from each file: image, caption, the
    answer (foil word, HAT's flagged words, None for an original), domain."""
    if benchmark == "foil":
        data = json.loads((folder / "foilv1.0_test_2017.json").read_text())
        files = {image["id"]: f"images/{image['file_name']}" for image in data["images"]}
        return [{"image": files[a["image_id"]], "caption": a["caption"], "answer": a.get("foil_word") if a["foil"]
                 else None, "domain": ""} for a in data["annotations"]]
    if benchmark == "nocaps-foil":
        return [{"image": f"images/{e['image_path']}", "caption": " ".join(e[which].split()), "domain": e["domain"],
                 "answer": e["replacement"][1] if which == "foil" else None}
                for e in json.loads((folder / "nocaps-val-foil.json").read_text()) for which in ("foil", "baseline")]
    return [{"image": f"images/{s['image_path']}", "caption": s["caption"], "domain": "",
             "answer": D.hat_answer([w for w, flag in s["grounding"] if flag])}
            for s in json.loads((folder / "hat-trainval.json").read_text())]


def figures_from_rows(captions: list[dict], rows: list[dict], reading: str, epsilon: float) -> dict:
    """LA and AP as main.py computes them, from the rows `capscope score` wrote for the captions."""
    found, f_clip, clip_s, misaligned = [], [], [], []
    for caption, row in zip(captions, rows, strict=True):
        out = row["metrics"]["clip4dm"]
        hit = (D.most_negative if reading == "most_negative" else lambda w: D.lowest_run(w, epsilon))(out["words"])
        answer = caption["answer"]
        found.append(bool(hit and answer and (D.is_foil_word(hit[0], answer) if reading == "most_negative"
                                              else hit[0] in answer)))
        f_clip.append((hit[1] if hit else 0.0) * (1 - out["scores"]["clip_s"] / 2.5))
        clip_s.append(row["metrics"]["clip-s"]["scores"]["clip_s"])
        misaligned.append(bool(answer))
    misaligned, f_clip, clip_s = np.array(misaligned), np.array(f_clip), np.array(clip_s)
    if reading == "most_negative":
        ap = lambda values: average_precision_score(~misaligned, values)
    else:
        ap = lambda values: average_precision_score(misaligned, -values)
    return {"LA": sum(found) / misaligned.sum(), "AP": ap(f_clip), "AP_clip_s": ap(clip_s),
            "n": len(captions), "n_misaligned": int(misaligned.sum())}


@pytest.fixture(scope="module")
def benchmarks(tmp_path_factory, clip_checkpoint):
    """The three folders and `capscope score`'s rows of every caption they hold, scored once."""
    root = tmp_path_factory.mktemp("dense")
    write_foil_file(root / "foil")
    write_nocaps_foil(root / "nocaps-foil")
    write_hat(root / "hat")
    lines, where = [], {}
    for benchmark in ("foil", "nocaps-foil", "hat"):
        captions = released_captions(benchmark, root / benchmark)
        where[benchmark] = (len(lines), captions)
        lines += [{"id": str(len(lines) + i), "image": f"{benchmark}/{c['image']}", "caption": c["caption"]}
                  for i, c in enumerate(captions)]
    (root / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["score", "--input", str(root / "in.jsonl"), "--output", str(root / "out.jsonl"), "--metric",
                 "clip4dm", "clip-s", "--device", "cpu", "--clip-model", "ViT-B-32",
                 "--clip-pretrained", str(clip_checkpoint)]) == 0
    rows = [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()]
    assert all(row["error"] is None for row in rows)
    return root, {name: (captions, rows[start:start + len(captions)]) for name, (start, captions) in where.items()}


def correlate_json(capsys, benchmark: str, folder: Path, checkpoint, *more) -> dict:
    assert main(["correlate", "--benchmark", benchmark, "--data", str(folder), "--metric", "clip4dm", "clip-s",
                 "--json", "--bootstrap", "20", "--device", "cpu", "--clip-model", "ViT-B-32",
                 "--clip-pretrained", str(checkpoint), *more]) == 0
    return json.loads(capsys.readouterr().out)


def assert_dense_equals(dense: dict, expected: dict) -> None:
    f_clip, clip = dense["metrics"]["clip4dm.f_clip_s"], dense["metrics"]["clip-s.clip_s"]
    assert (f_clip["n"], f_clip["n_misaligned"]) == (expected["n"], expected["n_misaligned"])
    assert f_clip["LA"] == pytest.approx(expected["LA"], abs=1e-12)
    assert f_clip["AP"] == pytest.approx(expected["AP"], abs=1e-9)
    assert clip["AP"] == pytest.approx(expected["AP_clip_s"], abs=1e-9) and clip["LA"] is None
    for figures in (f_clip, clip):
        assert figures["AP_ci95"] is not None and figures["AP_ci95"][0] <= figures["AP_ci95"][1]
    assert f_clip["LA_ci95"] is not None and 0 <= f_clip["LA_ci95"][0] <= f_clip["LA_ci95"][1] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["foil", "nocaps-foil", "hat"])
def test_dense_section_end_to_end_equals_the_readings_of_score_rows(name, benchmarks, clip_checkpoint, capsys):
    root, scored = benchmarks
    captions, rows = scored[name]
    # HAT is run at another epsilon than score's rows: the section must read at the one it was scored with
    epsilon = 0.0 if name == "hat" else -5e-5
    result = correlate_json(capsys, name, root / name, clip_checkpoint, f"--clip4dm-epsilon={epsilon}")
    dense = result["dense"]
    reading = "threshold" if name == "hat" else "most_negative"
    assert (dense["reading"], dense["epsilon"], dense["clip"]) == (reading, epsilon, f"ViT-B-32/{clip_checkpoint.name}")
    assert "main.py" in dense["protocol"]
    assert_dense_equals(dense, figures_from_rows(captions, rows, reading, epsilon))
    # random weights are not the paper's CLIP: its rows stand beside, no verdict
    published_rows = dense["metrics"]["clip4dm.f_clip_s"]["published"]
    assert {r["row"] for r in published_rows} == {"Ours (ViT-B/32)", "Ours (ViT-H/14)"}
    assert not any(r["same_backbone"] or r["difference"] for r in published_rows)
    assert any("Extract Free Dense Misalignment" in s for s in result["sources"])
    if name == "nocaps-foil":
        assert set(dense["domains"]) == {"in-domain", "near-domain", "out-domain"}
        for domain, figures in dense["domains"].items():
            chosen = [i for i, c in enumerate(captions) if c["domain"] == domain]
            expected = figures_from_rows([captions[i] for i in chosen], [rows[i] for i in chosen], reading, epsilon)
            assert figures["clip4dm.f_clip_s"]["LA"] == pytest.approx(expected["LA"], abs=1e-12)
            assert figures["clip4dm.f_clip_s"]["AP"] == pytest.approx(expected["AP"], abs=1e-9)
            assert figures["clip-s.clip_s"]["AP"] == pytest.approx(expected["AP_clip_s"], abs=1e-9)
        assert dense["domains"]["near-domain"]["clip4dm.f_clip_s"]["AP_ci95"] is not None   # two images
        assert dense["domains"]["in-domain"]["clip4dm.f_clip_s"]["AP_ci95"] is None         # one image
    text = R.format_result(result)
    assert "dense misalignment (CLIP4DM)" in text and "Ours (ViT-H/14) [" in text and "clip4dm.f_clip_s" in text
