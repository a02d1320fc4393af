"""`capscope correlate`: statistics against hand-computed values and scipy,
the bootstrap interval, per-row problems, the published table, and the whole
command on a Flickr8k-layout folder against PAC-S's procedure applied to
`capscope score`'s own scores."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from capscope.bench import human_correlation as C
from capscope.bench import published_comparison as P
from capscope.bench import rating_correlation as RC
from capscope.bench import token_agreement as T
from capscope.bench import correlation_report as R
from capscope.bench import published
from capscope.bench.human import Loaded
from capscope.bench.human_rows import Pair, Rated
from capscope.cli import main
from capscope.common.stats import bootstrap_interval
from human_support import write_foil_file


# ---------------------------------------------------------------- a scorer that counts words

class WordScorer:
    """Stands in for Scorer: score = number of words, ref = words shared with the
    references; 'boom' fails. Records every row it is asked to score."""

    def __init__(self):
        self.rows = []

    def score_batch(self, rows, base_dir=None):
        self.rows += rows
        return [self._one(row) for row in rows]

    def _one(self, row):
        if row["caption"] == "boom":
            return {"metrics": {}, "tokens": [], "error": "bad caption"}
        words = row["caption"].split()
        shared = len(set(words) & {w for r in row["references"] or [] for w in r.split()})
        tokens = [{"text": w, "semantic": w not in ("a", "the")} for w in words]
        scores = {"words": float(len(words))}
        if row["references"]:
            scores["shared"] = float(shared)
        return {"tokens": tokens, "error": None,
                "metrics": {"count": {"scores": scores, "token_scores": [float(len(w)) for w in words]}}}


@pytest.fixture()
def pictures(tmp_path):
    from PIL import Image

    paths = []
    for i in range(6):
        path = tmp_path / f"im{i}.png"
        Image.new("RGB", (16, 16), (40 * i, 100, 200)).save(path)
        paths.append(path)
    return paths


def rating_benchmark(rows, variant="c", name="flickr8k-expert"):
    return Loaded(name, "rating", "test rows", rows, [], Path("."), variant, "kendall")


# ---------------------------------------------------------------- statistics

def test_kendall_by_hand_and_against_scipy():
    # P = 3 concordant, no discordant, 1 pair tied in x only, 2 in y only:
    # tau_b = 3 / sqrt(4 * 5); tau_c = 2 * 3 / (4^2 * (2 - 1) / 2) = 0.75 (m = 2 distinct y)
    x, y = [1, 2, 2, 3], [1, 1, 2, 2]
    assert RC.kendall(x, y, "b") == pytest.approx(3 / math.sqrt(20), abs=1e-12)
    assert RC.kendall(x, y, "c") == pytest.approx(0.75, abs=1e-12)
    rng = np.random.default_rng(3)
    scores, human = rng.normal(size=200), rng.integers(1, 5, 200).astype(float)
    figures = RC.rating_figures(scores, human, [str(i // 4) for i in range(200)], "tau_c", 50, 0)
    for variant in "bc":
        expected = scipy.stats.kendalltau(scores, human, variant=variant).statistic
        assert abs(figures[f"tau_{variant}"] - expected) < 1e-9
    assert abs(figures["pearson"] - scipy.stats.pearsonr(scores, human).statistic) < 1e-9


def test_bootstrap_resamples_groups_is_seeded_and_contains_the_estimate():
    rng = np.random.default_rng(0)
    human = rng.integers(1, 5, 300).astype(float)
    scores = human + rng.normal(0, 1.0, 300)
    groups = [f"img{i // 3}" for i in range(300)]
    figures = RC.rating_figures(scores, human, groups, "tau_c", 300, seed=7)
    lo, hi = figures["ci95"]
    assert lo < figures["tau_c"] < hi and 0 < hi - lo < 0.3
    assert RC.rating_figures(scores, human, groups, "tau_c", 300, seed=7)["ci95"] == [lo, hi]
    assert RC.rating_figures(scores, human, groups, "tau_c", 300, seed=8)["ci95"] != [lo, hi]
    # whole groups are drawn: two groups of constant value 0 and 1 give means 0, 1/2 or 1 only
    means = []
    bootstrap_interval(lambda idx: means.append(np.mean(np.array([0, 0, 1, 1])[idx])) or 0.0, ["a", "a", "b", "b"], 200)
    assert set(means) <= {0.0, 0.5, 1.0} and len(set(means)) == 3
    # a draw's rows are its picked groups' members, group after group, in the order drawn
    groups, seen = ["b", "a", "b", "c", "a", "b"], []
    bootstrap_interval(lambda idx: seen.append(list(idx)) or 0.0, groups, 3, seed=4)
    members = {"a": [1, 4], "b": [0, 2, 5], "c": [3]}
    picked = np.random.default_rng(4).integers(0, 3, (3, 3))
    assert seen == [[i for g in draw for i in members["abc"[g]]] for draw in picked]


def test_rating_rows_scored_once_per_caption_failures_reported(pictures):
    gone = pictures[0].parent / "gone.png"
    rows = [Rated(pictures[0], "a red dog", 3.0, ["a red dog runs"], "k0"),
            Rated(pictures[0], "a red dog", 4.0, ["a red dog runs"], "k0"),    # a second rater, same caption
            Rated(pictures[0], "a cat", 1.0, ["a red dog runs"], "k0"),
            Rated(pictures[1], "two birds in the sky", 2.0, ["birds"], "k1"),
            Rated(pictures[1], "boom", 2.0, ["birds"], "k1"),
            Rated(gone, "a dog", 2.0, [], "k2")]
    scorer = WordScorer()
    outcome = C.correlate(rating_benchmark(rows), scorer, ["count"], bootstrap=20, token_rule="paper", beta=0.1, progress=False)
    assert sorted(r["caption"] for r in scorer.rows) == ["a cat", "a red dog", "boom", "two birds in the sky"]
    result = outcome.result
    assert result["n"] == 4 and result["n_problems"] == 2
    assert outcome.problems == ["row 5 (k1): bad caption", f"row 6 (k2): image not found: {gone}"]
    words = result["metrics"]["count.words"]
    expected = scipy.stats.kendalltau([3, 3, 2, 5], [3, 4, 1, 2], variant="c").statistic
    assert words["n"] == 4 and abs(words["tau_c"] - expected) < 1e-9 and words["statistic"] == "tau_c"
    assert words["published"] is None and words["reproduced"] is None
    baseline = result["metrics"]["baseline.words"]  # caption length in words, beside every metric
    assert baseline["baseline"] and baseline["n"] == 4 and abs(baseline["tau_c"] - expected) < 1e-9


# ---------------------------------------------------------------- pairwise

def test_pairwise_accuracy_ties_draws_and_categories_by_hand(pictures):
    im = pictures
    rows = [
        # HC: preferred longer in both draws -> 1; shorter preferred -> 0
        Pair(im[0], ("a b c", "a b"), 0, [["x"], ["y"]], "HC", "g0"),
        Pair(im[1], ("a b c", "a b"), 1, [["x"], ["y"]], "HC", "g1"),
        # HI: a tie on words is a miss (PAC-S: "a higher score"); on shared refs it wins one draw of two
        Pair(im[2], ("a b", "c d"), 0, [["a"], ["c"]], "HI", "g2"),
        Pair(im[3], ("p q r s", "p"), 0, [["z"], ["z"]], "HI", "g3"),
    ]
    loaded = Loaded("pascal-50s", "pairwise", "test", rows, [], Path("."), None, "accuracy")
    result = C.correlate(loaded, WordScorer(), ["count"], bootstrap=30, token_rule="paper", beta=0.1, progress=False).result
    words, shared = result["metrics"]["count.words"], result["metrics"]["count.shared"]
    assert words["categories"]["HC"]["accuracy"] == 0.5 and words["categories"]["HI"]["accuracy"] == 0.5
    assert words["accuracy"] == 0.5
    # shared: pairs 0, 1 and 3 tie everywhere (0 shared words) -> 0; pair 2 wins draw "a", loses "c" -> 0.5
    assert shared["categories"]["HI"]["accuracy"] == 0.25 and shared["accuracy"] == pytest.approx(0.125)
    assert result["n"] == 4


def test_foil_word_and_published_setting(pictures):
    rows = [Pair(pictures[0], ("a dog near grass", "a cat near grass"), 0, [["r1", "r2", "r3", "r4"]], "foil", "g0",
                 foil_word="cat"),
            Pair(pictures[1], ("a big bus here", "a big elephant here"), 0, [["r1", "r2", "r3", "r4"]], "foil", "g1",
                 foil_word="elephant")]
    loaded = Loaded("foil", "pairwise", "test", rows, [], Path("."), None, "accuracy")
    result = C.correlate(loaded, WordScorer(), ["count"], bootstrap=10, token_rule="paper", beta=0.1, progress=False).result
    # word scores are word lengths: the lowest semantic word is 'cat' (3 letters) and 'big' (not 'elephant')
    assert result["foil_word"]["count"] == {"n": 2, "lowest_word_is_foil": 0.5}
    assert result["metrics"]["count.words"]["setting"] == "4 refs"
    entry = published.lookup("foil", "accuracy", "clip-s.ref_clip_s", "4 refs")[0]
    assert entry.value == pytest.approx(0.926) and entry.source.table == "Table 6"


# ---------------------------------------------------------------- published numbers and the table

def test_published_values_as_the_papers_print_them():
    first = lambda *args: published.lookup(*args)[0]
    assert first("flickr8k-expert", "tau_c", "infometic.overall").value == pytest.approx(0.542)
    assert first("flickr8k-cf", "tau_b", "clip-s.clip_s").value == pytest.approx(0.344)
    assert first("composite", "tau_c", "infometic.overall_plus").value == pytest.approx(0.593)
    assert first("pascal-50s", "accuracy", "clip-s.ref_clip_s").value == pytest.approx(0.836)
    assert first("pascal-50s", "accuracy", "pac-s.pac_s").value == pytest.approx(0.824)
    assert first("flickr8k-expert", "tau_b", "hice.hice").value == pytest.approx(0.559)
    assert first("thumb", "pearson", "infometic.overall").value == pytest.approx(0.38)
    # InfoMetIC's own table comes first for CLIP-S; PAC-S's 51.2 is listed after it
    both = published.lookup("flickr8k-expert", "tau_c", "clip-s.clip_s")
    assert [p.value for p in both] == [pytest.approx(0.515), pytest.approx(0.512)]


def test_table_prints_published_values_and_their_sources():
    figures = {"n": 100, "tau_b": 0.50, "tau_c": 0.516, "pearson": 0.6, "statistic": "tau_c", "ci95": [0.49, 0.54]}
    figures = P.with_published(figures, "flickr8k-expert", "tau_c", "clip-s.clip_s")
    far = P.with_published({"n": 100, "tau_b": 0.3, "tau_c": 0.31, "pearson": 0.4, "statistic": "tau_c",
                            "ci95": [0.29, 0.33]}, "flickr8k-expert", "tau_c", "infometic.overall")
    result = C.finish({"benchmark": "flickr8k-expert", "kind": "rating", "n": 100, "protocol": "p",
                       "statistic": "tau_c", "bootstrap": {"draws": 1000, "seed": 0},
                       "metrics": {"clip-s.clip_s": figures, "infometic.overall": far}}, [])
    assert figures["reproduced"] is True and far["reproduced"] is False
    assert far["difference"] == pytest.approx(0.31 - 0.542)
    text = R.format_result(result)
    assert "reproduced" in text and "-23.2" in text and "51.5 [1]" in text and "tau_c*" in text
    assert "[1] Hu et al., InfoMetIC" in text and "Table 1" in text and "[2] Sarto et al." in text


# ---------------------------------------------------------------- the command, with the demo model

def flickr_folder(root: Path, n_images: int = 4, missing: bool = False) -> Path:
    """A Flickr8k-Expert folder in the released layout: three raters per caption,
    a NaN rating, odd whitespace, an image judged under two keys; optionally a
    missing image and a judgement without caption."""
    from capscope.demo.dataset import demo_scene

    (root / "images").mkdir(parents=True)
    data = {}
    for i in range(n_images):
        scene, clean, polluted, _ = demo_scene(5, i)
        scene.image().save(root / "images" / f"{i}.png")
        captions = [(clean.text, (4, 4, 3)), (polluted.text, (2, 1, float("nan"))),
                    ("  " + clean.text.replace(" ", "  \t") + " ", (3, 4, 4))]
        data[f"{i}_key"] = {
            "image_path": f"Flicker8k_Dataset/{i}.png",
            "ground_truth": [clean.text + " ", "a  shape"],
            "human_judgement": [{"caption": c, "rating": r} for c, ratings in captions for r in ratings],
        }
    data["0_again"] = {"image_path": "Flicker8k_Dataset/0.png", "ground_truth": ["a shape"],
                       "human_judgement": [{"caption": "a small blue star.", "rating": 1.0}]}
    if missing:
        data["gone"] = {"image_path": "Flicker8k_Dataset/gone.png", "ground_truth": [],
                        "human_judgement": [{"caption": "a red circle.", "rating": 2}]}
        data["1_key"]["human_judgement"].append({"caption": "   ", "rating": 3})
    (root / "flickr8k.json").write_text(json.dumps(data))
    return root


def pacs_procedure(folder: Path, scored: list[dict]) -> dict:
    """PAC-S compute_correlations.py's lists, built the way its Flickr8k dataset
    builds them, with capscope score's scores in place of its model: tau x100 / 100."""
    data = json.loads((folder / "flickr8k.json").read_text())
    human = []
    for entry in data.values():
        for judgement in entry["human_judgement"]:
            if np.isnan(judgement["rating"]):
                continue
            human.append(judgement["rating"])
    out = {}
    for key in [k for k in ("clip-s.clip_s", "clip-s.ref_clip_s", "infometic.precision", "infometic.recall",
                            "infometic.overall", "infometic.overall_plus")]:
        metric, name = key.split(".")
        values = [row["metrics"][metric]["scores"][name] for row in scored]
        out[key] = {v: scipy.stats.kendalltau(values, human, variant=v).statistic for v in "bc"}
    return out


def pairs_file(folder: Path) -> Path:
    """The same judgements as `capscope score` input, one row per judgement, in file order."""
    data = json.loads((folder / "flickr8k.json").read_text())
    lines = []
    for entry in data.values():
        refs = [" ".join(r.split()) for r in entry["ground_truth"]]
        for judgement in entry["human_judgement"]:
            if np.isnan(judgement["rating"]):
                continue
            lines.append(json.dumps({"id": str(len(lines)), "image": "images/" + entry["image_path"].split("/")[-1],
                                     "caption": " ".join(judgement["caption"].split()), "references": refs}))
    path = folder / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_correlate_equals_pacs_procedure_on_capscope_scores(tmp_path, capsys):
    folder = flickr_folder(tmp_path / "flickr")
    code = main(["correlate", "--benchmark", "flickr8k-expert", "--data", str(folder), "--metric", "clip-s",
                 "infometic", "--json", "--device", "cpu", "--bootstrap", "200", "--demo"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "flickr8k-expert" and result["statistic"] == "tau_c"
    assert result["n"] == 4 * 9 - 4 + 1 and "compute_correlations" in result["protocol"]

    out = tmp_path / "scored.jsonl"
    assert main(["score", "--input", str(pairs_file(folder)), "--output", str(out), "--metric", "clip-s",
                 "infometic", "--device", "cpu", "--demo"]) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(row["error"] is None for row in scored)
    expected = pacs_procedure(folder, scored)
    assert set(expected) <= set(result["metrics"])
    for key, taus in expected.items():
        figures = result["metrics"][key]
        assert figures["n"] == result["n"]
        assert abs(figures["tau_b"] - taus["b"]) < 1e-9 and abs(figures["tau_c"] - taus["c"]) < 1e-9, key
        lo, hi = figures["ci95"]
        assert lo <= figures["tau_c"] <= hi
    assert result["metrics"]["infometic.overall"]["published"] == pytest.approx(0.542)
    assert result["metrics"]["clip-s.clip_s"]["published_source"].endswith("Table 1")


def test_missing_image_and_caption_reported_run_goes_on_table_and_plot(tmp_path, capsys):
    folder = flickr_folder(tmp_path / "flickr", n_images=3, missing=True)
    png = tmp_path / "fig.png"
    code = main(["correlate", "--benchmark", "flickr8k-expert", "--data", str(folder), "--metric", "clip-s",
                 "--device", "cpu", "--bootstrap", "50", "--plot", str(png), "--demo"])
    captured = capsys.readouterr()
    assert code == 0
    assert "2 rows skipped" in captured.err and "gone" in captured.err and "caption missing" in captured.err
    assert "flickr8k-expert: 25 judgements" in captured.out
    assert "clip-s.clip_s" in captured.out and "clip-s.ref_clip_s" in captured.out
    assert "[1] Hu et al., InfoMetIC" in captured.out and "Table 1" in captured.out
    assert png.stat().st_size > 10_000
    from PIL import Image

    with Image.open(png) as image:
        assert image.width > 600


def test_without_data_one_line_naming_what_to_download(capsys):
    assert main(["correlate", "--benchmark", "flickr8k-expert", "--metric", "clip-s"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "flickr8k.json" in err and "images/" in err


def test_token_benchmark_reports_evaluate_figures_ap_and_pos(tmp_path, capsys):
    from capscope.demo.dataset import write_demo_data

    write_demo_data(tmp_path / "demo", 3, seed=4, progress=False)
    code = main(["correlate", "--benchmark", "captokeneval", "--data", str(tmp_path / "demo" / "captokeneval.jsonl"),
                 "--metric", "infometic", "--json", "--device", "cpu", "--demo"])
    assert code == 0
    figures = json.loads(capsys.readouterr().out)["metrics"]["infometic"]
    assert figures["n_items"] == 6 and figures["text_accuracy"] is not None
    assert figures["average_precision"] is None or 0 <= figures["average_precision"] <= 1
    assert figures["pos"] is not None or "blank pipeline" in figures["pos_note"]


def test_foil_file_end_to_end_with_the_demo_model(tmp_path, capsys):
    """FOIL-COCO layout (clean and foil caption of one caption id, foil word named)
    through the real loader, the demo model and the printed table."""
    write_foil_file(tmp_path)
    code = main(["correlate", "--benchmark", "foil", "--data", str(tmp_path), "--metric", "clip-s", "infometic",
                 "--device", "cpu", "--bootstrap", "50", "--json", "--demo"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 4 and result["statistic"] == "accuracy"
    clip = result["metrics"]["clip-s.clip_s"]
    assert clip["accuracy"] in (0, 0.25, 0.5, 0.75, 1) and clip["published"] == pytest.approx(0.872)
    assert clip["setting"] == "1 ref" and clip["published_source"].endswith("Table 6")
    assert result["foil_word"]["infometic"]["n"] == 4


class TaggingNlp:
    """A spaCy stand-in with a tagger: every word's POS from a table."""

    def __init__(self, tags):
        self.tags = tags

    def has_pipe(self, name):
        return name == "tagger"

    def __call__(self, text):
        from types import SimpleNamespace

        spans, start = [], 0
        for word in text.split():
            start = text.index(word, start)
            spans.append(SimpleNamespace(idx=start, pos_=self.tags[word]))
            start += len(word)
        return spans


def test_average_precision_and_pos_breakdown_by_hand():
    def token(text, start, label):
        return {"text": text, "start": start, "end": start + len(text), "semantic": True, "label": label}

    items = [{"id": "a", "image": "a.png", "caption": "red dog runs",
              "tokens": [token("red", 0, "incorrect"), token("dog", 4, "correct"), token("runs", 8, "correct")]},
             {"id": "b", "image": "b.png", "caption": "blue cat",
              "tokens": [token("blue", 0, "correct"), token("cat", 5, "incorrect")]}]
    predictions = [{"token_scores": [0.05, 0.5, 0.3], "token_correct": [False, True, True]},
                   {"token_scores": [0.2, 0.6], "token_correct": [True, True]}]
    # ranked by -score: red(inc), blue, runs, dog, cat(inc) -> AP = (1/1 + 2/5) / 2 = 0.7
    ap, interval = T.incorrect_average_precision(items, predictions, draws=50, seed=1)
    assert ap == pytest.approx(0.7)
    assert interval is not None and interval[0] <= interval[1]
    nlp = TaggingNlp({"red": "ADJ", "blue": "ADJ", "dog": "NOUN", "cat": "NOUN", "runs": "VERB"})
    table, _ = T.pos_breakdown(items, predictions, nlp)
    assert table["ADJ"] == {"n": 2, "incorrect": 1, "accuracy": 1.0, "average_precision": 1.0}
    assert table["NOUN"] == {"n": 2, "incorrect": 1, "accuracy": 0.5, "average_precision": 0.5}
    assert table["VERB"] == {"n": 1, "incorrect": 0, "accuracy": 1.0, "average_precision": None}
