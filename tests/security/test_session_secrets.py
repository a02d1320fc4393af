"""No script on the page can read the session. Over HTTPS (a team's deployment) the
browser sends Gradio's Secure session cookie, and on a15ad8a Gradio's
`/gradio_api/token` route handed its value back to any script that asked:
HttpOnly undone, and a stored script could take the session."""
from __future__ import annotations

import time

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
        served.app = app
        yield served


def get_paths(routes, prefix: str = "") -> set[str]:
    """Every GET route of the app without a path parameter, Gradio's mounted app and routers included."""
    found = set()
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's included router: its paths hold its prefix
        if inner is not None:
            found |= get_paths(inner.routes, prefix)
        elif hasattr(route, "app") and hasattr(route, "routes") and not hasattr(route, "methods"):  # a Mount
            found |= get_paths(route.routes, prefix + route.path)
        elif "GET" in (getattr(route, "methods", None) or ()) and "{" not in route.path:
            found.add(prefix + route.path)
    return found


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


def read_a_while(client: httpx.Client, path: str, seconds: float = 3.0) -> tuple[httpx.Response | None, bytes]:
    """(answer, what GET `path` sent in its first seconds): a stream, such as a reload or queue route, never ends."""
    body, deadline, answer = [], time.monotonic() + seconds, None
    try:
        with client.stream("GET", path, timeout=httpx.Timeout(30, read=seconds)) as answer:
            for chunk in answer.iter_raw():
                body.append(chunk)
                if time.monotonic() > deadline:
                    break
    except httpx.ReadTimeout:
        pass
    return answer, b"".join(body)


@pytest.mark.slow
def test_no_route_answers_with_the_session(https_team):
    """Whatever a script on the page can GET without naming anything: no answer (body or header) holds
    the session cookie's value, and the sign-in's own answer hands it over only as the HttpOnly cookie."""
    browser = httpx.Client(base_url=https_team.url, verify=False, timeout=30, auth=ANN)  # Basic for /api
    signin = browser.post("/login", data={"username": ANN[0], "password": ANN[1]})
    session = [value for name, value in browser.cookies.items() if name.startswith("access-token")]
    assert session and not any(value in signin.text for value in session)
    paths = get_paths(https_team.app.routes) - {"/logout"}  # /logout would end the session the test holds
    assert {"/", "/config", "/api/me", "/gradio_api/token", "/gradio_api/info", "/gradio_api/user"} <= paths
    for path in sorted(paths):
        answer, body = read_a_while(browser, path)
        headers = answer.headers.items() if answer is not None else []
        leaked = [value for value in session if value.encode() in body
                  or any(value in v for k, v in headers if k != "set-cookie")]
        assert not leaked, (path, answer and answer.status_code)
    assert browser.get("/gradio_api/user").json() == ANN[0]  # still signed in: every route was asked as the user
