"""Helpers for the UI tests: a demo-format checkpoint built here (random
weights, the real loading path), a seeded store, a served app."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

ARTIFACTS = Path(__file__).parent / "artifacts"     # screenshots and timings of the browser tests
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DEMO_CLIP_CONFIG = Path(__file__).resolve().parent.parent / "app" / "demo" / "capscope-demo-clip.json"
TINY_CLIP = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "head_width": 32, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 1},
}


def make_demo_checkpoint(path: Path, full_size: bool = False) -> Path:
    """A capscope-infometic checkpoint as the demo model is shipped: tiny by
    default, or the demo model's real size (for timings)."""
    import torch

    from capscope.metrics.infometic import HeadConfig, InfoMetIC, capscope_checkpoint
    from capscope.metrics.model_sources import create_clip_from_config

    torch.manual_seed(0)
    if full_size:
        config, name = json.loads(DEMO_CLIP_CONFIG.read_text()), "capscope-demo-clip-test"
        head = HeadConfig(width=128, heads=4, intra_layers=4, inter_layers=2, text_positions=True)
        crop = {"margin": 0.15, "canvas": 64}
    else:
        config, name = TINY_CLIP, "tiny-test-clip"
        head = HeadConfig(width=64, heads=2, intra_layers=1, inter_layers=1, text_positions=True)
        crop = {"margin": 0.15, "canvas": 32}
    model = InfoMetIC(create_clip_from_config(name, config), head)
    checkpoint = capscope_checkpoint(model, name, config, crop=crop)
    checkpoint["state_dict"] = {k: v.half() for k, v in checkpoint["state_dict"].items()}
    torch.save(checkpoint, path)
    return path


def use_demo_checkpoint(patch, root: Path) -> None:
    """Point the scorer's demo fallback at a checkpoint made here, with its own cache folder."""
    patch.setenv("CAPSCOPE_DEMO_MODEL", str(make_demo_checkpoint(root / "demo.pt")))
    patch.setenv("CAPSCOPE_CACHE", str(root / "cache"))
    patch.delenv("CAPSCOPE_NO_DEMO", raising=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """An ASGI app served by uvicorn in a thread."""

    def __init__(self, app, port: int | None = None, **options):
        """`options`: more of uvicorn.Config's (its forwarded headers, for one)."""
        import uvicorn

        self.port = port or free_port()
        self.https = "ssl_certfile" in options
        self.url = f"{'https' if self.https else 'http'}://127.0.0.1:{self.port}"
        # gradio_client's heartbeat streams stay open until the process ends: past a second, stop waiting for them
        options.setdefault("timeout_graceful_shutdown", 1)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    **options))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        import httpx

        self.thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/api/health", timeout=2, verify=not self.https).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def launched_chromium():
    """Headless Debian Chromium through Playwright, for a pytest fixture to yield
    from; skips the test when Chromium is not installed."""
    import pytest

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


def logged_in_page(chromium, served, user, password, bypass_csp: bool = False):
    """A new page (a context of its own: its own login) signed in to the served app, under the page's
    own Content-Security-Policy (Playwright's string waits and evaluations run there too);
    `bypass_csp` sets the policy aside, for a look at what the page would do without it."""
    page = chromium.new_page(viewport={"width": 1400, "height": 1000}, bypass_csp=bypass_csp,
                             ignore_https_errors=served.url.startswith("https"))
    page.goto(served.url + "/")
    page.fill("input[type=text]", user)
    page.fill("input[type=password]", password)
    page.keyboard.press("Enter")
    page.wait_for_selector("#cs-caption-a", timeout=30_000)
    return page


def shot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def scored(id_, image, caption, verdicts, overall):
    """A row as `capscope score` writes it, InfoMetIC only, one token per space-separated word."""
    words, tokens, start = caption.split(), [], 0
    for w in words:
        tokens.append({"text": w, "start": start, "end": start + len(w), "semantic": True})
        start += len(w) + 1
    return {"id": id_, "image": image, "caption": caption, "tokens": tokens, "regions": [], "error": None,
            "metrics": {"infometic": {"scores": {"overall": overall}, "token_scores": [0.1] * len(words),
                                      "token_correct": verdicts, "region_scores": [], "region_mentioned": []}}}


def served_scenes(root: Path, *, scenes: int, seed: int, dataset: str, annotators_per_item: int, users,
                  **app_options):
    """A served app (API and UI) over demo scenes whose named shapes have no region (the click
    study's), with these users; yields the server with `store`, `targets` and `root` on it."""
    import pytest

    from capscope.annotation.importer import ImportOptions, import_captokeneval
    from capscope.annotation.users import add_user
    from capscope.db import Store
    from capscope.demo import click_targets
    from capscope.server.api import create_app
    from capscope.ui.page import mount_ui

    patch = pytest.MonkeyPatch()
    for name, value in {"CAPSCOPE_DATA_DIR": root / "data", "CAPSCOPE_CACHE": root / "cache",
                        "HF_HUB_OFFLINE": "1", "CAPSCOPE_NO_SEED": "1"}.items():
        patch.setenv(name, str(value))
    path, targets = click_targets.write_scenes(root, n=scenes, seed=seed)
    store = Store(f"sqlite:///{root / 'ui.db'}")
    import_captokeneval(store, path, ImportOptions(dataset=dataset, annotators_per_item=annotators_per_item,
                                                   progress=False))
    for user in users:
        add_user(store, *user)
    with Served(mount_ui(create_app(store=store, **app_options))) as server:
        server.store, server.targets, server.root = store, targets, root
        yield server
    patch.undo()


def click_at(page, item, x, y):
    """Click image pixel (x, y) on Annotate's displayed (enlarged, fitted) picture."""
    image = page.locator("#cs-annotate-image img")
    shown = image.bounding_box()
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    scale = natural[0] / item["width"]
    fit = min(shown["width"] / natural[0], shown["height"] / natural[1])
    left = shown["x"] + (shown["width"] - natural[0] * fit) / 2
    top = shown["y"] + (shown["height"] - natural[1] * fit) / 2
    page.mouse.click(left + x * scale * fit, top + y * scale * fit)


def wait_for(page, condition: str, failed_shot: str):
    """Wait for a condition of the page; on a timeout, a screenshot and a failure that says
    what Annotate's status line says."""
    from playwright.sync_api import TimeoutError as PageTimeout

    try:
        page.wait_for_function(condition, timeout=30_000)
    except PageTimeout:
        shot(page, failed_shot)
        raise AssertionError(f"{condition} did not hold; the page says: {page.inner_text('#cs-saved')}") from None
