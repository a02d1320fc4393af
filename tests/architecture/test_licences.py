"""docs/licences.md names every package capscope installs (its dependencies
and the extras users install), so that no dependency arrives unlisted; the
default install holds no AGPL code."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def test_every_installed_package_has_its_licence_listed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    page = (ROOT / "docs" / "licences.md").read_text().lower()
    wanted = [package_name(r) for r in project["dependencies"]]
    wanted += [package_name(r) for extra in ("yolo", "captioning", "ray") for r in project["optional-dependencies"][extra]]
    missing = [name for name in wanted if name not in page]
    assert not missing, f"docs/licences.md does not list {missing}"


def test_the_default_install_leaves_ultralytics_out():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "ultralytics" not in {package_name(r) for r in project["dependencies"]}
    assert "ultralytics" in {package_name(r) for r in project["optional-dependencies"]["yolo"]}
