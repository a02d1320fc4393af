"""The segmenter's look-ahead for every user of a dataset someone segments in, its bound on the
embedding thread's time, and prompts refused against the stored image size before any embedding."""
import threading
import time

import pytest
from fastapi.testclient import TestClient

from annotation_support import sqlite_url
from capscope.annotation.importer import ImportOptions, import_captokeneval
from capscope.annotation.users import add_user
from capscope.metrics.click_segmenters import ClassicClickSegmenter
from capscope.server import segmenting
from capscope.server.segmenting import LOOK_AHEAD, ClickService
from capscope.demo import click_targets

ANN, BOB, CAROL = ("ann", "ann-password-1"), ("bob", "bob-password-1"), ("carol", "carol-password-1")


class CountingSegmenter(ClassicClickSegmenter):
    def __init__(self, delay: float = 0.0):
        super().__init__()
        self.embedded, self.delay, self.lock = [], delay, threading.Lock()

    def embed(self, image):
        time.sleep(self.delay)
        with self.lock:
            self.embedded.append((time.monotonic(), image.size))
        return super().embed(image)


@pytest.fixture()
def served(tmp_path):
    path, _targets = click_targets.write_scenes(tmp_path, n=6, seed=5)
    from capscope.db import Store
    from capscope.server.api import create_app

    store = Store(sqlite_url(tmp_path))
    import_captokeneval(store, path, ImportOptions(dataset="shapes", annotators_per_item=1, progress=False))
    for name, password in (ANN, BOB, CAROL):
        add_user(store, name, password)
    segmenter = CountingSegmenter()
    service = ClickService(segmenter=segmenter)
    client = TestClient(create_app(store=store, click_service=service), raise_server_exceptions=False)
    client.segmenter, client.service = segmenter, service
    yield client
    service.close()


def settle(service):
    """Wait until the embedding thread has nothing queued or running."""
    for _ in range(500):
        with service._embedder._wake:
            idle = not service._embedder._queue
        if idle and all(f.done() for f, _ in service._kept.values()):
            return
        time.sleep(0.01)


def test_a_bad_point_on_a_new_image_is_422_before_any_embedding(served):
    item = served.get("/api/items/next", auth=ANN).json()
    url = f"/api/items/{item['item_id']}/segment"
    for body in ({"points": [[item["width"], 1, 1]]}, {"points": [[1, -0.5, 1]]},
                 {"box": [0, 0, item["width"] + 1, 4]}, {"points": []}):
        assert served.post(url, auth=ANN, json=body).status_code == 422, body
    settle(served.service)
    assert served.segmenter.embedded == []
    assert served.post(url, auth=ANN, json={"points": [[1, 1, 1]]}).status_code == 200
    assert len(served.segmenter.embedded) == 1


def test_everyone_in_a_segmenting_dataset_gets_a_look_ahead(served, monkeypatch):
    monkeypatch.setattr(served.service._embedder, "share", 1.0)  # no rest between look-aheads here
    first = served.get("/api/items/next", auth=ANN).json()
    served.get("/api/items/next", auth=BOB).json()
    settle(served.service)
    assert served.segmenter.embedded == []  # nobody segments in this dataset yet: no work ahead
    assert served.post(f"/api/items/{first['item_id']}/segment", auth=ANN, json={"points": [[2, 2, 1]]}).status_code == 200
    settle(served.service)
    before = len(served.segmenter.embedded)
    carols = served.get("/api/items/next", auth=CAROL).json()  # carol never clicked: she gets one all the same
    settle(served.service)
    assert len(served.segmenter.embedded) == before + 1
    assert carols["image_id"] != first["image_id"] and carols["image_id"] in served.service._kept


def test_look_aheads_take_at_most_their_share_of_the_embedding_thread(tmp_path):
    """Look-aheads of many users, each embedding 0.1 s: with share 0.5 the thread rests as long
    as it worked between two; a click's embedding does not wait for the rest."""
    from PIL import Image

    segmenter = CountingSegmenter(delay=0.1)
    service = ClickService(segmenter=segmenter)
    paths = []
    for i in range(8):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.new("RGB", (16, 16), (i * 20, 0, 0)).save(paths[-1])
    started = time.monotonic()
    for i in range(6):
        service.embedding(i, paths[i], f"user{i}", LOOK_AHEAD)
    time.sleep(0.55)
    done = len(segmenter.embedded)
    assert 1 <= done <= 4, done  # 0.1 s work, 0.1 s rest: about 3 in 0.55 s (6 without the bound)
    clicked = time.monotonic()
    service.embedding(7, paths[7], "zoe").result(timeout=5)  # a click: at once, not after the rest
    assert time.monotonic() - clicked < 0.1 + 0.1 + 0.15  # at most one running look-ahead, then its own
    gaps = [b[0] - a[0] for a, b in zip(segmenter.embedded, segmenter.embedded[1:3])]
    assert all(gap >= 0.19 for gap in gaps), gaps
    assert segmenting.LOOK_AHEAD_SHARE <= 0.5 and started
    service.close()
