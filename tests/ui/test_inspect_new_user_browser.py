"""Inspect as a new user meets it, in a real browser (issue 71): a caption that
is pasted or inserted by a tool is scored like a typed one; a picture that cannot
be read is said at once, beside the picture; the score table and the colour bar
say what they show."""
import io

import numpy as np
import pytest
from PIL import Image

from capscope.annotation.users import add_user
from capscope.server.api import create_app
from capscope.ui.page import mount_ui
from ui_support import Served, launched_chromium, logged_in_page, shot, use_demo_checkpoint

USER = ("inspector", "inspector-password-1")
browser = pytest.mark.browser


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect-new-user")
    patch = pytest.MonkeyPatch()
    for name, value in {"CAPSCOPE_DATA_DIR": root / "data", "HF_HUB_OFFLINE": "1", "CAPSCOPE_NO_SEED": "1"}.items():
        patch.setenv(name, str(value))
    use_demo_checkpoint(patch, root)
    app = create_app(f"sqlite:///{root / 'ui.db'}", segmenter="classic")
    add_user(app.state.store, *USER)
    app.state.models.scorer  # loaded before the first page asks
    picture = root / "scene.png"
    pixels = np.full((96, 128, 3), 230, np.uint8)
    pixels[20:60, 30:80] = (220, 30, 30)
    Image.fromarray(pixels).save(picture)
    with Served(mount_ui(app)) as server:
        server.root, server.picture = root, picture
        yield server
    patch.undo()


@pytest.fixture(scope="module")
def chromium():
    yield from launched_chromium()


def scoring_calls(page) -> list:
    """Every request the page makes that scores a caption (Gradio's queue or its direct calls), as it goes."""
    calls = []
    page.on("request", lambda r: calls.append(r.url) if r.method == "POST" and "/gradio_api/" in r.url
            and ("queue/join" in r.url or "/run/" in r.url) else None)
    return calls


def with_picture(page, served):
    page.set_input_files("#cs-image input[type=file]", str(served.picture))
    page.wait_for_selector("#cs-image img", timeout=30_000)


def words_shown(page, words: list[str], side: str = "a") -> None:
    """Wait until the shaded tokens of a caption are exactly `words`, each scored (shaded or not, in score mode)."""
    page.wait_for_function(
        """([side, words]) => { const ts = [...document.querySelectorAll(`#cs-tokens-${side} .token`)];
              const shown = ts.map(t => t.innerText.trim()).filter(Boolean);
              return shown.length === words.length && words.every((w, i) => shown[i] === w); }""",
        arg=[side, words], timeout=15_000)


@pytest.mark.slow
@browser
def test_pasted_and_inserted_captions_are_scored(chromium, served):
    page = logged_in_page(chromium, served, *USER)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    with_picture(page, served)
    box = "#cs-caption-a textarea"
    calls = scoring_calls(page)

    # 1. Ctrl+V of a caption on the clipboard
    page.evaluate("text => navigator.clipboard.writeText(text)", "a red square on grey")
    page.click(box)
    before = len(calls)
    page.keyboard.press("Control+V")
    words_shown(page, ["a", "red", "square", "on", "grey"])
    assert len(calls) > before

    # 2. a synthetic paste event as an extension sends it, then the text inserted as the browser does
    page.fill(box, "")
    page.focus(box)
    before = len(calls)
    page.evaluate("""text => { const box = document.querySelector('#cs-caption-a textarea');
        const data = new DataTransfer(); data.setData('text/plain', text);
        box.dispatchEvent(new ClipboardEvent('paste', {clipboardData: data, bubbles: true, cancelable: true}));
        document.execCommand('insertText', false, text); }""", "a blue circle above")
    words_shown(page, ["a", "blue", "circle", "above"])
    assert len(calls) > before

    # 3. a tool that sets the value and says so with an input event (as autofill and dictation do)
    before = len(calls)
    page.evaluate("""text => { const box = document.querySelector('#cs-caption-a textarea');
        const set = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set;
        set.call(box, text); box.dispatchEvent(new Event('input', {bubbles: true})); }""", "two green stars")
    words_shown(page, ["two", "green", "stars"])
    assert len(calls) > before

    # 4. a tool that sets the value and fires only change
    before = len(calls)
    page.evaluate("""text => { const box = document.querySelector('#cs-caption-a textarea');
        const set = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set;
        set.call(box, text); box.dispatchEvent(new Event('change', {bubbles: true})); }""", "one yellow triangle")
    words_shown(page, ["one", "yellow", "triangle"])
    assert len(calls) > before
    # the score table says what each number is, its range and which way is better; the bar has a legend
    page.wait_for_function("document.querySelector('.cs-scores').innerText.includes('higher is better')",
                           timeout=20_000)
    table = page.inner_text(".cs-scores")
    assert "range" in table and "what it is" in table and "precision + recall" in table
    legend = page.inner_text("#cs-shade-legend-a")
    assert "−1" in legend and "+1" in legend and "red" in legend and "purple" in legend
    bar, note = page.locator("#cs-tokens-a").bounding_box(), page.locator("#cs-shade-legend-a").bounding_box()
    assert 0 <= note["y"] - (bar["y"] + bar["height"]) < 40  # right under the words and their bar

    # ...but leaving the box after typing (a change event with nothing new) scores nothing again
    page.press(box, "s")
    words_shown(page, ["one", "yellow", "triangles"])
    page.wait_for_timeout(1500)
    before = len(calls)
    page.click("#cs-caption-b textarea")
    page.wait_for_timeout(1000)
    assert len(calls) == before
    shot(page, "inspect-pasted-caption.png")
    page.close()


def bomb_png(path, width=30_000, height=30_000):
    """A PNG whose header claims width x height pixels (a decompression bomb's size) and holds almost nothing."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


def big_jpeg(path, megabytes=18):
    """A JPEG of about `megabytes` MB (noise at quality 100), under the upload limit."""
    rng = np.random.default_rng(0)
    side = int((megabytes * 2**20 / 1.9) ** 0.5)
    Image.fromarray(rng.integers(0, 256, (side, side * 4 // 3 // 1, 3), np.uint8)[:, :side]).save(path, quality=100)
    return path


@pytest.mark.slow
@browser
@pytest.mark.parametrize("kind", ["garbage", "truncated", "bomb", "big-jpeg"])
def test_a_picture_that_cannot_be_read_is_said_at_once_beside_it(chromium, served, caplog, kind):
    import logging

    expected = {"garbage": "not an image", "truncated": "truncated", "bomb": "pixels"}

    root = served.root
    if kind == "garbage":
        path = root / "notes.png"
        path.write_bytes(b"these are not pixels at all\n" * 40)
    elif kind == "truncated":
        data = io.BytesIO()
        Image.fromarray(np.random.default_rng(1).integers(0, 256, (300, 400, 3), np.uint8)).save(data, "JPEG")
        path = root / "cut.jpg"
        path.write_bytes(data.getvalue()[: len(data.getvalue()) // 3])
    elif kind == "bomb":
        path = bomb_png(root / "bomb.png")
    else:
        path = big_jpeg(root / "big.jpg")
    page = logged_in_page(chromium, served, *USER)
    caplog.clear()
    server_log = logging.getLogger("uvicorn")  # uvicorn's own records do not reach the root logger
    server_log.addHandler(caplog.handler)
    with caplog.at_level(logging.INFO):
        page.set_input_files("#cs-image input[type=file]", str(path))
        if kind == "big-jpeg":  # readable (13 megapixels): shown, and nothing to say
            page.wait_for_selector("#cs-image img", timeout=30_000)
            page.wait_for_timeout(2000)
            assert page.inner_text("#cs-image-problem").strip() == ""
        else:
            page.wait_for_function("document.querySelector('#cs-image-problem').innerText.includes('cannot be read')",
                                   timeout=20_000)
            said = page.inner_text("#cs-image-problem")
            assert expected[kind] in said and str(served.root) not in said
            # beside the picture, on the first screen
            picture = page.locator("#cs-image").bounding_box()
            message = page.locator("#cs-image-problem").bounding_box()
            assert 0 <= message["y"] - (picture["y"] + picture["height"]) < 60 and message["y"] + message["height"] < 1000
            page.wait_for_timeout(1000)  # the rest of the upload's handlers run
    shot(page, f"inspect-unreadable-{kind}.png")
    page.close()
    page.context.close()
    server_log.removeHandler(caplog.handler)
    ours = [r for r in caplog.records if r.name.startswith("capscope") and r.levelno >= logging.WARNING]
    assert len(ours) == (0 if kind == "big-jpeg" else 1), [r.getMessage() for r in ours]
    assert all(r.levelno == logging.WARNING and "\n" not in r.getMessage() for r in ours)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], \
        [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
