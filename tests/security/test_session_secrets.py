"""No script on the page can read the session. Over HTTPS (a team's deployment) the
browser sends Gradio's Secure session cookie, and on a15ad8a Gradio's
`/gradio_api/token` route handed its value back to any script that asked:
HttpOnly undone, and a stored script could take the session."""
from __future__ import annotations

import httpx
import pytest

from security_support import ANN, self_signed_certificate

SECRET_ROUTES = ["/gradio_api/token", "/gradio_api/token/", "/gradio_api/runs", "/gradio_api/run-history/records",
                 "/gradio_api/vibe-code", "/gradio_api/dev/reload"]


@pytest.fixture(scope="module")
def https_team(tmp_path_factory):
    from capscope.annotation.users import add_user
    from capscope.server.api import create_app
    from capscope.ui.page import mount_ui
    from ui_support import Served

    folder = tmp_path_factory.mktemp("https")
    key, cert = self_signed_certificate(folder)
    app = create_app(f"sqlite:///{folder / 'team.db'}")
    add_user(app.state.store, *ANN)
    app = mount_ui(app, seed=False)
    with Served(app, ssl_keyfile=str(key), ssl_certfile=str(cert)) as served:
        yield served


@pytest.mark.slow
def test_no_route_hands_a_script_the_session_cookie_over_https(https_team):
    browser = httpx.Client(base_url=https_team.url, verify=False, timeout=60)
    assert browser.post("/login", data={"username": ANN[0], "password": ANN[1]}).status_code == 200
    session = [value for name, value in browser.cookies.items() if name.startswith("access-token")]
    assert session, "the sign-in set no session cookie"
    assert browser.get("/config").status_code == 200  # the page's own calls still work over HTTPS
    for path in SECRET_ROUTES:
        answer = browser.get(path)
        assert answer.status_code == 404, (path, answer.status_code)
        assert not any(value in answer.text for value in session), path
    set_cookies = browser.post("/login", data={"username": ANN[0], "password": ANN[1]}).headers.get_list("set-cookie")
    assert set_cookies and all("httponly" in c.lower() for c in set_cookies if c.startswith("access-token"))
