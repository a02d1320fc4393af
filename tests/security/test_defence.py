"""Defence in depth that needs no server: the Docker image's user, the serve
command's checks of its options."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from capscope.commands.serve import check_origins, score_gate
from capscope.common.errors import CapscopeError

ROOT = Path(__file__).resolve().parents[2]


def test_the_docker_image_runs_as_a_user_of_its_own():
    """On eb11b64 the image ran as root. (No Docker engine here: the Dockerfile is read.)"""
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    last_user = max(i for i, line in enumerate(lines) if line.startswith("USER "))
    assert any(line.startswith("CMD ") for line in lines[last_user:])
    assert re.search(r"chown -R capscope:capscope /data /models", (ROOT / "Dockerfile").read_text())


@pytest.mark.parametrize("origin", ["evil.example", "https://", "https://a.example/path", "ftp://a.example",
                                    "https://a.example/?q=1"])
def test_cors_origins_are_sites_only(origin):
    with pytest.raises(CapscopeError, match="--cors-origin"):
        check_origins([origin])


def test_cors_origins_and_the_scoring_gate_from_the_command_line():
    assert check_origins(["https://labels.example.org/", "http://127.0.0.1:8080"]) == (
        "https://labels.example.org", "http://127.0.0.1:8080")
    gate = score_gate(2, 5.0)
    assert (gate.per_user, gate.wait_s) == (2, 5.0)
    with pytest.raises(CapscopeError):
        score_gate(0, 5.0)


def test_building_the_page_writes_nothing_into_the_code():
    """Gradio writes a .pyi stub beside a module that subclasses a component, at import: a server
    must not write into its own installation, so Inspect sets its image's preprocess instead."""
    import capscope.ui.page  # noqa: F401
    from capscope.ui.inspect import build_inspect  # noqa: F401

    assert sorted(ROOT.glob("app/**/*.pyi")) == []
