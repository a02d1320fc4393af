"""The Benchmark tab's "Agreement with people": `capscope correlate` on a
judgement file through the server's one scorer (a demo-format checkpoint with
random weights, built here), the command line's table rows, the figure, and a
one-line message for every bad choice, file or layout. The browser check is in
test_ui_served.py (test_browser_benchmark_agreement_with_people)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from PIL import Image

from capscope.bench import human_correlation as C
from capscope.bench import published_comparison as P
from capscope.bench import correlation_report as R
from capscope.demo.judgements import write_judgements
from capscope.ui.benchmark_people import AgreementView, agreement_with_people, demo_judgements, outputs_of
from capscope.ui.benchmark_runs import SharedScorer
from capscope.server.scoring import SERVER_CONFIG, Models, default_factory
from ui_support import use_demo_checkpoint

METRICS = ["infometic", "clip-s"]


@pytest.fixture(autouse=True)
def data_folder(tmp_path_factory, monkeypatch):
    """The default data root is the data folder: here the folder of every test's files."""
    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The server's Models, counting how often a scorer is built."""
    root = tmp_path_factory.mktemp("people")
    patch = pytest.MonkeyPatch()
    use_demo_checkpoint(patch, root)
    built = []

    def factory(metrics):
        built.append(list(metrics))
        return default_factory(metrics, SERVER_CONFIG.replace(token_rule="paper"))

    models = Models(factory, metrics=("infometic", "clip-s", "pac-s"), token_rule="paper")
    models.built = built
    assert models.available == METRICS     # PAC-S has no checkpoint here
    models.builds_before = len(built)
    yield models
    patch.undo()


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """A demo-world Flickr8k-Expert file over 4 scenes, and its parsed JSON."""
    out = tmp_path_factory.mktemp("judged")
    write_judgements(out, 4, seed=3, progress=False)
    path = out / "judgements" / "flickr8k.json"
    return path, json.loads(path.read_text())


def message_is_one_line(view: AgreementView, *words):
    assert view.message.startswith("**Not run:**") and "\n" not in view.message and "Traceback" not in view.message
    assert all(w in view.message for w in words), view.message
    assert not view.rows and view.figure is None


# ---------------------------------------------------------------- the table's cells

def test_table_cells_are_the_printed_rows():
    figures = P.with_published({"n": 100, "tau_b": 0.50, "tau_c": 0.516, "pearson": 0.6, "statistic": "tau_c",
                                "ci95": [0.49, 0.54]}, "flickr8k-expert", "tau_c", "clip-s.clip_s")
    far = P.with_published({"n": 90, "tau_b": -0.3, "tau_c": None, "pearson": 0.4, "statistic": "tau_c",
                            "ci95": None}, "flickr8k-expert", "tau_c", "infometic.overall")
    result = C.finish({"benchmark": "flickr8k-expert", "kind": "rating", "n": 100, "protocol": "p",
                       "statistic": "tau_c", "bootstrap": {"draws": 1000, "seed": 0},
                       "metrics": {"clip-s.clip_s": figures, "infometic.overall": far}}, [])
    header, rows = R.table(result)
    assert header == ["score", "n", "tau_b", "tau_c*", "pearson", "95% CI", "published", "verdict"]
    # 51.5 (InfoMetIC Table 1, source [1]) lies in [49.0, 54.0]; 54.2 is published for InfoMetIC, tau_c undefined
    assert rows == [["clip-s.clip_s", "100", "50.0", "51.6", "60.0", "[ 49.0,  54.0]", "51.5 [1]", "reproduced"],
                    ["infometic.overall", "90", "-30.0", "-", "40.0", "-", "54.2 [1]", ""]]
    printed = R.format_result(result).splitlines()
    assert printed[2].split() == ["score", "n", "tau_b", "tau_c*", "pearson", "95%", "CI", "published", "verdict"]
    assert printed[3] == ("  clip-s.clip_s                 100      50.0      51.6      60.0  [ 49.0,  54.0]"
                          "    51.5 [1]  reproduced")


def test_pair_table_has_the_pascal_categories():
    figures = {"n": 8, "accuracy": 0.625, "ci95": [0.5, 0.75], "published": None, "setting": None,
               "categories": {"HC": {"n": 4, "accuracy": 0.5}, "HI": {"n": 4, "accuracy": 0.75}}}
    result = {"benchmark": "pascal-50s", "kind": "pairwise", "metrics": {"count.words": figures}, "sources": []}
    header, rows = R.table(result)
    assert header == ["score", "n", "HC", "HI", "HM", "MM", "acc*", "95% CI", "published", "verdict"]
    assert rows == [["count.words", "8", "50.0", "75.0", "-", "-", "62.5", "[ 50.0,  75.0]", "-", ""]]


# ---------------------------------------------------------------- the handler on a demo-world file

def test_handler_correlates_through_the_shared_scorer(models, judged):
    path, data = judged
    calls = []
    original = models.score
    models.score = lambda *a, **k: calls.append(k["metrics"]) or original(*a, **k)
    try:
        view = agreement_with_people(models, "flickr8k-expert", f"  {path.parent}  ", None, METRICS, 200)
    finally:
        del models.score
    judgements = [(key, j["caption"], j["rating"]) for key, entry in data.items() for j in entry["human_judgement"]
                  if not math.isnan(j["rating"])]
    captions = {(key, caption) for key, caption, _ in judgements}
    assert view.message.startswith(f"flickr8k-expert: {len(judgements)} judgements scored in ")
    assert len(models.built) == models.builds_before      # no scorer of its own
    assert len(calls) == len(captions) and all(m == METRICS for m in calls)    # each caption once, through the lock
    assert view.header == ["score", "n", "tau_b", "tau_c*", "pearson", "95% CI", "published", "verdict"]
    by_key = {row[0]: row for row in view.rows}
    assert {"clip-s.clip_s", "clip-s.ref_clip_s", "infometic.overall"} <= set(by_key)
    assert by_key["infometic.overall"][6] == "54.2 [1]"      # InfoMetIC Table 1 beside it
    # tau_c by scipy on the scores of the shared scorer, caption by caption
    images = {key: Image.open(path.parent / entry["image_path"]).convert("RGB") for key, entry in data.items()}
    refs = {key: entry["ground_truth"] for key, entry in data.items()}
    score = {(k, c): models.score(images[k], c, refs[k], metrics=["clip-s"])["metrics"]["clip-s"]["scores"]["clip_s"]
             for k, c in captions}
    expected = scipy.stats.kendalltau([score[k, c] for k, c, _ in judgements], [r for _, _, r in judgements],
                                      variant="c").statistic
    assert by_key["clip-s.clip_s"][1] == str(len(judgements))
    assert float(by_key["clip-s.clip_s"][3]) == pytest.approx(100 * expected, abs=0.051)
    assert "Kendall tau_c" in view.notes and "[1] Hu et al., InfoMetIC" in view.notes and "DEMO MODEL" in view.notes
    printed = {line.split()[0]: line.split()[1:] for line in view.text.splitlines() if line.startswith("  clip-s.")}
    assert printed["clip-s.clip_s"][:4] == by_key["clip-s.clip_s"][1:5]     # the command line's row
    figure = Image.open(view.figure)
    assert figure.format == "PNG" and figure.size[0] > 800 and len(np.unique(np.asarray(figure))) > 10
    message, table, notes, text, image = outputs_of(view)
    assert list(table.columns) == view.header and table.values.tolist() == view.rows and image == view.figure


def test_upload_that_names_its_images_by_absolute_path(models, judged, tmp_path):
    path, data = judged
    moved = {key: {**entry, "image_path": str(path.parent / entry["image_path"])} for key, entry in data.items()}
    upload = tmp_path / "uploaded.json"
    upload.write_text(json.dumps(moved))
    view = agreement_with_people(models, "flickr8k-expert", "", str(upload), ["clip-s"], 0)
    assert view.rows and view.rows[0][5] == "-"     # no bootstrap: no interval
    assert {row[0].split(".")[0] for row in view.rows} == {"clip-s", "baseline"}
    (tmp_path / "relative.json").write_text(json.dumps(data))
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", "", str(tmp_path / "relative.json"),
                                              ["clip-s"], 0), "no usable rows", "give its path on the server")


def test_bad_choices_files_and_layouts_are_one_line(models, judged, tmp_path):
    path, _ = judged
    folder = str(path.parent)
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", str(tmp_path / "nowhere"), None, METRICS),
                        "does not exist", "flickr8k.json")
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", "", None, METRICS), "give the path")
    message_is_one_line(agreement_with_people(models, None, folder, None, METRICS), "pick a benchmark")
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", folder, None, []), "pick at least one")
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", folder, None, ["pac-s"]),
                        "not loaded on this server: pac-s")
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", folder, None, METRICS, -1), "0 or more")
    (tmp_path / "list.json").write_text("[1, 2]")
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", str(tmp_path / "list.json"), None, METRICS),
                        "expected an object keyed by image")
    (tmp_path / "broken.json").write_text("{not json")
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", str(tmp_path / "broken.json"), None,
                                              METRICS), "not JSON")
    message_is_one_line(agreement_with_people(models, "flickr8k-cf", folder, None, METRICS),
                        "no crowdflower_flickr8k.json")


def test_a_row_that_cannot_be_scored_gets_its_error(models):
    image = Image.new("RGB", (64, 64), (200, 30, 30))
    rows = SharedScorer(models, ["clip-s"]).score_batch([{"image": image, "caption": ""},
                                                         {"image": image, "caption": "a red square."}])
    assert rows[0]["metrics"] == {} and rows[0]["error"]
    assert list(rows[1]["metrics"]) == ["clip-s"]


def test_token_benchmark_shows_the_evaluate_figures(models, tmp_path):
    from capscope.demo.dataset import write_demo_data

    write_demo_data(tmp_path, 2, seed=0, progress=False)    # images/ beside captokeneval.jsonl, paths relative
    view = agreement_with_people(models, "captokeneval", str(tmp_path / "captokeneval.jsonl"), None,
                                 ["infometic"], 20)
    assert view.message.startswith("captokeneval: 4 items scored"), view.message
    assert view.notes.startswith("```") and "average precision of incorrect words" in view.notes
    assert view.header == [] and view.figure is None
    assert list(outputs_of(view)[1].columns) == ["score"]


def test_demo_judgements_written_once(tmp_path, monkeypatch):
    import capscope.demo.judgements as J

    monkeypatch.setattr("capscope.ui.benchmark_people.DEMO_JUDGEMENT_SCENES", 2)
    path = Path(demo_judgements(tmp_path))
    assert path == tmp_path / J.JUDGEMENTS_FILE and len(json.loads(path.read_text())) == 2
    stamp = path.stat().st_mtime_ns
    assert demo_judgements(tmp_path) == str(path) and path.stat().st_mtime_ns == stamp


# ---------------------------------------------------------------- the data roots

@pytest.fixture
def rooted(tmp_path):
    """A data root with a judgement file, a folder beside it with an image, and
    links from inside the root to outside it."""
    from capscope.server.data_roots import DataRoots

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "images").mkdir(parents=True)
    outside.mkdir()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(outside / "secret.png")
    Image.new("RGB", (32, 32), (30, 200, 30)).save(root / "images" / "inside.png")
    (root / "images" / "link.png").symlink_to(outside / "secret.png")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    return DataRoots([root]), root, outside


@pytest.mark.parametrize("name", ["images/inside.png", "images", ".", "images/../images/inside.png",
                                  "images/not-yet.png"])
def test_paths_inside_a_root_are_allowed(rooted, name):
    roots, root, _ = rooted
    assert roots.check(root / name) == (root / name).resolve()


@pytest.mark.parametrize("name", ["../outside/secret.png", "images/../../outside", "images/link.png",
                                  "escape/secret.png", "escape", "..", "../root-sibling"])
def test_paths_that_leave_the_roots_are_refused(rooted, name):
    from capscope.server.data_roots import OutsideDataRoots
    from capscope.common.errors import CapscopeError

    roots, root, _ = rooted
    with pytest.raises(OutsideDataRoots, match="outside the server's data roots") as caught:
        roots.check(root / name, "image")
    message = str(caught.value)
    assert "\n" not in message and "--data-root DIR" in message and isinstance(caught.value, CapscopeError)


def test_absolute_paths_prefixes_and_bad_paths_are_refused(rooted, tmp_path):
    from capscope.server.data_roots import DataRoots, OutsideDataRoots

    roots, root, outside = rooted
    for path in ("/etc/passwd", outside / "secret.png", str(root) + "-evil/x.png", tmp_path):
        with pytest.raises(OutsideDataRoots):
            roots.check(path)
    with pytest.raises(OutsideDataRoots, match="not a usable path"):
        roots.check(str(root / "images") + "/a\x00b.png")
    both = DataRoots([root, outside])                 # repeatable: either root will do
    assert both.check(outside / "secret.png") == (outside / "secret.png").resolve()
    linked = tmp_path / "linked-root"                 # a root that is itself a link
    linked.symlink_to(root, target_is_directory=True)
    assert DataRoots([linked]).check(linked / "images" / "inside.png") == (root / "images" / "inside.png").resolve()


def test_the_default_root_is_the_data_folder(tmp_path, monkeypatch):
    from capscope.server.data_roots import DataRoots, OutsideDataRoots, check_folders
    from capscope.common.errors import CapscopeError

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    assert DataRoots().folders == (tmp_path / "data",)
    assert DataRoots().check(tmp_path / "data" / "x.json") == (tmp_path / "data" / "x.json").resolve()
    with pytest.raises(OutsideDataRoots):
        DataRoots().check(tmp_path / "x.json")
    with pytest.raises(CapscopeError, match="--data-root .*nowhere: no such folder"):
        check_folders([tmp_path / "nowhere"])


def test_the_tab_refuses_paths_and_images_outside_the_roots(models, judged, rooted):
    """Through the code the Benchmark tab calls: a server path outside the
    roots (absolute, by `..`, by a link) and images a file names outside them
    (an upload's absolute paths, a link beside the file) stop the run with one
    line; the same file inside the roots runs."""
    path, data = judged
    roots, root, outside = rooted
    (outside / "flickr8k.json").write_text(path.read_text())
    for server_path in (str(outside), str(root / ".." / "outside" / "flickr8k.json"), str(root / "escape")):
        message_is_one_line(agreement_with_people(models, "flickr8k-expert", server_path, None, ["clip-s"], 0,
                                                  roots=roots), "outside the server's data roots")

    key, entry = next(iter(data.items()))
    upload = outside / "upload.json"
    upload.write_text(json.dumps({key: {**entry, "image_path": str(outside / "secret.png")}}))
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", "", str(upload), ["clip-s"], 0, roots=roots),
                        "image named in the upload:", "secret.png", "outside the server's data roots")
    (root / "flickr8k.json").write_text(json.dumps({key: {**entry, "image_path": "link.png"}}))
    message_is_one_line(agreement_with_people(models, "flickr8k-expert", str(root), None, ["clip-s"], 0, roots=roots),
                        "image named in root/:", "secret.png", "outside the server's data roots")

    (root / "flickr8k.json").write_text(json.dumps({key: {**entry, "image_path": "inside.png"}}))
    view = agreement_with_people(models, "flickr8k-expert", str(root), None, ["clip-s"], 0, roots=roots)
    assert not view.message.startswith("**Not run"), view.message


def test_a_gold_file_inside_the_roots_cannot_name_images_outside(models, rooted):
    """CapTokenEval rows reach the scorer by path: `..` out of the root is
    refused before scoring, and the shared scorer checks each path too."""
    from capscope.demo.dataset import write_demo_data

    roots, root, outside = rooted
    write_demo_data(root / "gold", 1, seed=0, progress=False)
    listing = root / "gold" / "captokeneval.jsonl"
    items = [json.loads(line) for line in listing.read_text().splitlines()]
    (outside / "scene.png").write_bytes((root / "gold" / items[0]["image"]).read_bytes())
    items[0]["image"] = "../../outside/scene.png"
    listing.write_text("".join(json.dumps(item) + "\n" for item in items))
    message_is_one_line(agreement_with_people(models, "captokeneval", str(listing), None, ["clip-s"], 0, roots=roots),
                        "image named in captokeneval.jsonl:", "outside the server's data roots")
    rows = SharedScorer(models, ["clip-s"], roots).score_batch([items[0]], base_dir=listing.parent)
    assert rows[0]["metrics"] == {} and "outside the server's data roots" in rows[0]["error"]


def test_serve_takes_its_data_roots(tmp_path, monkeypatch, capsys):
    """`capscope serve --data-root A --data-root B` hands both to the app the UI reads them from."""
    import uvicorn

    from capscope.cli import main

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    monkeypatch.setenv("CAPSCOPE_NO_SEED", "1")
    db = ["--db", f"sqlite:///{tmp_path / 'serve.db'}"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert main(["serve", "--data-root", str(tmp_path / "a"), "--data-root", str(tmp_path / "b"), *db]) == 0
    assert served[0].state.data_roots.folders == (tmp_path / "a", tmp_path / "b")
    assert main(["serve", "--data-root", str(tmp_path / "nowhere"), *db]) == 2
    error = capsys.readouterr().err
    assert error.endswith(f"capscope serve: error: --data-root {tmp_path / 'nowhere'}: no such folder\n")


def test_the_demo_worlds_folder_is_readable_whatever_the_roots(tmp_path, monkeypatch):
    from capscope.server.data_roots import DataRoots, OutsideDataRoots
    from capscope.ui.benchmark_runs import demo_folder, tab_roots

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    roots = tab_roots(DataRoots([tmp_path / "mine"]))
    assert roots.check(demo_folder() / "judgements" / "flickr8k.json")
    assert roots.check(tmp_path / "mine" / "x.json")
    for path in (tmp_path / "data" / "capscope.db", tmp_path / "data" / "demo-data" / ".." / "imports"):
        with pytest.raises(OutsideDataRoots):
            roots.check(path)


def test_empty_agreement_tables_keep_their_headers(tmp_path):
    """Gradio numbers the columns of an empty list 1, 2, 3: the tables go out as frames with their headers."""
    from capscope.db import Store
    from capscope.ui.benchmark import ANNOTATOR_HEADERS, PAIR_HEADERS, agreement_frames

    summary, annotators, pairs = agreement_frames(Store(f"sqlite:///{tmp_path / 'empty.db'}"), None)
    assert list(annotators.columns) == ANNOTATOR_HEADERS and annotators.empty
    assert list(pairs.columns) == PAIR_HEADERS and pairs.empty
    assert summary.startswith("0 items with judgements")
