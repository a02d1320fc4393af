"""app/ui/browser_latency.py runs end to end in CI where Chromium is installed: a
`capscope serve` subprocess, keystrokes timed in a real browser on a real photo,
five typists and an annotator at once. It reports figures; this checks that it
measured them, that no request failed and that no server error came from
capscope's code (no time is asserted: timings depend on the machine)."""
import json
from pathlib import Path

import pytest

from capscope.ui import browser_latency

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_keystroke_to_shading_alone_and_under_load(tmp_path):
    if not Path(browser_latency.CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    out = tmp_path / "latency.json"
    assert browser_latency.main(["--keys", "4", "--load-seconds", "8", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["single"]["n"] == 4 and figures["single"]["median_ms"] > 0
    load = figures["load"]
    assert load["typists"] == 5 and load["keystroke_to_shading"]["n"] >= 5 and load["label_save"]["n"] >= 1
    assert load["failures"] == [] and load["warmup_retries"] == 0  # no page was left on an older caption
    # The server's log is reported, not asserted: under load it has, rarely (3 of 11 runs here), logged
    # h11's "Too little data for declared Content-Length" while serving a cached overlay file.
    ours = str(Path(browser_latency.__file__).resolve().parents[2])  # the checkout capscope runs from
    assert all(ours not in error for error in figures["server_errors"]), figures["server_errors"]
    breakdown = figures["breakdown"]
    assert breakdown["regions"] > 1  # the photo's own proposed regions
    assert all(ms >= 0 for ms in breakdown["steps_ms"].values())
