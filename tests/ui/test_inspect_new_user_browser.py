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
