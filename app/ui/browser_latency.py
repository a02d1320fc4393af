"""Keystroke to shading in a real browser, alone and under load.

    python -m capscope.ui.browser_latency [--keys 15] [--load-seconds 40] [--json OUT]

Starts `capscope serve` in a subprocess on a throwaway store (with whatever
models this machine has: the bundled demo model offline), opens headless
Chromium through Playwright, uploads a real photo (scikit-learn's `china.jpg`,
427 x 640) so that the server proposes its regions, and measures:

- `single`: one page; caption A is filled up to its last character (Playwright's
  fill fires no input event) and, after a typist's gap between keys (150 ms),
  the last character is pressed; the time runs until the words on the page are
  the new caption's, shaded. `back_to_back`: the same with no gap, the key
  pressed as soon as the previous one's words are shaded.
- `breakdown`: where a keystroke's time goes on the server, measured in this
  process with the same scorer and the Inspect tab's own functions (reading the
  upload, scoring, drawing the region overlay and encoding it as Gradio does);
  what is left of the browser figure is Gradio's round trip and the page's work.
- `load`: five pages typing in Inspect at once while a sixth, an annotator,
  clicks words in Annotate (each click saves a revision): p50/p95 of both, and
  every request that failed or timed out.

It reports figures and asserts no times: they depend on the machine.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from capscope.common.errors import with_type

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ADMIN, ADMIN_PASSWORD = "admin", "admin-pw-latency"
ANNOTATOR, ANNOTATOR_PASSWORD = "ann1", "pw-ann1-latency"
TYPISTS = [(f"typist{k}", f"pw-typist{k}-latency") for k in range(5)]  # five people: each has the per-user share
CAPTIONS = ["a white pagoda with a red roof among green trees",
            "an old temple on a hill under a blue sky",
            "a tall tower beside a lake with two boats",
            "a building with curved roofs and a garden in front"]
TIMEOUT_MS = 30_000
WARM_TIMEOUT_MS = 180_000  # the first keystrokes on a fresh server load the models and propose the photo's regions


def photo_path() -> Path:
    """A real photo that every capscope install has (scikit-learn ships it)."""
    import sklearn.datasets

    return Path(sklearn.datasets.__file__).parent / "images" / "china.jpg"


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict:
    return {"n": len(values), "median_ms": round(statistics.median(values), 1) if values else None,
            "p95_ms": round(percentile(values, 95), 1) if values else None,
            "max_ms": round(max(values), 1) if values else None}


# ---------------------------------------------------------------- the server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`capscope serve` in a subprocess on a throwaway data folder."""

    def __init__(self, folder: Path, extra_args: list[str] = ()):
        self.folder, self.port = folder, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "CAPSCOPE_DATA_DIR": str(folder / "data"), "CAPSCOPE_ADMIN_PASSWORD": ADMIN_PASSWORD,
                    "HF_HUB_OFFLINE": "1"}
        self.db = f"sqlite:///{folder / 'latency.db'}"
        self.extra_args = list(extra_args)

    def __enter__(self):
        import httpx

        cli = [sys.executable, "-m", "capscope.cli"]
        users = [(ADMIN, ADMIN_PASSWORD, "admin"), (ANNOTATOR, ANNOTATOR_PASSWORD, "annotator"),
                 *((name, password, "annotator") for name, password in TYPISTS)]
        add = [[*cli, "users", "add", name, "--password", password, "--role", role, "--db", self.db]
               for name, password, role in users]
        subprocess.run(add[0], env=self.env, check=True, capture_output=True)  # the first creates the database
        adding = [subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                  for argv in add[1:]]  # the others at once
        for process in adding:
            if process.wait() != 0:
                raise RuntimeError(f"capscope users add failed: {process.stderr.read().decode()[-500:]}")
        self.log = open(self.folder / "server.log", "w")
        self.process = subprocess.Popen([*cli, "serve", "--port", str(self.port), "--db", self.db,
                                         *self.extra_args], env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"capscope serve exited: {(self.folder / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/api/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError("capscope serve did not start in 3 minutes")

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def errors(self) -> list[str]:
        """Each ERROR line the server logged, and each traceback's last frame and exception."""
        lines = (self.folder / "server.log").read_text(errors="replace").splitlines()
        found = [line for line in lines if " ERROR " in line]
        for i, line in enumerate(lines):
            if line.startswith("Traceback"):
                end = next((j for j in range(i + 1, len(lines)) if lines[j] and not lines[j][0].isspace()), len(lines) - 1)
                found.append("\n".join(lines[max(i + 1, end - 4) : end + 1]))
        return found


# ---------------------------------------------------------------- the pages

async def logged_in(browser, url: str, user: str, password: str):
    # under the page's own Content-Security-Policy, as a user's browser is
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    await page.goto(url + "/")
    await page.fill("input[type=text]", user)
    await page.fill("input[type=password]", password)
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#cs-caption-a", timeout=60_000)
    return page


async def with_photo(page, photo: Path) -> None:
    await page.locator("#cs-image input[type=file]").set_input_files(str(photo))
    await page.wait_for_selector("#cs-image img", timeout=TIMEOUT_MS)


SHADED = """caption => {
    const tokens = [...document.querySelectorAll('#cs-tokens-a .token')];
    const shown = tokens.map(t => t.innerText).join('').replace(/\\s/g, '');
    return shown === caption.replace(/\\s/g, '') && tokens.some(t => t.style.backgroundColor);
}"""


async def keystroke_ms(page, caption: str, pause_s: float = 0.0, timeout_ms: int = TIMEOUT_MS) -> float:
    """Fill caption A but its last character, wait `pause_s` (the gap between a
    typist's keys), press the last one, and time until the page shows the whole
    caption's words, shaded."""
    await page.fill("#cs-caption-a textarea", caption[:-1])
    await asyncio.sleep(pause_s)
    started = await page.evaluate("() => performance.now()")
    await page.press("#cs-caption-a textarea", caption[-1])
    await page.wait_for_function(SHADED, arg=caption, timeout=timeout_ms, polling="raf")
    return await page.evaluate("() => performance.now()") - started


async def shown_words(page) -> str:
    """The words caption A's shading shows now (what a timed-out keystroke left on the page)."""
    try:
        return await page.evaluate("() => [...document.querySelectorAll('#cs-tokens-a .token')]"
                                   ".map(t => t.innerText).join(' ')")
    except Exception as err:  # the page itself is gone
        return f"(unreadable: {type(err).__name__})"


def edits(n: int, offset: int = 0) -> list[str]:
    """n captions, each a different edit of one of CAPTIONS (so no two in a row are equal)."""
    words = ["red", "green", "small", "large", "quiet", "busy", "bright", "dark"]
    out = []
    for i in range(offset, offset + n):
        base = CAPTIONS[i % len(CAPTIONS)].split()
        base.insert(1, words[i % len(words)])
        out.append(" ".join(base) + ("." if i % 2 else ""))
    return out


TYPING_GAP_S = 0.15  # between two keys of a typist at about 80 words a minute


async def single(browser, url: str, photo: Path, keys: int) -> dict[str, list[float]]:
    """Keystroke timings with a typist's gap before each key, and back to back
    (the key pressed as soon as the previous one's words are shaded)."""
    page = await logged_in(browser, url, ADMIN, ADMIN_PASSWORD)
    await with_photo(page, photo)
    for caption in edits(2, offset=100):  # warm: regions proposed, model and caches loaded
        await keystroke_ms(page, caption, timeout_ms=WARM_TIMEOUT_MS)
    timings = {"typing": [await keystroke_ms(page, caption, TYPING_GAP_S) for caption in edits(keys)],
               "back_to_back": [await keystroke_ms(page, caption) for caption in edits(keys, offset=50)]}
    await page.context.close()
    return timings


async def typist(page, until: float, offset: int, timings: list, failures: list) -> None:
    i = offset
    while time.monotonic() < until:
        caption = edits(1, offset=i)[0]
        i += 1
        try:
            timings.append(await keystroke_ms(page, caption, TYPING_GAP_S))
        except Exception as err:  # a timeout is a failed request as the user sees it
            failures.append(f"inspect: {with_type(err, 200)}; "
                            f"waited for {caption!r}, the page shows {await shown_words(page)!r}")
        await asyncio.sleep(0.2)  # a user's pause between edits


async def annotator(page, until: float, timings: list, failures: list) -> None:
    await page.get_by_role("tab", name="Annotate").click()
    tokens = page.locator("#cs-annotate-tokens .token")
    await tokens.first.wait_for(timeout=TIMEOUT_MS)
    await page.wait_for_function("document.querySelector('#cs-saved').innerText.includes('revision')",
                                 timeout=TIMEOUT_MS)
    count = await tokens.count()
    i = 0
    while time.monotonic() < until:
        before = await page.inner_text("#cs-saved")
        revision = int(before.split("revision")[1].split()[0])
        started = await page.evaluate("() => performance.now()")
        await tokens.nth(i % count).click()
        i += 1
        try:
            await page.wait_for_function(
                "r => document.querySelector('#cs-saved').innerText.includes('revision ' + r + ' ')",
                arg=revision + 1, timeout=TIMEOUT_MS, polling="raf")
            timings.append(await page.evaluate("() => performance.now()") - started)
        except Exception as err:
            failures.append(f"annotate: {with_type(err, 200)}")
        await asyncio.sleep(0.5)


async def load(browser, url: str, photo: Path, seconds: float, typists: int = 5) -> dict:
    pages = [await logged_in(browser, url, name, password) for name, password in TYPISTS[:typists]]
    warmup_retries = 0
    for k, page in enumerate(pages):
        await with_photo(page, photo)
        wait = WARM_TIMEOUT_MS if k == 0 else 2 * TIMEOUT_MS  # the first page's keystroke loads the models
        try:
            await keystroke_ms(page, edits(1, offset=200)[0], timeout_ms=wait)
        except Exception:  # warming up, not measured: a page left on an older caption types once more
            warmup_retries += 1
            await keystroke_ms(page, edits(1, offset=201)[0], timeout_ms=WARM_TIMEOUT_MS)
    labeller = await logged_in(browser, url, ANNOTATOR, ANNOTATOR_PASSWORD)
    typed, saved, failures = [], [], []
    until = time.monotonic() + seconds
    await asyncio.gather(*(typist(p, until, 37 * k, typed, failures) for k, p in enumerate(pages)),
                         annotator(labeller, until, saved, failures))
    await asyncio.sleep(1.0)  # let the last debounced re-scores finish before the pages go
    for page in [*pages, labeller]:
        await page.context.close()
    return {"typists": typists, "seconds": seconds, "keystroke_to_shading": summary(typed),
            "label_save": summary(saved), "failures": failures, "warmup_retries": warmup_retries}


async def browser_figures(url: str, photo: Path, keys: int, load_seconds: float) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else None,
                                          args=CHROMIUM_ARGS)
        timings = await single(browser, url, photo, keys)
        figures = {"single": {**summary(timings["typing"]), "typing_gap_ms": TYPING_GAP_S * 1000,
                              "timings_ms": [round(t, 1) for t in timings["typing"]],
                              "back_to_back": summary(timings["back_to_back"])}}
        if load_seconds > 0:
            figures["load"] = await load(browser, url, photo, load_seconds)
        await browser.close()
    return figures


# ---------------------------------------------------------------- the server side, in this process

def breakdown(photo: Path, repeats: int = 7) -> dict:
    """Milliseconds of each server-side step of one keystroke, medians over `repeats` edits."""
    import io

    from PIL import Image

    from capscope.ui import inspect_scoring, inspect_views
    from capscope.ui.caption_shading import shaded_tokens, token_metrics
    from capscope.metrics.images import read_image
    from capscope.server.scoring import Models

    models = Models()
    image = read_image(photo)
    shown = next(m for m in token_metrics() if m in models.available)
    captions = edits(repeats + 1, offset=300)
    steps: dict[str, list[float]] = {}

    def timed(name, fn):
        started = time.perf_counter()
        out = fn()
        steps.setdefault(name, []).append((time.perf_counter() - started) * 1000)
        return out

    inspect_scoring.score_caption(models, image, captions[-1], "", None)  # regions proposed, caches warm
    for caption in captions[:-1]:
        timed("read the upload (Gradio's preprocess: open and decode the file)",
              lambda: Image.open(photo).convert("RGB"))
        row = timed("score every loaded metric", lambda: inspect_scoring.score_caption(models, image, caption, "", None))
        timed(f"score the shown metric only ({shown})",
              lambda: models.score(image, caption, metrics=[shown]))
        drawn = timed("draw the region overlay", lambda: inspect_views.overlay(image, row, shown))
        timed("encode the overlay (Gradio's postprocess: JPEG file, webp before)",
              lambda: drawn.save(io.BytesIO(), format="jpeg"))
        timed("shade the words, summary, table", lambda: (shaded_tokens(row, shown),
                                                           inspect_views.summary_markdown(row, shown),
                                                           inspect_views.scores_rows(row, None)))
    return {"metric_shown": shown, "metrics_loaded": models.available, "regions": len(row["regions"]),
            "steps_ms": {k: round(statistics.median(v), 1) for k, v in steps.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=15, help="keystrokes timed on one page")
    parser.add_argument("--load-seconds", type=float, default=40, help="0: no load test")
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    photo = photo_path()
    figures: dict = {"photo": photo.name}
    with tempfile.TemporaryDirectory() as folder, Server(Path(folder)) as server:
        try:
            figures.update(asyncio.run(browser_figures(server.url, photo, args.keys, args.load_seconds)))
        except Exception as err:  # a wait that timed out says little alone: the server's log says why
            log = (Path(folder) / "server.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{type(err).__name__}: {str(err)[:300]}\n"
                               f"--- capscope serve's log, last lines:\n{log}") from err
        figures["server_errors"] = server.errors()
    if not args.no_breakdown:
        figures["breakdown"] = breakdown(photo)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
