"""Each fact in one place: one error base class caught by type, one set of
limits, one image decoder, one JSONL reader, one LRU cache, one checkpoint
reader, an explicit model inventory, no import cycle and no private names
across modules."""
import ast
import io
from pathlib import Path

import pytest
from PIL import Image

from capscope.cli import main
from capscope.common.errors import CapscopeError, ModelUnavailable


# ---------------------------------------------------------------- errors

def test_user_errors_share_one_base_and_keep_their_old_homes():
    from capscope import cli
    from capscope.annotation.refusals import AnnotationError, NotFound
    from capscope.metrics import loading, scorer

    assert cli.CapscopeError is CapscopeError
    assert loading.ModelUnavailable is ModelUnavailable
    for cls in (ModelUnavailable, scorer.RowError, AnnotationError, NotFound):
        assert issubclass(cls, CapscopeError)
    assert issubclass(ModelUnavailable, RuntimeError) and issubclass(scorer.RowError, ValueError)


@pytest.mark.parametrize("error", [ModelUnavailable("CLIP: no weights here"), CapscopeError("bad flag")])
def test_the_cli_prints_any_user_error_as_one_line(monkeypatch, capsys, error):
    import capscope.commands.weights as cmd_models

    def fail(_args):
        raise error

    monkeypatch.setattr(cmd_models, "run_models", fail)
    assert main(["models"]) == 2
    assert capsys.readouterr().err == f"capscope models: error: {error}\n"


def test_an_annotation_error_reaches_the_cli_as_one_line(tmp_path, capsys):
    db = ["--db", f"sqlite:///{tmp_path / 'capscope.db'}"]
    assert main(["users", "add", "ann", "--password", "long-enough-secret", *db]) == 0
    assert main(["users", "add", "ann", "--password", "long-enough-secret", *db]) == 2
    assert capsys.readouterr().err.endswith("capscope users: error: user 'ann' already exists\n")
    assert main(["users", "add", "bob", "--password", "abc", *db]) == 2
    assert "password must have at least 12 characters" in capsys.readouterr().err


def test_other_errors_still_show_their_traceback(monkeypatch):
    import capscope.commands.weights as cmd_models

    def fail(_args):
        raise KeyError("a bug")

    monkeypatch.setattr(cmd_models, "run_models", fail)
    with pytest.raises(KeyError):
        main(["models"])


# ---------------------------------------------------------------- layering

LEAVES = ("metrics/constants.py", "metrics/pairs.py")
METRIC_HOUSE = ("registry", "families", "hice", "clip4dm", "scorer", "constants", "pairs")


@pytest.mark.parametrize("leaf", LEAVES)
def test_the_shared_settings_live_in_leaves(leaf):
    """constants.py and pairs.py import nothing of capscope's when run (pairs
    names Token for type checkers only), so anyone may import them."""
    tree = ast.parse((ROOT / leaf).read_text(encoding="utf-8"))
    ours = [name for name in imported_modules(tree, "metrics", type_checking=False) if name.startswith("capscope")]
    assert ours == []


def test_no_metric_module_is_in_an_import_cycle():
    """Following every import in metrics/ (inside functions too, not those
    for type checkers), no module of the registry, the metric classes or
    the scorer can reach itself: the classes read constants.py and pairs.py,
    never the registry that builds them."""
    graph = {Path(path).stem: {name.split(".")[2] for name in imported_modules(tree, "metrics", type_checking=False)
                               if name.startswith("capscope.metrics.")}
             for path, tree in package_trees() if path.startswith("metrics/") and path.count("/") == 1}
    for start in METRIC_HOUSE:
        seen, todo = set(), [start]
        while todo:
            for name in graph.get(todo.pop(), ()):
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
        assert start not in seen, f"{start} imports itself through {sorted(seen & set(METRIC_HOUSE))}"
    for metric_module in ("families", "hice", "clip4dm"):
        assert "registry" not in graph[metric_module]


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_each_metric_module_imports_first_in_a_fresh_process():
    """Whichever of them a process imports first, it imports, and a metric
    class's module does not pull in the registry."""
    import subprocess
    import sys

    script = ("import sys, importlib; importlib.import_module('capscope.metrics.{0}'); "
              "assert '{0}' == 'registry' or 'capscope.metrics.registry' not in sys.modules; "
              "from capscope.metrics import registry, families, hice, clip4dm, constants, pairs; "
              "assert registry.get_spec('hice').threshold == hice.THRESHOLD == constants.HICE_THRESHOLD; "
              "assert families.PreparedPair is clip4dm.PreparedPair is pairs.PreparedPair")
    runs = {name: subprocess.Popen([sys.executable, "-c", script.format(name)], stderr=subprocess.PIPE, text=True)
            for name in ("registry", "families", "hice", "clip4dm")}
    failed = {name: run.communicate(timeout=180)[1].strip().splitlines()[-1:] for name, run in runs.items()}
    assert {name: why for name, why in failed.items() if runs[name].returncode} == {}


def test_each_command_module_registers_its_own_commands():
    """`capscope models` has its own module; cmd_score holds score and features only."""
    import argparse
    import importlib

    from capscope import cli

    assert "capscope.commands.weights" in cli.COMMAND_MODULES
    for name, commands in (("capscope.commands.weights", {"models"}), ("capscope.commands.score", {"score", "features"})):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        assert set(sub.choices) == commands
    assert cli.build_parser().parse_args(["models", "--json"]).func.__module__ == "capscope.commands.weights"


def test_auroc_lives_in_common_for_both():
    from capscope.bench import gold_figures
    from capscope.common.stats import auroc

    assert gold_figures.auroc is auroc
    assert auroc([True, False, True, False], [0.9, 0.1, 0.8, 0.3]) == 1.0
    assert auroc([True, False, True], [0.2, 0.5, None]) == 0.0
    assert auroc([True, True], [0.2, 0.5]) is None


def test_the_trainer_probe_scores_with_the_evaluator_it_is_given(tmp_path):
    """`capscope train infometic --probe-gold` scores each checkpoint with
    bench's evaluate_gold unless given another (here a stand-in that records its calls)."""
    import torch

    from capscope.demo.clip_model import new_demo_clip, save_demo_clip
    from capscope.train.infometic_setup import InfoTrainConfig
    from capscope.train.infometic_trainer import train_infometic

    torch.manual_seed(0)
    save_demo_clip(new_demo_clip(), tmp_path / "clip.pt")
    (tmp_path / "gold.jsonl").write_text('{"id": "g1"}\n')
    config = InfoTrainConfig(out=tmp_path / "head.pt", clip=tmp_path / "clip.pt", demo_scenes=16, batch_size=8,
                             minutes=None, steps=1, threads=1, progress=False, intra_layers=1, inter_layers=1,
                             probe_gold=tmp_path / "gold.jsonl")
    calls = []

    def evaluate_gold(scorer, metric, items, base_dir, token_rule, beta):
        calls.append((type(scorer).__name__, metric, items, base_dir, token_rule))
        figures = dict.fromkeys(("text_accuracy", "incorrect_token_f1", "incorrect_token_auroc", "vision_accuracy",
                                 "region_auroc"), 0.5)
        return {**figures, "token_rules": {"paper": {"text_accuracy": 0.25}}, "foil": {"foil_accuracy": 1.0},
                "trivial": {"text_accuracy": 0.75}}

    state = train_infometic(config, evaluate_gold=evaluate_gold)
    assert calls == [("Scorer", "infometic", [{"id": "g1"}], tmp_path, "relative")]
    assert state.probes[0][1]["paper_rule"] == {"text_accuracy": 0.25} and state.probes[0][1]["foil"] == 1.0


# ---------------------------------------------------------------- limits

def test_one_caption_and_reference_rule_for_every_door():
    from capscope.common.limits import MAX_CAPTION_CHARS, MAX_REFERENCES
    from capscope.metrics.text import check_caption, check_references

    assert check_caption("x" * MAX_CAPTION_CHARS) == ""
    assert check_caption("x" * (MAX_CAPTION_CHARS + 1)) == "caption has 5001 characters (limit 5000)"
    assert check_references(None) == "" and check_references(["a dog"] * MAX_REFERENCES) == ""
    assert "at most 50 references" in check_references(["a dog"] * (MAX_REFERENCES + 1))
    assert "at most 50 references" in check_references(["x" * (MAX_CAPTION_CHARS + 1)])
    assert "non-empty strings" in check_references(["a dog", " "])


def test_given_regions_over_the_limit_are_refused():
    from capscope.common.limits import MAX_REGIONS
    from capscope.metrics.regions import given_regions

    assert len(given_regions([[0, 0, 5, 5]] * MAX_REGIONS, 10, 10)) == MAX_REGIONS
    with pytest.raises(ValueError, match="101 regions"):
        given_regions([[0, 0, 5, 5]] * (MAX_REGIONS + 1), 10, 10)


LIMIT_NAMES = ("MAX_CAPTION_CHARS", "MAX_REFERENCES", "MAX_IMAGE_PIXELS", "MAX_PIXELS", "MAX_SCORE_PIXELS",
               "MAX_IMAGE_BYTES", "MAX_REGIONS", "MAX_LINE_BYTES", "MAX_ID_CHARS", "MAX_JSON_DEPTH",
               "MAX_SUMMARY_BYTES", "MAX_NAME_CHARS", "MAX_FILE_NAME_CHARS")


def test_each_limit_is_written_once():
    """Only app/common/limits.py gives these limits a number; everyone else reads it."""
    found = [f"{path}:{node.lineno} {target.id}" for path, tree in package_trees()
             for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets
             if isinstance(target, ast.Name) and target.id in LIMIT_NAMES and _is_number(node.value)]
    assert [f for f in found if not f.startswith("app/common/limits.py")] == []
    assert len(found) == len(set(LIMIT_NAMES) - {"MAX_PIXELS", "MAX_SCORE_PIXELS"})


def _is_number(node) -> bool:
    return all(isinstance(n, (ast.Constant, ast.BinOp, ast.operator)) for n in ast.walk(node))


def test_fine_tunings_budget_and_hold_out_are_written_once():
    """The CLI, the API body, the Models panel and FinetuneConfig all read train/finetune/defaults.py."""
    import argparse

    from capscope.commands import demo as cmd_demo

    from capscope.server import model_routes as server

    from capscope.server import training

    from capscope.ui import admin as ui_model_versions
    from capscope.train.finetune import defaults as finetune_defaults
    from capscope.train.finetune import FinetuneConfig

    parser = argparse.ArgumentParser()
    cmd_demo.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "infometic", "--labels", "x.jsonl", "--init", "demo", "--out", "y.pt"])
    assert args.holdout == FinetuneConfig.holdout == server.TrainRequest.model_fields["holdout"].default == finetune_defaults.HOLDOUT
    assert FinetuneConfig.minutes == training.DEFAULT_MINUTES == finetune_defaults.MINUTES
    assert ui_model_versions.DEFAULT_HOLDOUT == finetune_defaults.HOLDOUT
    literals = [f"{path}:{node.lineno}" for path, tree in package_trees() for node in ast.walk(tree)
                if isinstance(node, ast.keyword) and node.arg == "holdout"
                and isinstance(node.value, ast.Constant) and node.value.value == finetune_defaults.HOLDOUT]
    assert literals == []   # the default spelt out again (holdout=0.0, training on all the labels, is a choice)



# ---------------------------------------------------------------- images

def _png(size=(6, 4), mode="RGBA") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, (10, 200, 30, 255)[: len(mode)]).save(buffer, format="PNG")
    return buffer.getvalue()


def test_one_decoder_for_files_bytes_and_images(tmp_path):
    from capscope.metrics.images import read_image

    (tmp_path / "a.png").write_bytes(_png())
    for source in (tmp_path / "a.png", str(tmp_path / "a.png"), _png(), Image.new("L", (6, 4), 7)):
        image = read_image(source)
        assert image.mode == "RGB" and image.size == (6, 4)
    assert read_image(_png()).getpixel((0, 0)) == (10, 200, 30)


@pytest.mark.parametrize("source,fragment", [
    (b"\x89PNG not really", "cannot read image"),
    (_png()[:40], "cannot read image"),
    (b"", "cannot read image"),
])
def test_broken_images_give_one_error_type(source, fragment):
    from capscope.metrics.images import ImageError, ImageTooLarge, read_image

    with pytest.raises(ImageError, match=fragment) as caught:
        read_image(source, name="x.png")
    assert not isinstance(caught.value, ImageTooLarge) and isinstance(caught.value, CapscopeError)


def test_limits_and_formats_are_checked_before_decoding(tmp_path, monkeypatch):
    from capscope.common import limits
    from capscope.metrics.images import ImageError, ImageTooLarge, read_image

    with pytest.raises(ImageError, match="image not found: nope.png"):
        read_image(tmp_path / "nope.png", name="nope.png")
    with pytest.raises(ImageError, match="must be JPEG, got PNG"):
        read_image(_png(), formats={"JPEG"})
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 23)
    with pytest.raises(ImageTooLarge, match="6x4 pixels \\(limit 23\\)"):
        read_image(_png())
    monkeypatch.setattr(limits, "MAX_IMAGE_BYTES", 10)
    with pytest.raises(ImageTooLarge, match="bytes \\(limit 10\\)"):
        read_image(_png(size=(1, 1)))


def test_the_scorer_and_the_importer_use_it(tmp_path):
    from capscope.annotation.importer.image_files import ImageFile, decode_image
    from capscope.annotation.importer.problems import RowProblem
    from capscope.metrics.scorer import RowError, row_image

    (tmp_path / "a.png").write_bytes(_png())
    (tmp_path / "bad.png").write_bytes(b"\x89PNG not really")
    image, name = row_image("a.png", tmp_path)
    assert (image.mode, image.size, name) == ("RGB", (6, 4), "a.png")
    with pytest.raises(RowError, match="cannot read image bad.png"):
        row_image("bad.png", tmp_path)
    imported = ImageFile(tmp_path / "a.png", "", 0)
    decode_image(imported)
    assert (imported.width, imported.height, imported.pil.mode) == (6, 4, "RGB")
    with pytest.raises(RowProblem, match="cannot read image 'bad.png'"):
        decode_image(ImageFile(tmp_path / "bad.png", "", 0))


# ---------------------------------------------------------------- JSONL

def _jsonl(tmp_path, monkeypatch) -> Path:
    from capscope.common import limits

    monkeypatch.setattr(limits, "MAX_LINE_BYTES", 40)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"id": "a"}\n\n  \n[1, 2]\n{broken\n{"id": "caf\xe9"}\n{"id": "' + b"x" * 40 + b'"}\n{"id": "b"}\n')
    return path


def test_one_jsonl_reader_reports_each_bad_line(tmp_path, monkeypatch):
    from capscope.common.jsonl import json_lines

    lines = list(json_lines(_jsonl(tmp_path, monkeypatch)))
    assert [(n, row) for n, row, why in lines if why is None] == [(1, {"id": "a"}), (8, {"id": "b"})]
    assert {n: why for n, _, why in lines if why} == {
        4: "expected a JSON object, got list", 5: "malformed JSON: Expecting property name enclosed in double "
        "quotes at column 2", 6: "not UTF-8 (byte 11)", 7: "line is 51 bytes (limit 40)"}


def test_every_reader_goes_through_it(tmp_path, monkeypatch):
    from capscope.annotation.importer.rows import read_jsonl
    from capscope.bench.evaluate import read_gold
    from capscope.batch.pipeline import read_pairs
    from capscope.common.jsonl import JsonlError

    path = _jsonl(tmp_path, monkeypatch)
    assert [(n, why) for n, row, why in read_pairs(path) if why][0] == (4, "line 4: expected a JSON object, got list")
    with path.open("rb") as stream:
        assert [str(obj) for n, obj in read_jsonl(stream) if n == 6] == ["line 6: not UTF-8 (byte 11)"]
    with pytest.raises(JsonlError, match="rows.jsonl:4: expected a JSON object") as caught:
        read_gold(path)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CapscopeError)
    with pytest.raises(JsonlError, match="no such file"):
        read_gold(tmp_path / "none.jsonl")


# ---------------------------------------------------------------- threads and caches

def test_one_thread_limiter_for_the_server_and_the_metrics():
    import torch

    from capscope.server import scoring as ui_models
    from capscope.common.threads import few_threads

    assert ui_models.few_threads is few_threads and not hasattr(ui_models, "one_thread")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with few_threads():  # one pair: always one thread
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with few_threads(100_000):
            assert torch.get_num_threads() == 2
        with few_threads(10, device=torch.device("cuda")):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_one_in_flight_counter_for_every_per_user_limit():
    """The REST guard, the scorer's turns and the segmenter count a caller's calls with one
    counter and refuse with one error base (REST: 429)."""
    from capscope.common.in_flight import Busy, InFlight
    from capscope.server.guards import InFlightCap
    from capscope.server.scoring import ScoreGate, ScoringBusy
    from capscope.server.segmenting import ClickService, SegmentingBusy

    assert issubclass(ScoringBusy, Busy) and issubclass(SegmentingBusy, Busy)
    assert isinstance(InFlightCap(None, frozenset(), 2).in_flight, InFlight)
    assert isinstance(ScoreGate()._pending, InFlight)  # noqa: SLF001 (the gate's own counter)
    clicks = ClickService("classic")
    try:
        assert isinstance(clicks.in_flight, InFlight)
    finally:
        clicks.close()

    counter = InFlight(2, "segment calls running")
    counter.enter("ann")
    with counter.held("ann"):
        assert counter.count("ann") == 2 and counter.count("bob") == 0
        with pytest.raises(Busy, match="you already have 2 segment calls running; wait for them to finish"):
            counter.enter("ann")
        counter.enter("bob")  # another caller is not held back
    assert counter.count("ann") == 1
    counter.leave("ann")
    counter.leave("bob")
    assert counter.count("ann") == counter.count("bob") == 0 and counter._counts == {}  # noqa: SLF001
    with pytest.raises(ValueError):
        InFlight(0, "calls")


def test_the_lru_cache_forgets_the_least_recently_used():
    from capscope.common.lru import LRUCache

    cache = LRUCache(2)
    cache["a"], cache["b"] = 1, 2
    assert cache["a"] == 1  # a use: "b" is now the oldest
    cache["c"] = 3
    assert "b" not in cache and len(cache) == 2
    assert cache.get_or_compute("a", lambda: pytest.fail("cached")) == 1
    assert cache.get_or_compute("d", lambda: 4) == 4 and "c" not in cache


def test_get_many_computes_each_missing_key_once_even_past_the_size():
    from capscope.common.lru import LRUCache

    cache, calls = LRUCache(2), []

    def compute(indices):
        calls.append(indices)
        return [keys[i].upper() for i in indices]

    cache["b"] = "cached b"
    keys = ["a", "b", "a", "c", "d", "b"]
    assert cache.get_many(keys, compute) == ["A", "cached b", "A", "C", "D", "cached b"]
    assert calls == [[0, 3, 4]] and len(cache) == 2
    assert cache.get_many(["d"], compute) == ["D"] and len(calls) == 1


@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_image_feature_caches_are_bounded_and_cleared_in_public():
    import open_clip
    import torch

    from capscope.metrics.encoder import ClipBackbone
    from capscope.metrics.hice import HiceImageEncoder

    torch.manual_seed(0)
    model = open_clip.create_model("ViT-B-32", pretrained=None)
    backbone = ClipBackbone.from_model(model, "ViT-B-32", "test", torch.device("cpu"))
    backbone._images.size = 2  # a small bound for the test
    images = [Image.new("RGB", (40, 30), (i * 60, 10, 10)) for i in range(3)]
    first = backbone.image_features(images, [[], [], []])
    assert len(first) == 3 and len(backbone._images) == 2
    again = backbone.image_features(images[2:], [[]])
    assert again[0] is first[2]
    hice = HiceImageEncoder(backbone, None)
    hice.image_features(images[:1], [[]])
    backbone.encode_pieces([320])
    hice.clear_caches()
    assert len(hice._cache) == len(backbone._images) == 0 and not backbone._pieces


# ---------------------------------------------------------------- checkpoints

def test_one_checkpoint_reader_checks_and_explains(tmp_path):
    import torch

    from capscope.common import checksums
    from capscope.metrics.loading import read_checkpoint

    with pytest.raises(ModelUnavailable, match=r"SAM: checkpoint file .*none.pth not found \(set --sam\)"):
        read_checkpoint(tmp_path / "none.pth", "SAM", "--sam")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelUnavailable, match="PAC-S: cannot read .*junk.pth as a torch checkpoint"):
        read_checkpoint(tmp_path / "junk.pth", "PAC-S")
    path = tmp_path / "good.pth"
    torch.save({"w": torch.ones(2)}, path)
    checksums.record(path, "test")
    assert torch.equal(read_checkpoint(path, "X", weights_only=True)["w"], torch.ones(2))
    torch.save({"w": torch.zeros(2)}, path)  # changed after its digest was recorded
    with pytest.raises(ModelUnavailable, match="X: good.pth: sha256"):
        read_checkpoint(path, "X")


def test_torch_load_is_called_in_one_place():
    calls = [f"{path}:{node.lineno}" for path, tree in package_trees() for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr == "load" and getattr(node.value, "id", "") == "torch"]
    assert [c for c in calls if not c.startswith("metrics/loading.py")] == []
    assert len(calls) == 1


# ---------------------------------------------------------------- model inventory

@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_the_inventory_is_built_by_a_call_not_by_an_import():
    """In a fresh process: importing segmenters registers nothing, and
    components() lists the proposers without anyone importing it first."""
    import subprocess
    import sys

    script = ("from capscope.metrics import inventory, loading; names = [r['component'] for r in inventory.components()]; "
              "assert not hasattr(loading, 'register_component'); "
              "assert names[-5:] == ['SAM', 'YOLO', 'FastSAM', 'MobileSAM', 'Alpha-CLIP'], names; "
              "assert len(names) == len(set(names)), names")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


# ---------------------------------------------------------------- private names

def test_no_module_uses_a_private_name_of_another():
    """`from x import _name` and `obj._name` (other than self's and cls's)
    nowhere in the packages: what another module needs is public."""
    found = []
    for path, tree in package_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                found += [f"{path}:{node.lineno} import {a.name}" for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                        and node.attr not in THIRD_PARTY_PRIVATE.get(str(path), ()):
                    found.append(f"{path}:{node.lineno} {ast.unparse(node)}")
    assert found == []


# another library's private names a module must use, each with its reason
THIRD_PARTY_PRIVATE = {
    "app/ui/queue_cap.py": {"_queue"},  # Gradio's queue, which no public name reaches, capped per user
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


# ---------------------------------------------------------------- helpers

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "metrics", "annotation", "db")


def package_trees():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"))


def imported_modules(tree, package: str, type_checking: bool = True):
    """Absolute names of every module a file imports, at any depth (relative
    imports resolved within `package`; `from . import x` gives the package and
    its module x). type_checking=False leaves out `if TYPE_CHECKING:` blocks."""
    for node in ast.walk(_without_type_checking(tree) if not type_checking else tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = f"capscope.{package}" if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            yield module
            if node.level and not node.module:
                yield from (f"{module}.{alias.name}" for alias in node.names)


def _without_type_checking(tree):
    class Drop(ast.NodeTransformer):
        def visit_If(self, node):
            if ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                return node.orelse or None
            return self.generic_visit(node)

    return Drop().visit(ast.parse(ast.unparse(tree)))
