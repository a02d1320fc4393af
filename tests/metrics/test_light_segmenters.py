"""The light click segmenters (MobileSAM through ultralytics, SAM 2.1 hiera-tiny): their real
architectures with random weights (masks mean nothing; the plumbing is tested), their weights
loaded through the real path, fetched over HTTP on first use with the sha256 recorded and
checked, and `auto`'s choice among what is here."""
import hashlib
import http.server
import threading
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from capscope.metrics import click_segmenters, click_weights
from capscope.metrics.click_segmenters import auto_choice, make_click_segmenter, weights_here
from capscope.metrics.click_weights import Weights
from capscope.metrics.loading import ModelUnavailable, read_checkpoint

VARIABLES = ("CAPSCOPE_SAM_CHECKPOINT", "CAPSCOPE_SAM2_CHECKPOINT", "CAPSCOPE_SAM2_TINY_CHECKPOINT",
             "CAPSCOPE_MOBILESAM_WEIGHTS")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path / "cache"))
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def server():
    """A loopback HTTP server for weights files: path -> bytes."""
    files = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    httpd.files, httpd.url = files, f"http://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def small_weights_file(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"model": {"w": torch.arange(6.0)}}, path)
    return path.read_bytes()


def test_weights_fetched_on_first_use_recorded_and_checked_on_load(cache, server, tmp_path, monkeypatch):
    body = small_weights_file(tmp_path)
    server.files["/w/tiny.pt"] = body
    weights = Weights("SAM 2 tiny", f"{server.url}/w/tiny.pt", "CAPSCOPE_SAM2_TINY_CHECKPOINT", "sam2/tiny.pt",
                      hashlib.sha256(body).hexdigest())
    assert not weights.here()
    path = weights.path()
    assert path == cache / "sam2" / "tiny.pt" and path.read_bytes() == body and weights.here()
    assert torch.equal(read_checkpoint(path, "SAM 2 tiny", weights_only=True)["model"]["w"], torch.arange(6.0))
    del server.files["/w/tiny.pt"]
    assert weights.path() == path  # kept: not fetched again
    path.write_bytes(body[:-8] + b"changed!")  # the file changed on disk after its download: refused
    with pytest.raises(ModelUnavailable, match="sha256"):
        read_checkpoint(path, "SAM 2 tiny", weights_only=True)


def test_a_download_with_another_sha256_is_refused_and_deleted(cache, server, tmp_path):
    server.files["/w/tiny.pt"] = small_weights_file(tmp_path)
    weights = Weights("SAM 2 tiny", f"{server.url}/w/tiny.pt", "CAPSCOPE_SAM2_TINY_CHECKPOINT", "sam2/tiny.pt",
                      "0" * 64)
    with pytest.raises(ModelUnavailable, match="refused and deleted"):
        weights.path()
    assert not weights.here() and not list((cache / "sam2").iterdir())


def test_offline_the_error_names_the_variable(cache, server, monkeypatch):
    weights = replace(click_weights.SAM2_WEIGHTS["tiny"], url=f"{server.url}/missing/sam2.1_hiera_tiny.pt")
    monkeypatch.setitem(click_weights.SAM2_WEIGHTS, "tiny", weights)
    with pytest.raises(ModelUnavailable, match="CAPSCOPE_SAM2_TINY_CHECKPOINT"):
        make_click_segmenter("sam2-tiny")
    monkeypatch.setenv("CAPSCOPE_MOBILESAM_WEIGHTS", str(cache / "nowhere.pt"))
    with pytest.raises(ModelUnavailable, match="not found"):
        make_click_segmenter("mobilesam")


def test_auto_picks_the_best_segmenter_whose_weights_are_here_and_never_downloads(cache, tmp_path, monkeypatch):
    from capscope.metrics import downloads

    monkeypatch.setattr(downloads, "fetch_http", lambda *a, **k: pytest.fail("auto downloaded"))
    assert auto_choice() == "classic" and make_click_segmenter("auto").fallback
    mobile = cache / "ultralytics" / "mobile_sam.pt"
    mobile.parent.mkdir(parents=True)
    mobile.write_bytes(b"x")
    assert weights_here("mobilesam") and auto_choice() == "mobilesam"
    tiny = tmp_path / "tiny.pt"
    tiny.write_bytes(b"x")
    monkeypatch.setenv("CAPSCOPE_SAM2_TINY_CHECKPOINT", str(tiny))
    assert auto_choice() == "sam2-tiny"
    small = cache / "sam2" / "sam2.1_hiera_small.pt"
    small.parent.mkdir(parents=True)
    small.write_bytes(b"x")
    assert auto_choice() == "sam2"
    rows = {row["component"]: row for row in click_segmenters.component_rows()}
    assert rows["SAM 2 tiny"]["present"] and rows["MobileSAM clicks"]["present"] and rows["click auto"]["get"] == "now: sam2"


def picture():
    pixels = np.full((80, 96, 3), 225, np.uint8)
    pixels[20:50, 30:70] = (200, 40, 40)
    return Image.fromarray(pixels)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mobilesam", "sam2-tiny"])
def test_light_segmenters_keep_one_embedding_and_answer_clicks_and_boxes(kind):
    """Real architecture, random weights: a click reuses the image's embedding (no encoder
    pass), three candidates best first for a lone click, one after a second click (the first
    click's logits fed back), masks at the image's size; a box alone works too."""
    from capscope.metrics.click_segmenters import MobileSamClickSegmenter, Sam2ClickSegmenter

    segmenter = MobileSamClickSegmenter.with_random_weights() if kind == "mobilesam" \
        else Sam2ClickSegmenter(random_weights=True, size="tiny")
    assert "random weights" in segmenter.name and not segmenter.fallback
    model = segmenter.model if kind == "mobilesam" else segmenter.predictor.model
    embedding = segmenter.embed(picture())
    assert (embedding.width, embedding.height) == (96, 80)
    calls = []
    hook = model.image_encoder.register_forward_hook(lambda *a: calls.append(1))
    first = segmenter.candidates(embedding, [(40, 30, 1)])
    fed_back = dict(embedding.previous)
    second = segmenter.candidates(embedding, [(40, 30, 1), (5, 5, 0)])
    boxed = segmenter.predict(embedding, [], box=(30, 20, 70, 50))
    hook.remove()
    assert calls == []
    scores = [score for _, score in first]
    assert len(first) == 3 and scores == sorted(scores, reverse=True) and len(second) == 1
    assert list(fed_back) == [(((40, 30, 1),), None)]
    assert all(mask.shape == (80, 96) and mask.dtype == bool for mask, _ in first + second + [boxed])


@pytest.mark.slow
def test_mobilesam_loads_its_weights_through_the_real_path(cache, tmp_path, monkeypatch):
    """A MobileSAM state dict saved as ultralytics' mobile_sam.pt is (a plain dict of tensors) loads
    into the model the segmenter builds; a file of another shape is a one-line ModelUnavailable."""
    from ultralytics.models.sam.build import build_mobile_sam

    from capscope.metrics.click_segmenters import MobileSamClickSegmenter

    torch.manual_seed(0)
    saved = build_mobile_sam(None).state_dict()
    path = tmp_path / "mobile_sam.pt"
    torch.save(saved, path)
    monkeypatch.setenv("CAPSCOPE_MOBILESAM_WEIGHTS", str(path))
    segmenter = make_click_segmenter("mobilesam")
    assert isinstance(segmenter, MobileSamClickSegmenter) and segmenter.name == "MobileSAM"
    loaded = segmenter.model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())
    torch.save({"image_encoder.wrong": torch.zeros(2)}, path)
    with pytest.raises(ModelUnavailable, match="does not fit MobileSAM"):
        make_click_segmenter("mobilesam")


@pytest.mark.slow
def test_sam2_tiny_loads_its_weights_through_the_real_path(cache, tmp_path, monkeypatch):
    from sam2.build_sam import build_sam2

    torch.manual_seed(0)
    model = build_sam2(click_weights.SAM2_CONFIGS["tiny"], None, device="cpu", mode="eval")
    path = tmp_path / "sam2.1_hiera_tiny.pt"
    torch.save({"model": model.state_dict()}, path)
    monkeypatch.setenv("CAPSCOPE_SAM2_TINY_CHECKPOINT", str(path))
    segmenter = make_click_segmenter("sam2-tiny")
    assert segmenter.name == "SAM 2.1 hiera-tiny"
    loaded = segmenter.predictor.model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    monkeypatch.setenv("CAPSCOPE_SAM2_TINY_CHECKPOINT", str(click_weights.SAM2_WEIGHTS["small"].cached()))
    with pytest.raises(ModelUnavailable, match="not found"):
        make_click_segmenter("sam2-tiny")
