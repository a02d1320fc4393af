"""The click segmenter is warmed as the app is made (issue 71: the first click to
segment after a start took 3.3 s, later ones 116-217 ms): loaded and run once on
a small picture in a background thread, without any click, while start-up and
requests go on; a segmenter that cannot load is one warning, no traceback."""
import logging
import threading
import time

from fastapi.testclient import TestClient

import capscope.server.segmenting as segmenting
from annotation_support import sqlite_url
from capscope.common.errors import CapscopeError
from capscope.db import Store
from capscope.metrics.click_segmenters import ClassicClickSegmenter
from capscope.server.api import create_app


def test_the_segmenter_is_loaded_and_run_once_shortly_after_the_app_is_made_without_a_click(tmp_path):
    app = create_app(store=Store(sqlite_url(tmp_path)), segmenter="classic")
    clicks = app.state.clicks
    assert clicks.warmed.wait(60), "no warm-up within 60 s"
    assert clicks._segmenter is not None and clicks.warm_up_ms is not None
    assert not clicks._kept  # the warm-up's picture is not kept among the items' embeddings
    clicks.close()


def test_start_up_and_requests_do_not_wait_for_the_warm_up(tmp_path, monkeypatch):
    release, loads = threading.Event(), []

    def slow_load(name, device):  # a segmenter whose load takes as long as the test says
        loads.append(name)
        release.wait(30)
        return ClassicClickSegmenter()

    monkeypatch.setattr(segmenting, "make_click_segmenter", slow_load)
    store = Store(sqlite_url(tmp_path))
    started = time.perf_counter()
    app = create_app(store=store, segmenter="classic")
    made_s = time.perf_counter() - started
    with TestClient(app) as client:
        assert client.get("/api/health").status_code == 200  # while the segmenter is still loading
        assert made_s < 5 and not app.state.clicks.warmed.is_set()
        deadline = time.monotonic() + 10
        while not loads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loads == ["classic"]  # the load began without any click
        release.set()
        assert app.state.clicks.warmed.wait(30)
    assert loads == ["classic"]  # loaded once
    app.state.clicks.close()


def test_a_segmenter_that_cannot_load_is_one_warning_and_the_first_click_tries_again(tmp_path, monkeypatch,
                                                                                      caplog):
    def missing(name, device):
        raise CapscopeError("SAM: weights not found; pass --sam-checkpoint FILE")

    monkeypatch.setattr(segmenting, "make_click_segmenter", missing)
    with caplog.at_level(logging.INFO):
        app = create_app(store=Store(sqlite_url(tmp_path)), segmenter="sam")
        assert app.state.clicks.warmed.wait(30)
    said = [r for r in caplog.records if r.name == segmenting.__name__ and r.levelno >= logging.WARNING]
    assert len(said) == 1 and "weights not found" in said[0].getMessage() and not said[0].exc_info
    assert app.state.clicks._segmenter is None  # nothing half-loaded: a click loads it again (and says why)
    app.state.clicks.close()


def test_a_given_click_service_is_not_warmed_unless_asked(tmp_path):
    service = segmenting.ClickService(segmenter=ClassicClickSegmenter())
    create_app(store=Store(sqlite_url(tmp_path)), click_service=service)
    assert not service.warmed.wait(0.5)
    service.close()
