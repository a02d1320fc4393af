"""Bad input through the web UI meets the same rule as through the REST API.
On eb11b64 a 17.5 KB PNG of 12000x12000 pixels scored in Inspect took the
server from 1.25 to 4.05 GB for 7.6 s (the UI decoded it before capscope's
limit), and the REST API's 1 MiB body limit also capped UI uploads, so
Inspect could not take an ordinary photo."""
from __future__ import annotations

import io
import threading
import time

import numpy as np
import psutil
from PIL import Image

from capscope.common import limits
from security_support import ANN, file_data, fn_index, gradio_config, gradio_event, ui_login, uploaded


def png_bomb(side: int = 12_000) -> bytes:
    picture = io.BytesIO()
    Image.new("L", (side, side), 255).save(picture, "PNG", optimize=True)
    return picture.getvalue()


def photo_jpeg(width: int = 3000, height: int = 2000) -> bytes:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    picture = io.BytesIO()
    Image.fromarray(pixels).save(picture, "JPEG", quality=90)
    return picture.getvalue()


class PeakMemory:
    """The process's peak resident memory over a block, sampled every 20 ms."""

    def __enter__(self):
        self.process, self.stop = psutil.Process(), threading.Event()
        self.start = self.peak = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.02)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    @property
    def grown_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def score_in_inspect(client, path: str, caption: str = "a red circle") -> dict:
    index = fn_index(gradio_config(client), "score_a")
    return gradio_event(client, index, [file_data(path), caption, "", "infometic", None, None])


def test_a_pixel_bomb_is_refused_before_it_is_decoded(team):
    client = ui_login(team, ANN)
    bomb = png_bomb()
    assert len(bomb) < 300_000 and 12_000 ** 2 > limits.MAX_IMAGE_PIXELS
    path = uploaded(client, "bomb.png", bomb)
    score_in_inspect(client, uploaded(client, "warm.png", png_bomb(64)))  # the model is loaded first
    with PeakMemory() as memory:
        answer = score_in_inspect(client, path)
    assert answer["success"], answer
    overlay, summary = answer["output"]["data"][1], answer["output"]["data"][3]
    assert overlay is None  # nothing drawn for a refused image
    assert "pixels" in summary and f"limit {limits.MAX_IMAGE_PIXELS}" in summary.replace("(", "").replace(")", ""), summary
    assert memory.grown_mb < 150, f"the server grew by {memory.grown_mb:.0f} MB"


def test_an_ordinary_photo_is_taken_and_an_oversize_file_refused(team):
    client = ui_login(team, ANN)
    photo = photo_jpeg()
    assert 2**20 < len(photo) < 25 * 2**20
    answer = score_in_inspect(client, uploaded(client, "photo.jpg", photo), "a photo of noise")
    assert answer["success"] and answer["output"]["data"][1] is not None, answer
    oversize = client.post("/gradio_api/upload", files={"files": ("big.jpg", b"\xff" * (26 * 2**20))})
    assert oversize.status_code in (400, 413), oversize.status_code


def test_a_file_that_is_not_an_image_is_one_line(team):
    client = ui_login(team, ANN)
    answer = score_in_inspect(client, uploaded(client, "notes.png", b"these are not pixels"))
    assert answer["success"], answer
    summary = answer["output"]["data"][3]
    assert summary.startswith("**Cannot score:**") and "notes.png" in summary and "/tmp" not in summary
    assert "Traceback" not in summary and "\n" not in summary
