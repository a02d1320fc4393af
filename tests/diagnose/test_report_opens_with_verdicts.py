"""The diagnose report opens with its verdicts (issue 71: "good is better" sat
about 3,000 px down the page), and `capscope demo-data --coco` writes example
COCO files a new user can diagnose at once."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from capscope.cli import main
from capscope.diagnose import DiagnosisSummary
from capscope.diagnose.report import write_report

REFERENCE = Path(__file__).with_name("summary_reference.json")


def reference_report(out: Path) -> Path:
    summary = DiagnosisSummary.from_dict(json.loads(REFERENCE.read_text()))
    return write_report(summary, out, {}, lambda path: None)


@pytest.mark.slow  # over 1.5 s here: the fast lane keeps under 5 minutes
def test_the_verdicts_come_before_every_table_and_figure(tmp_path):
    page = reference_report(tmp_path).read_text()
    verdict = page.index("<h2>Verdict</h2>")
    assert verdict < page.index("<table>") and verdict < page.index("<img")
    first = page[verdict:page.index("</section>", verdict)]
    assert "careful against sloppy" in first and "careful better" in first  # who is better, per pair
    assert "<b>sloppy</b>: InfoMetIC finds 44.4%" in first and "mostly object words" in first  # what each gets wrong


@pytest.mark.browser
def test_the_verdict_is_on_the_first_screen_in_a_browser(tmp_path):
    from ui_support import launched_chromium

    page_path = reference_report(tmp_path)
    for chromium in launched_chromium():
        page = chromium.new_page(viewport={"width": 1280, "height": 800})
        page.goto(page_path.as_uri())
        top = page.evaluate("""() => [...document.querySelectorAll('h3')]
                                  .find(e => / against /.test(e.textContent)).getBoundingClientRect().top""")
        print(f"first verdict at y = {top:.0f} px")
        assert top < 800 - 100  # on the first screen of a 1280 x 800 window, with its lines below it


@pytest.mark.slow
def test_demo_data_writes_coco_files_that_diagnose_reads_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["demo-data", "--out", "demo", "--n", "2", "--coco", "6"]) == 0
    folder = tmp_path / "demo" / "coco"
    annotations = json.loads((folder / "captions.json").read_text())
    assert len(annotations["images"]) == 6 and len(annotations["annotations"]) == 18
    assert all((folder / "images" / image["file_name"]).is_file() for image in annotations["images"])
    for name in ("colours", "nearly-clean"):
        results = json.loads((folder / f"{name}.json").read_text())
        assert [r["image_id"] for r in results] == [i["id"] for i in annotations["images"]]
    printed = capsys.readouterr().out
    command = next(line.strip() for line in printed.splitlines() if line.strip().startswith("capscope diagnose"))
    # the command it prints runs as it is (the demo model here, offline)
    assert main([*shlex.split(command)[1:], "--demo", "--device", "cpu", "--metric", "infometic",
                 "--bootstrap", "100"]) == 0
    report = (tmp_path / "demo" / "report" / "index.html").read_text()
    assert "<h2>Verdict</h2>" in report and "colours against nearly-clean" in report
