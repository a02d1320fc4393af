"""A team's server, served for real on loopback: `capscope serve`'s app (REST
API and the mounted UI) over an SQLite file in its own data folder, the bundled
demo model, one admin and two annotators. The security tests send what an
attacker would send to it over HTTP."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from capscope.annotation.users import add_user
from capscope.server.api import create_app
from capscope.ui.page import mount_ui
from security_support import ADMIN, ANN, BOB
from ui_support import Served

@pytest.fixture(scope="package")
def team_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("team")


@pytest.fixture(scope="package")
def team(team_root):
    """(served, store): the server's data folder is `team_root / "data"`, its database in it."""
    patch = pytest.MonkeyPatch()
    data = team_root / "data"
    for name, value in {"CAPSCOPE_DATA_DIR": data, "CAPSCOPE_CACHE": team_root / "cache",
                        "HF_HUB_OFFLINE": "1"}.items():
        patch.setenv(name, str(value))
    patch.delenv("CAPSCOPE_NO_SEED", raising=False)
    patch.delenv("CAPSCOPE_DB_URL", raising=False)
    app = create_app()  # the default: an SQLite file in the data folder
    store = app.state.store
    add_user(store, *ADMIN, role="admin")
    for user in (ANN, BOB):
        add_user(store, *user)
    app = mount_ui(app, demo_scenes=4)
    with Served(app) as server:
        server.store, server.models, server.data = store, app.state.models, data
        yield server
    patch.undo()


@pytest.fixture
def http(team):
    with httpx.Client(base_url=team.url, timeout=60) as client:
        yield client


@pytest.fixture(autouse=True)
def fresh_signin_guard(request):
    """Every test starts and ends with no failed sign-in on record: all tests come from one
    address (loopback), and the server backs off after 5 failures from it."""
    if "team" not in request.fixturenames:
        yield
        return
    from capscope.server.signin import guard_for

    guard = guard_for(request.getfixturevalue("team").server.config.app)
    guard.clear()
    yield
    guard.clear()
