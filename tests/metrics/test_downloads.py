"""`capscope models download infometic|pacs`: one-line failure offline, the sha256
recorded at download and checked when the real loaders read the file."""
import hashlib
import shutil
import socket
import time
from types import SimpleNamespace

import gdown
import pytest

from capscope.cli import main
from capscope.common import checksums
from capscope.metrics import downloads, loading
from capscope.metrics.loading import ModelUnavailable


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty capscope cache; no checkpoint variables set."""
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path / "cache"))
    for variable in ("CAPSCOPE_INFOMETIC_CHECKPOINT", "CAPSCOPE_PACS_CHECKPOINT"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def online(monkeypatch):
    """Offline switches off and Drive "reached" on a loopback port that listens."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CAPSCOPE_OFFLINE", raising=False)
    server = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(downloads, "DRIVE_ADDRESS", server.getsockname()[:2])
    yield
    server.close()


def fake_drive(monkeypatch, files: dict[str, object], folder: dict[str, str] | None = None) -> list[dict]:
    """gdown's download copies files[id] to the output; download_folder lists `folder`."""
    calls = []

    def download(*, id, output, quiet, resume):
        calls.append({"id": id, "output": output, "resume": resume})
        shutil.copyfile(files[id], output)
        return output

    def download_folder(*, id, skip_download, quiet):
        assert skip_download
        return [SimpleNamespace(id=file_id, path=f"checkpoints/{name}") for name, file_id in (folder or {}).items()]

    monkeypatch.setattr(gdown, "download", download)
    monkeypatch.setattr(gdown, "download_folder", download_folder)
    return calls


@pytest.fixture
def small_checkpoint(tmp_path):
    """A real torch checkpoint in PAC-S's layout (a dict with `state_dict`), small enough to hash at once."""
    import torch

    torch.manual_seed(0)
    path = tmp_path / "small.pth"
    torch.save({"state_dict": torch.nn.Linear(8, 4).state_dict(), "epoch": 3}, path)
    return path


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tamper(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name, folder, flag, variable", [
    ("infometic", "1LZRZ-Q24_PRfpvRvwBlkldkBk9zGdTHM", "--infometic-checkpoint", "CAPSCOPE_INFOMETIC_CHECKPOINT"),
    ("pacs", "15Da_nh7CYv8xfryIdETG6dPFSqcBiqpd", "--pacs-checkpoint", "CAPSCOPE_PACS_CHECKPOINT"),
])
def test_offline_download_fails_in_one_line(cache, capsys, monkeypatch, name, folder, flag, variable):
    monkeypatch.setattr(gdown, "download", lambda **_: pytest.fail("gdown called offline"))
    assert main(["models", "download", name]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.err
    assert f"https://drive.google.com/drive/folders/{folder}" in lines[0]
    assert flag in lines[0] and variable in lines[0]


def test_clip4dm_backbones_are_listed_and_fail_offline_in_one_line(capsys):
    assert main(["models", "--json"]) == 0
    import json

    rows = [r for r in json.loads(capsys.readouterr().out) if r["component"].startswith("CLIP4DM")]
    assert [r["loads"].split(" (")[0] for r in rows] == [
        "open_clip ViT-B-32 / openai", "open_clip ViT-L-14 / openai", "open_clip ViT-H-14 / laion2b_s32b_b79k"]
    assert all("capscope models download clip4dm" in r["get"] for r in rows)
    assert main(["models", "download", "clip4dm"]) == 2  # HF_HUB_OFFLINE is set for every test
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.err
    assert "CLIP4DM: ViT-B-32/openai is not in the Hugging Face cache" in lines[0] and "--clip-pretrained FILE" in lines[0]


def test_unreachable_drive_is_detected_fast(cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CAPSCOPE_OFFLINE", raising=False)
    closed = socket.create_server(("127.0.0.1", 0))
    address = closed.getsockname()[:2]
    closed.close()  # nothing listens there any more: the connect is refused
    monkeypatch.setattr(downloads, "DRIVE_ADDRESS", address)
    monkeypatch.setattr(gdown, "download", lambda **_: pytest.fail("gdown called without a network"))
    start = time.monotonic()
    with pytest.raises(ModelUnavailable, match="Google Drive cannot be reached"):
        downloads.download_release("infometic")
    assert time.monotonic() - start < downloads.PROBE_TIMEOUT_S


def test_unknown_name_is_a_user_error(capsys):
    assert main(["models", "download", "nonesuch"]) == 2
    assert "choose from infometic, pacs" in capsys.readouterr().err


@pytest.mark.slow
def test_infometic_download_records_sha256_and_scorer_checks_it(cache, online, monkeypatch, released_checkpoint, capsys):
    from capscope.metrics.scorer import Scorer

    calls = fake_drive(monkeypatch, {"best-model-id": released_checkpoint}, folder={"best_model.pth": "best-model-id"})
    assert main(["models", "download", "infometic"]) == 0
    target = cache / "infometic" / "best_model.pth"
    assert calls == [{"id": "best-model-id", "output": str(target), "resume": True}]
    assert checksums.verify(target) == sha256(released_checkpoint)
    assert "best-model-id" in checksums.record_path(target).read_text()

    scorer = Scorer(["infometic"], device="cpu")          # the cache path, through the real loader
    assert not scorer.demo

    assert main(["models", "download", "infometic"]) == 0  # present and intact: nothing fetched
    assert len(calls) == 1
    assert "as recorded" in capsys.readouterr().out

    tamper(target)
    with pytest.raises(ModelUnavailable) as err:
        Scorer(["infometic"], device="cpu")
    message = str(err.value)
    assert message.startswith("InfoMetIC: best_model.pth: sha256") and "\n" not in message


def test_pacs_download_looks_up_unlisted_ids_and_loader_checks_sha256(cache, online, monkeypatch, small_checkpoint):
    files = {"1F-0Pma-vfJPAiDzeyl-iEdSXZIO1cDae": small_checkpoint, "large-id": small_checkpoint}
    calls = fake_drive(monkeypatch, files, folder={"openClip_ViT-L-14.pth": "large-id", "other.pth": "x"})
    paths = downloads.download_release("pacs", log=lambda _: None)
    assert [p.relative_to(cache).as_posix() for p in paths] == ["pacs/clip_ViT-B-32.pth", "pacs/openClip_ViT-L-14.pth"]
    assert [c["id"] for c in calls] == ["1F-0Pma-vfJPAiDzeyl-iEdSXZIO1cDae", "large-id"]

    path = loading.env_or_cache("CAPSCOPE_PACS_CHECKPOINT", "pacs/clip_ViT-B-32.pth")
    assert sorted(loading.load_state_file(path, "PAC-S", "--pacs-checkpoint")) == ["bias", "weight"]
    tamper(path)
    with pytest.raises(ModelUnavailable, match=r"^PAC-S: clip_ViT-B-32.pth: sha256 .* download it again$"):
        loading.load_state_file(path, "PAC-S", "--pacs-checkpoint")

    # a changed file that capscope downloaded is fetched anew and recorded again
    downloads.download_release("pacs", log=lambda _: None)
    assert [c["id"] for c in calls][2:] == ["1F-0Pma-vfJPAiDzeyl-iEdSXZIO1cDae"]
    assert checksums.verify(path) == sha256(small_checkpoint)


def test_a_users_own_file_is_left_alone(cache, online, monkeypatch, tmp_path, small_checkpoint):
    own = tmp_path / "mine.pth"
    shutil.copyfile(small_checkpoint, own)
    monkeypatch.setenv("CAPSCOPE_PACS_CHECKPOINT", str(own))
    large = cache / "pacs" / "openClip_ViT-L-14.pth"
    large.parent.mkdir(parents=True)
    shutil.copyfile(small_checkpoint, large)
    calls = fake_drive(monkeypatch, {})
    assert downloads.download_release("pacs", log=lambda _: None) == [own, large]
    assert calls == [] and not checksums.record_path(own).exists()
    assert loading.load_state_file(own, "PAC-S", "--pacs-checkpoint")   # no record: nothing to check


def test_a_missing_file_in_the_folder_names_it(cache, online, monkeypatch):
    fake_drive(monkeypatch, {}, folder={"something_else.pth": "x"})
    with pytest.raises(ModelUnavailable, match=r"^InfoMetIC: best_model.pth is not in https://drive.google.com/drive/folders/"):
        downloads.download_release("infometic", log=lambda _: None)


# ---------------------------------------------------------------- an institution's mirror, over HTTP on loopback

class Mirror:
    """An HTTP server on loopback holding files at their cache paths; it honours
    Range requests, and can cut its next answer off half way."""

    def __init__(self, files: dict[str, bytes]):
        import http.server
        import threading

        self.files, self.requests, self.cut_next = files, [], False
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = mirror.files.get(self.path.removeprefix("/base/"))
                mirror.requests.append((self.path, self.headers.get("Range")))
                if body is None:
                    self.send_error(404)
                    return
                start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers.get("Range") else 0
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                if mirror.cut_next:  # the connection dies half way through
                    mirror.cut_next = False
                    self.wfile.write(body[start:start + (len(body) - start) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[start:])

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/base"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mirror(monkeypatch, small_checkpoint, cache):
    """The mirror serves PAC-S's ViT-B-32 file; capscope expects its sha256. Drive is never reached."""
    from dataclasses import replace

    server = Mirror({"pacs/clip_ViT-B-32.pth": small_checkpoint.read_bytes()})
    monkeypatch.setenv(downloads.MIRROR_VARIABLE, server.url)
    release = downloads.RELEASES["pacs"]
    expected = replace(release.files[0], sha256=sha256(small_checkpoint))
    monkeypatch.setitem(downloads.RELEASES, "pacs", replace(release, files=(expected, *release.files[1:])))
    monkeypatch.setattr(gdown, "download", lambda **_: pytest.fail("Drive used although the mirror had the file"))
    yield server
    server.close()


def test_the_mirror_is_tried_first_and_its_file_checked(mirror, cache, small_checkpoint):
    lines = []
    paths = downloads.download_release("pacs", log=lines.append, only="clip_ViT-B-32.pth")
    assert paths == [cache / "pacs" / "clip_ViT-B-32.pth"]
    assert paths[0].read_bytes() == small_checkpoint.read_bytes()
    assert checksums.verify(paths[0]) == sha256(small_checkpoint) and mirror.url in checksums.record_path(paths[0]).read_text()
    assert mirror.requests == [("/base/pacs/clip_ViT-B-32.pth", None)] and not any(cache.rglob("*.part"))


def test_a_corrupt_file_from_the_mirror_is_refused_and_never_loaded(mirror, cache, small_checkpoint):
    body = bytearray(small_checkpoint.read_bytes())
    body[len(body) // 2] ^= 0xFF
    mirror.files["pacs/clip_ViT-B-32.pth"] = bytes(body)
    lines = []
    with pytest.raises(ModelUnavailable, match="Google Drive cannot be reached"):  # the tests are offline
        downloads.download_release("pacs", log=lines.append, only="clip_ViT-B-32.pth")
    assert any("refused and deleted" in line for line in lines)
    assert list(cache.rglob("clip_ViT-B-32.pth*")) == []
    with pytest.raises(ModelUnavailable, match="not found"):
        loading.load_state_file(cache / "pacs" / "clip_ViT-B-32.pth", "PAC-S", "--pacs-checkpoint")


def test_a_download_cut_half_way_resumes_where_it_stopped(mirror, cache, small_checkpoint):
    mirror.cut_next = True
    lines = []
    with pytest.raises(ModelUnavailable):
        downloads.download_release("pacs", log=lines.append, only="clip_ViT-B-32.pth")
    part = cache / "pacs" / "clip_ViT-B-32.pth.part"
    size = len(small_checkpoint.read_bytes())
    assert 0 < part.stat().st_size < size and any("run again to resume" in line for line in lines)
    kept = part.stat().st_size
    downloads.download_release("pacs", log=lines.append, only="clip_ViT-B-32.pth")
    assert mirror.requests[-1] == ("/base/pacs/clip_ViT-B-32.pth", f"bytes={kept}-")
    assert (cache / "pacs" / "clip_ViT-B-32.pth").read_bytes() == small_checkpoint.read_bytes()
    assert not part.exists()


@pytest.mark.slow
def test_a_scorer_fetches_the_released_infometic_on_first_use(cache, monkeypatch, released_checkpoint):
    from capscope.metrics.scorer import Scorer

    server = Mirror({"infometic/best_model.pth": released_checkpoint.read_bytes()})
    try:
        monkeypatch.setenv(downloads.MIRROR_VARIABLE, server.url)
        scorer = Scorer(["infometic"], device="cpu", demo=False)
        assert not scorer.demo and (cache / "infometic" / "best_model.pth").is_file()
        assert scorer.checkpoints["infometic"]["sha256"] == sha256(released_checkpoint)
        assert server.requests == [("/base/infometic/best_model.pth", None)]
    finally:
        server.close()
