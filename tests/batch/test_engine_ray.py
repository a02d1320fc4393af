"""`--engine ray` for capscope score, features and correlate, on a 2-CPU Ray
cluster the tests start on this machine, with the demo model on generated scenes."""
import functools
import http.server
import itertools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from capscope.cli import main
from human_support import write_foil_file

SCORE = ["--metric", "clip-s", "infometic", "--regions", "classic", "--device", "cpu", "--demo"]
EXTRA_CAPTIONS = ("a red circle.", "a large blue square and a green star.", "two yellow triangles.")
N_IMAGES = 12
RUN_LIMIT_S = 240


# ---------------------------------------------------------------- helpers

def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_same_rows(expected: list[dict], got: list[dict], tolerance: float) -> None:
    """Same rows in the same order; floats within `tolerance` x max(1, |value|),
    and so verdicts too, but for scores within `tolerance` of the threshold."""
    assert [r["id"] for r in got] == [r["id"] for r in expected]
    for want, have in zip(expected, got):
        if tolerance > 1e-6:
            want, have = without_knife_edges(want, have, tolerance)
        _assert_close(want, have, tolerance, want["id"] or "?")


VERDICTS = {"token_scores": "token_correct", "region_scores": "region_mentioned"}


def without_knife_edges(want: dict, have: dict, tolerance: float, beta: float = 0.1) -> tuple[dict, dict]:
    """Both rows with the verdicts on scores this close to beta blanked: the
    demo model puts some word scores within 1e-6 of 0.1, where float noise
    decides the verdict."""
    want, have = json.loads(json.dumps(want)), json.loads(json.dumps(have))
    for name, metric in want["metrics"].items():
        for scores, verdicts in VERDICTS.items():
            if not isinstance(metric.get(verdicts), list):
                continue
            for i, score in enumerate(metric[scores]):
                if score is not None and abs(score - beta) <= 2 * tolerance:
                    metric[verdicts][i] = have["metrics"][name][verdicts][i] = None
    return want, have


def _assert_close(want, have, tolerance: float, where: str) -> None:
    if isinstance(want, float) or isinstance(have, float):
        assert isinstance(have, (int, float)) and math.isclose(want, have, rel_tol=tolerance, abs_tol=tolerance), \
            f"{where}: {want} != {have}"
    elif isinstance(want, dict):
        assert isinstance(have, dict) and want.keys() == have.keys(), f"{where}: keys differ"
        for key in want:
            _assert_close(want[key], have[key], tolerance, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(have, list) and len(want) == len(have), f"{where}: lengths differ"
        for i, (a, b) in enumerate(zip(want, have)):
            _assert_close(a, b, tolerance, f"{where}[{i}]")
    else:
        assert want == have, f"{where}: {want!r} != {have!r}"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A folder served over http on 127.0.0.1 (the tests' stand-in for image URLs)."""
    root = tmp_path_factory.mktemp("served")
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def one_torch_thread():
    """Ray gives each 1-CPU worker one torch thread; the local reference runs
    with one too, so that both do the same float arithmetic."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------- no cluster needed

def test_worker_error_becomes_its_one_line():
    from capscope.batch.engine_ray import worker_errors
    from capscope.common.errors import CapscopeError, ModelUnavailable

    wrapped = RuntimeError("ray task failed\n  Traceback ...")
    wrapped.cause = ModelUnavailable("InfoMetIC: best.pth not found; set --infometic-checkpoint")
    with pytest.raises(CapscopeError) as caught, worker_errors():
        raise wrapped
    assert str(caught.value) == "ray worker: InfoMetIC: best.pth not found; set --infometic-checkpoint"
    with pytest.raises(KeyError), worker_errors():
        raise KeyError("not a user error: the traceback stays")


def test_pool_shape_from_options_and_cluster():
    from capscope.batch.engine_ray import Cluster, pool_shape
    from capscope.common.errors import CapscopeError

    class FakeRay:
        def __init__(self, **resources):
            self.resources = resources

        def cluster_resources(self):
            return self.resources

    assert pool_shape(FakeRay(CPU=16.0, GPU=4.0), Cluster()) == (4, 1.0)
    assert pool_shape(FakeRay(CPU=16.0, GPU=4.0), Cluster(gpus_per_worker=0.5)) == (8, 0.5)
    assert pool_shape(FakeRay(CPU=16.0, GPU=4.0), Cluster(device="cpu")) == (8, 0.0)
    assert pool_shape(FakeRay(CPU=2.0), Cluster()) == (1, 0.0)
    assert pool_shape(FakeRay(CPU=2.0), Cluster(workers=2)) == (2, 0.0)
    with pytest.raises(CapscopeError, match="need 3 GPUs; the cluster has 2"):
        pool_shape(FakeRay(CPU=8.0, GPU=2.0), Cluster(workers=3, gpus_per_worker=1))


def test_ray_options_need_the_ray_engine(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text("")
    code = main(["score", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                 "--workers", "2"])
    assert code == 2
    assert "--workers goes with --engine ray" in capsys.readouterr().err


def test_missing_ray_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "image": "x.png", "caption": "a cat"}) + "\n")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as it does without the package
    code = main(["score", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl"),
                 "--engine", "ray"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'pip install -e ".[ray]"' in err


@pytest.mark.slow
def test_local_run_imports_nothing_of_ray(tmp_path):
    from capscope.demo.dataset import demo_scene

    demo_scene(3, 0)[0].image().save(tmp_path / "scene.png")
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "a", "image": "scene.png", "caption": "a red circle"}) + "\n")
    script = ("import sys; from capscope.cli import main; "
              f"code = main(['score', '--input', {str(tmp_path / 'in.jsonl')!r}, '--output', "
              f"{str(tmp_path / 'out.jsonl')!r}, '--metric', 'clip-s', '--device', 'cpu', '--demo']); "
              "print('RAY' if 'ray' in sys.modules else 'NO RAY', code)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=RUN_LIMIT_S)
    assert done.stdout.strip().endswith("NO RAY 0"), done.stdout + done.stderr[-2000:]
    assert read_rows(tmp_path / "out.jsonl")[0]["error"] is None


def test_url_rows_fetched_with_their_errors(served, tmp_path):
    from capscope.batch.pipeline import Scratch, with_fetched_urls
    from capscope.metrics.scorer import RowError

    root, base = served
    (root / "feats.npz").write_bytes(b"npz bytes")
    (root / "broken.png").write_bytes(b"\x89PNG not really")
    with Scratch() as scratch:
        row = with_fetched_urls({"id": "f", "features": f"{base}/feats.npz", "caption": "a"}, scratch)
        assert Path(row["features"]).name == "feats.npz" and Path(row["features"]).read_bytes() == b"npz bytes"
        kept = Path(row["features"])
    assert not kept.exists()  # the scratch folder goes with the batch
    with Scratch() as scratch:
        with pytest.raises(RowError, match=r"cannot fetch http://127\.0\.0\.1:\d+/none\.png: HTTP 404"):
            with_fetched_urls({"image": f"{base}/none.png"}, scratch)
        with pytest.raises(RowError, match="cannot fetch http://127.0.0.1"):
            with_fetched_urls({"image": f"http://127.0.0.1:{closed_port()}/x.png"}, scratch)
        with pytest.raises(RowError, match="cannot read image http://.*broken.png"):
            with_fetched_urls({"image": f"{base}/broken.png"}, scratch)


# ---------------------------------------------------------------- on a Ray cluster

@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def world(tmp_path_factory, served):
    """Twelve demo scenes, five captions each, bad rows among them (broken JSON,
    no id, missing and corrupt images, an over-long caption, image URLs that
    answer 404 or not at all) and one scene by URL."""
    from capscope.demo.dataset import write_demo_data

    served_root, base = served
    root = tmp_path_factory.mktemp("ray-world")
    write_demo_data(root / "demo", N_IMAGES, seed=3, progress=False)
    gold = read_rows(root / "demo" / "captokeneval.jsonl")
    lines = []
    for i in range(N_IMAGES):
        image = f"demo/images/scene{i:05d}.png"
        captions = [*EXTRA_CAPTIONS, *(g["caption"] for g in gold if g["image"].endswith(f"scene{i:05d}.png"))]
        lines += [json.dumps({"id": f"s{i}-{j}", "image": image, "caption": c}) for j, c in enumerate(captions)]
    (served_root / "scene.png").write_bytes((root / "demo" / "images" / "scene00001.png").read_bytes())
    (root / "corrupt.png").write_bytes(b"\x89PNG not really")
    bad = ["{broken", json.dumps({"image": "demo/images/scene00000.png", "caption": "no id"}),
           json.dumps({"id": "missing", "image": "nope.png", "caption": "a cat"}),
           json.dumps({"id": "corrupt", "image": "corrupt.png", "caption": "a cat"}),
           json.dumps({"id": "long", "image": "demo/images/scene00002.png", "caption": "x" * 5001}),
           json.dumps({"id": "url", "image": f"{base}/scene.png", "caption": EXTRA_CAPTIONS[0]}),
           json.dumps({"id": "url-404", "image": f"{base}/none.png", "caption": "a cat"}),
           json.dumps({"id": "url-down", "image": f"http://127.0.0.1:{closed_port()}/x.png", "caption": "a cat"})]
    for k, line in enumerate(bad):
        lines.insert(5 + 8 * k, line)
    (root / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def local_rows(world):
    """The local run the Ray runs must reproduce (batches of 8, one torch thread)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = world / "local.jsonl"
        assert main(["score", "--input", str(world / "pairs.jsonl"), "--output", str(out),
                     "--batch-size", "8", *SCORE]) == 0
    finally:
        torch.set_num_threads(before)
    rows = read_rows(out)
    assert len(rows) >= 60 + 8
    return rows


@pytest.mark.slow
def test_ray_rows_identical_to_local_run(cluster, world, local_rows):
    """One worker sees the batches in the local run's order: same floats, to 1e-6."""
    out = world / "ray.jsonl"
    assert main(["score", "--input", str(world / "pairs.jsonl"), "--output", str(out), "--engine", "ray",
                 "--workers", "1", "--batch-size", "8", *SCORE]) == 0
    rows = read_rows(out)
    assert_same_rows(local_rows, rows, tolerance=1e-6)
    by_id = {r["id"]: r for r in rows}
    assert by_id["url"]["image"].endswith("/scene.png") and by_id["url"]["error"] is None
    # the same pixels and caption, by URL or by path, scored in other batches: the same numbers
    _assert_close(by_id["s1-0"]["metrics"], by_id["url"]["metrics"], 1e-6, "url")
    assert "HTTP 404" in by_id["url-404"]["error"] and "cannot fetch" in by_id["url-down"]["error"]
    for failed in (by_id["url-404"], by_id["url-down"]):  # a pair error, as compact as a missing file's
        assert failed["metrics"] == {} and failed["tokens"] == [] and failed["model"] is None
        assert failed["image"].startswith("http://127.0.0.1:")
    assert by_id["missing"]["error"] == "image not found: nope.png"
    assert sum(r["error"] is not None for r in rows) == 7


def ray_worker_pids(title: str) -> list[int]:
    """Processes of this test's Ray cluster (started by this process) running `title`."""
    import psutil

    pids = []
    for process in psutil.Process().children(recursive=True):
        try:
            if (process.cmdline() or [""])[0].startswith(title):
                pids.append(process.pid)
        except psutil.Error:
            continue
    return pids


@pytest.mark.slow
def test_killed_worker_every_id_written_once(cluster, world, local_rows):
    """The CLI as a separate driver on the cluster's address, resuming a run
    whose first rows are written; one of its two workers is killed mid-run."""
    out = world / "killed.jsonl"
    kept = 10
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in local_rows[:kept]))
    command = [sys.executable, "-m", "capscope.cli", "score", "--input", str(world / "pairs.jsonl"),
               "--output", str(out), "--engine", "ray", "--address", cluster, "--workers", "2",
               "--batch-size", "4", *SCORE]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + RUN_LIMIT_S
    killed = None
    try:
        while killed is None and driver.poll() is None and time.monotonic() < deadline:
            if len(out.read_text().splitlines()) > kept:  # workers are up and scoring
                pids = ray_worker_pids("ray::ScoreTaskActor")
                if pids:
                    written = len(out.read_text().splitlines())
                    os.kill(pids[0], signal.SIGKILL)
                    killed = pids[0]
            time.sleep(0.05)
        _, err = driver.communicate(timeout=max(1.0, deadline - time.monotonic()))
        assert killed is not None, f"no worker was seen running before the run ended: {err[-2000:]}"
        assert written < len(local_rows), "the run had finished before the kill"
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-2000:]
    rows = read_rows(out)
    ids = [r["id"] for r in rows if r["id"] is not None]
    assert len(ids) == len(set(ids))
    # a resumed run skips the ids already written; rows without an id cannot be matched and come again
    expected = local_rows[:kept] + [r for i, r in enumerate(local_rows) if i >= kept or r["id"] is None]
    # two workers see other batches than the local run: scores do not depend on batches (1e-6)
    assert_same_rows(expected, rows, tolerance=1e-6)


@pytest.mark.slow  # over 1.5 s here (a Ray start, a served app's rounds): the fast lane keeps under 5 minutes
def test_ray_reads_the_input_as_the_workers_need_it(cluster):
    """An endless input: the first results come back while the driver has read
    only the batches in flight (two per worker) and the one being cut."""
    from capscope.batch.engine_ray import IN_FLIGHT, Cluster, results

    class Echo:
        def worker(self):
            return lambda batch: [item * 10 for item in batch]

    read = []

    def endless():
        for i in itertools.count():
            read.append(i)
            yield i

    got = list(itertools.islice(results(Echo(), endless(), 4, Cluster(cluster, workers=2)), 20))
    assert got == [10 * i for i in range(20)]
    assert len(read) <= 4 * (2 * IN_FLIGHT + 6)


@pytest.mark.slow
def test_features_on_ray_same_files_and_index(cluster, world, one_torch_thread):
    lines = (world / "pairs.jsonl").read_text().splitlines()[:7]  # a broken line among them
    (world / "few.jsonl").write_text("\n".join(lines) + "\n")
    for engine in ("local", "ray"):
        extra = ["--engine", "ray", "--workers", "2"] if engine == "ray" else []
        assert main(["features", "--input", str(world / "few.jsonl"), "--out", str(world / f"feats-{engine}"),
                     "--regions", "classic", "--device", "cpu", "--demo", *extra]) in (0, 1)
    local, ray = world / "feats-local", world / "feats-ray"
    assert (ray / "pairs.jsonl").read_text() == (local / "pairs.jsonl").read_text()
    names = sorted(p.name for p in local.glob("*.npz"))
    assert names and names == sorted(p.name for p in ray.glob("*.npz"))
    for name in names:
        with np.load(local / name) as want, np.load(ray / name) as have:
            for key in want.files:
                np.testing.assert_allclose(have[key], want[key], atol=1e-6)


@pytest.mark.slow
def test_correlate_on_ray_same_figures(cluster, tmp_path, capsys):
    """FOIL layout from demo scenes: the same accuracy and figures from a pool of two workers."""
    write_foil_file(tmp_path)
    base = ["correlate", "--benchmark", "foil", "--data", str(tmp_path), "--metric", "clip-s", "infometic",
            "--device", "cpu", "--bootstrap", "20", "--json", "--batch-size", "2", "--demo"]
    results = []
    for extra in ([], ["--engine", "ray", "--workers", "2"]):
        assert main(base + extra) == 0
        results.append(json.loads(capsys.readouterr().out))
    local, ray = results
    assert ray["n"] == local["n"] == 4
    _assert_close(local["metrics"], ray["metrics"], 1e-6, "metrics")
    # which word scores lowest can turn on float noise: the demo model ties words near 0.1
    assert {k: v["n"] for k, v in ray["foil_word"].items()} == {k: v["n"] for k, v in local["foil_word"].items()}


@pytest.mark.slow
def test_bench_ray_figure_against_the_local_run(cluster, monkeypatch):
    from capscope.bench import speed

    monkeypatch.setenv("RAY_ADDRESS", cluster)  # the bench's `capscope score --engine ray` joins this cluster
    figure = speed.ray_speed("cpu", "infometic", rows=10, captions_per_image=5, batch_size=5, workers=1)
    assert figure["rows"] == 10 and figure["workers"] == 1 and figure["metric"] == "infometic"
    for engine in ("local", "ray"):
        assert figure[engine]["rows_per_s"] > 0 and figure[engine]["wall_s"] > figure[engine]["loop_s"] > 0
    assert figure["ratio"] == pytest.approx(figure["ray"]["rows_per_s"] / figure["local"]["rows_per_s"])


@pytest.mark.slow  # over 1.5 s here (a Ray start, a served app's rounds): the fast lane keeps under 5 minutes
def test_bench_ray_figure_skipped_without_ray(monkeypatch):
    from capscope.bench import speed

    monkeypatch.setitem(sys.modules, "ray", None)
    assert speed.ray_speed("cpu", "infometic", rows=10, captions_per_image=5, batch_size=5, workers=1) is None
