"""Signing in to a team's server: argon2id hashes (old scrypt ones upgraded at
login), the 12-character rule, back-off after failed sign-ins (REST and UI),
the UI's login off the event loop, UI sessions that end (lifetime, password
change, disabled user), `capscope users disable|enable`, passwords asked for,
and the first-run admin password kept out of the log."""
from __future__ import annotations

import base64
import hashlib
import io
import logging
import secrets
import statistics
import stat
import threading
import time

import httpx
import pytest
from argon2 import PasswordHasher
from sqlalchemy import select, update

from capscope.annotation.refusals import Invalid
from capscope.annotation.users import MIN_PASSWORD_CHARS, add_user, authenticate, credential_stamp
from capscope.cli import build_parser, main
from capscope.db import Store, User
from capscope.common.errors import CapscopeError
from capscope.server.signin import SignInGuard, guard_for
from capscope.ui.sessions import Sessions, session_hours
from security_support import ADMIN, ANN, BOB, basic, ui_login

PASSWORD = "correct-horse-12"


def new_user(team, prefix: str, password: str = PASSWORD) -> tuple[str, str]:
    """A user of this test alone: the team's own users are shared with other tests."""
    name = f"{prefix}{secrets.token_hex(3)}"
    add_user(team.store, name, password)
    return name, password


def users_cli(team, *args: str) -> int:
    return main(["users", *args, "--db", team.store.url])


def stored_hash(team, name: str) -> str:
    with team.store.read() as session:
        return session.scalar(select(User.password_hash).where(User.name == name))


def set_hash(team, name: str, value: str) -> None:
    team.store.run_write(lambda s: s.execute(update(User).where(User.name == name).values(password_hash=value)))


def sessions_of(team) -> Sessions:
    from gradio.routes import App

    return next(r.app.tokens for r in team.server.config.app.routes if isinstance(getattr(r, "app", None), App))


def ui_user(client: httpx.Client) -> str | None:
    """Who Gradio says the client's session cookie signs in (None: nobody)."""
    return client.get("/gradio_api/user").json()


@pytest.fixture
def no_backoff(team, monkeypatch):
    """The guard never backs off (for tests that fail on purpose, many times, from loopback)."""
    monkeypatch.setattr(guard_for(team.server.config.app), "limit", 10**9)


# ---------------------------------------------------------------- back-off

@pytest.mark.slow  # over 1.5 s here (a Ray start, a served app's rounds): the fast lane keeps under 5 minutes
def test_rest_refuses_with_429_after_five_wrong_passwords(team, http):
    name, password = new_user(team, "rest")
    for _ in range(5):
        assert http.get("/api/me", headers=basic((name, "wrong-password-1"))).status_code == 401
    refused = http.get("/api/me", headers=basic((name, password)))  # even the right one, for now
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1 and "too many failed sign-ins" in refused.json()["detail"]
    other = http.get("/api/me", headers=basic(BOB))  # the same address backs off too
    assert other.status_code == 429
    time.sleep(int(refused.headers["Retry-After"]) + 0.1)
    assert http.get("/api/me", headers=basic((name, password))).status_code == 200


def test_ui_login_backs_off_per_address(team):
    name, password = new_user(team, "uiaddr")
    with httpx.Client(base_url=team.url, timeout=60) as client:
        for i in range(5):
            answer = client.post("/login", data={"username": f"nobody{i}", "password": "wrong-password-1"})
            assert answer.status_code == 400 and "Incorrect credentials" in answer.text
        answer = client.post("/login", data={"username": name, "password": password})
        assert answer.status_code == 400  # refused without checking: the address is backing off
        assert guard_for(team.server.config.app).retry_after(name, "127.0.0.1") > 0
    assert httpx.get(team.url + "/api/me", headers=basic((name, password))).status_code == 429


def test_the_guard_doubles_its_back_off_and_a_success_clears_the_name():
    now = [1000.0]
    guard = SignInGuard(clock=lambda: now[0])
    for _ in range(4):
        guard.failed("ann", "10.0.0.1")
    assert guard.retry_after("ann", "10.0.0.1") == 0
    guard.failed("ann", "10.0.0.1")
    assert guard.retry_after("ann", "10.0.0.1") == pytest.approx(1.0)  # the name at that address backs off
    assert guard.retry_after("bob", "10.0.0.1") == pytest.approx(1.0)  # and so does the address
    assert guard.retry_after("ann", "10.0.0.2") == 0  # but not ann elsewhere: no one can lock her out
    waits = []
    for _ in range(12):
        now[0] += guard.retry_after("ann", "10.0.0.1")
        guard.failed("ann", "10.0.0.1")
        waits.append(guard.retry_after("ann", "10.0.0.1"))
    assert waits[:4] == [2.0, 4.0, 8.0, 16.0] and waits[-1] == 15 * 60  # doubling, capped at 15 minutes
    now[0] += 15 * 60
    guard.succeeded("ann", "10.0.0.1")
    assert guard.retry_after("ann", "10.0.0.9") == 0
    now[0] += 15 * 60 + 1  # failures older than the window are forgotten
    assert guard.retry_after("bob", "10.0.0.1") == 0 and len(guard) == 0


def test_guesses_at_a_name_from_one_address_leave_its_owner_a_way_in():
    """On a15ad8a anyone could keep any account, the admin's included, locked for up to
    15 minutes: failures were counted per name, from wherever they came."""
    guard = SignInGuard()
    for _ in range(40):
        guard.failed("boss", "203.0.113.7")
    assert guard.retry_after("boss", "203.0.113.7") > 0
    assert guard.retry_after("boss", "198.51.100.1") == 0


def test_the_guard_holds_a_bounded_number_of_entries():
    guard = SignInGuard(max_entries=100)
    for i in range(5000):
        guard.failed(f"user{i}", f"10.0.{i // 256}.{i % 256}")
    assert len(guard) <= 100
    for _ in range(5):
        guard.failed("ann", "10.9.9.9")
    assert guard.retry_after("ann", "10.9.9.9") > 0  # the newest records are kept


# ---------------------------------------------------------------- the event loop

@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_health_stays_fast_while_ui_logins_fail(team, no_backoff):
    """Before: Gradio ran the (sync) login's hash on the event loop, so every
    other request waited behind a flood of logins."""
    stop, logins = threading.Event(), []

    def flood(index):
        with httpx.Client(base_url=team.url, timeout=60) as client:
            while not stop.is_set():
                answer = client.post("/login", data={"username": BOB[0], "password": f"wrong-guess-{index}"})
                logins.append(answer.status_code)

    threads = [threading.Thread(target=flood, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        times = []
        with httpx.Client(base_url=team.url, timeout=60) as client:
            for _ in range(20):
                start = time.perf_counter()
                assert client.get("/api/health").status_code == 200
                times.append(time.perf_counter() - start)
                time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    p95 = sorted(times)[18]
    assert p95 < 0.1, f"/api/health p95 {p95 * 1000:.0f} ms while logins failed"
    assert len(logins) >= 6 and set(logins) == {400}


# ---------------------------------------------------------------- sessions

def test_a_ui_session_ends_when_the_user_is_disabled(team, capsys):
    name, password = new_user(team, "dis")
    http = ui_login(team, (name, password))
    assert ui_user(http) == name
    assert httpx.get(team.url + "/api/me", headers=basic((name, password))).status_code == 200  # remembered now
    assert users_cli(team, "disable", name) == 0
    assert ui_user(http) is None
    assert httpx.get(team.url + "/api/me", headers=basic((name, password))).status_code == 401
    assert http.post("/login", data={"username": name, "password": password}).status_code == 400
    assert users_cli(team, "list") == 0
    assert f"{name}\tannotator\tdisabled" in capsys.readouterr().out
    assert users_cli(team, "enable", name) == 0
    assert ui_user(http) is None  # the old session stays ended
    assert ui_user(ui_login(team, (name, password))) == name
    http.close()


def test_a_ui_session_ends_when_the_password_changes(team):
    name, password = new_user(team, "chg")
    http = ui_login(team, (name, password))
    assert ui_user(http) == name
    assert users_cli(team, "add", name, "--password", "a-new-password-34", "--replace") == 0
    assert ui_user(http) is None
    assert http.post("/login", data={"username": name, "password": password}).status_code == 400
    assert ui_user(ui_login(team, (name, "a-new-password-34"))) == name
    http.close()


def test_a_ui_session_ends_after_its_lifetime(team):
    name, password = new_user(team, "old")
    http = ui_login(team, (name, password))
    assert ui_user(http) == name
    sessions = sessions_of(team)
    mine = [token for token, user in dict.items(sessions) if user == name]
    assert len(mine) == 1
    issued, stamp = sessions.issued[mine[0]]
    sessions.issued[mine[0]] = (issued - sessions.lifetime_s - 1, stamp)
    assert ui_user(http) is None
    assert mine[0] not in dict.keys(sessions)  # dropped, not kept
    http.close()


def test_sessions_lapse_and_their_lifetime_comes_from_the_flag_or_the_environment(team, monkeypatch):
    now = [0.0]
    sessions = Sessions(team.store, lifetime_s=60, clock=lambda: now[0])
    sessions["t1"] = BOB[0]
    assert sessions.get("t1") == BOB[0] and "t1" in sessions and sessions["t1"] == BOB[0]
    now[0] = 61
    sessions["t2"] = BOB[0]  # a new login sweeps out lapsed tokens nobody reads
    assert dict.get(sessions, "t1") is None and "t1" not in sessions.issued
    assert sessions["gone"] is None and sessions.get(None) is None
    monkeypatch.setenv("CAPSCOPE_SESSION_HOURS", "0.5")
    assert session_hours() == 0.5 and session_hours(3) == 3
    monkeypatch.delenv("CAPSCOPE_SESSION_HOURS")
    assert session_hours() == 12
    assert build_parser().parse_args(["serve", "--session-hours", "2"]).session_hours == 2


# ---------------------------------------------------------------- hashes

def test_an_unknown_name_takes_as_long_as_a_wrong_password(team, no_backoff):
    known, _ = new_user(team, "tim")
    with httpx.Client(base_url=team.url, timeout=60) as client:
        def timed(name):
            start = time.perf_counter()
            assert client.get("/api/me", headers=basic((name, "not-the-password"))).status_code == 401
            return time.perf_counter() - start

        timed("warm-up-nobody")
        known_s = statistics.median(timed(known) for _ in range(5))
        unknown_s = statistics.median(timed(f"nobody-{i}") for i in range(5))
    assert unknown_s >= 0.5 * known_s, (unknown_s, known_s)


def legacy_scrypt_hash(password: str) -> str:
    """What capscope stored before argon2id."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt$16384$8$1${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def test_passwords_are_argon2id_and_old_hashes_are_upgraded_at_login(team, http):
    name, password = new_user(team, "leg")
    assert stored_hash(team, name).startswith("$argon2id$")
    set_hash(team, name, legacy_scrypt_hash(password))
    assert http.get("/api/me", headers=basic((name, "wrong-password-1"))).status_code == 401
    assert stored_hash(team, name).startswith("scrypt$")  # only a successful login upgrades
    assert http.get("/api/me", headers=basic((name, password))).json()["name"] == name
    upgraded = stored_hash(team, name)
    assert upgraded.startswith("$argon2id$") and not PasswordHasher().check_needs_rehash(upgraded)
    assert http.get("/api/me", headers=basic((name, password))).status_code == 200


def test_argon2_hashes_with_older_parameters_are_upgraded_at_ui_login(team):
    name, password = new_user(team, "weak")
    set_hash(team, name, PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash(password))
    http = ui_login(team, (name, password))
    assert ui_user(http) == name
    http.close()
    assert not PasswordHasher().check_needs_rehash(stored_hash(team, name))


def test_passwords_need_twelve_characters(team, capsys):
    assert MIN_PASSWORD_CHARS == 12
    with pytest.raises(Invalid, match="at least 12 characters"):
        add_user(team.store, "shorty", "x" * 11)
    assert users_cli(team, "add", "shorty", "--password", "eleven-char") == 2
    assert "at least 12 characters" in capsys.readouterr().err
    name = f"twelve{secrets.token_hex(3)}"
    assert users_cli(team, "add", name, "--password", "x" * 12) == 0
    assert authenticate(team.store, name, "x" * 12) is not None


def test_the_cached_login_holds_only_while_the_credentials_do(team):
    name, password = new_user(team, "cache")
    assert authenticate(team.store, name, password) is not None
    start = time.perf_counter()
    assert authenticate(team.store, name, password) is not None
    assert time.perf_counter() - start < 0.02  # remembered: no hashing
    stamp = credential_stamp(team.store, name)
    assert users_cli(team, "disable", name) == 0
    assert credential_stamp(team.store, name) != stamp
    assert authenticate(team.store, name, password) is None


# ---------------------------------------------------------------- the CLI

class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_users_add_asks_twice_or_reads_a_file_or_standard_input(team, monkeypatch, capsys, tmp_path):
    import getpass

    monkeypatch.delenv("CAPSCOPE_PASSWORD", raising=False)
    answers = iter(["first-password-1", "other-password-1", "typed-password-12", "typed-password-12"])
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": next(answers))
    monkeypatch.setattr("sys.stdin", _Terminal())
    name = f"ask{secrets.token_hex(3)}"
    assert users_cli(team, "add", name) == 2
    assert "the two passwords differ" in capsys.readouterr().err
    assert users_cli(team, "add", name) == 0
    assert authenticate(team.store, name, "typed-password-12") is not None

    monkeypatch.setattr("sys.stdin", io.StringIO("piped-password-12\nignored\n"))
    assert users_cli(team, "add", name, "--replace") == 0
    assert authenticate(team.store, name, "piped-password-12") is not None

    secret = tmp_path / "pw.txt"
    secret.write_text("filed-password-12\nsecond line\n")
    assert users_cli(team, "add", name, "--replace", "--password-file", str(secret)) == 0
    assert authenticate(team.store, name, "filed-password-12") is not None


def test_users_disable_an_unknown_name_is_an_error(team, capsys):
    assert users_cli(team, "disable", "no-such-user") == 2
    assert "no user 'no-such-user'" in capsys.readouterr().err


# ---------------------------------------------------------------- first run

def test_the_first_admin_password_goes_to_a_private_file_not_the_log(tmp_path, monkeypatch, caplog):
    from capscope.server.first_run import ADMIN_PASSWORD_FILE, ensure_admin

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CAPSCOPE_ADMIN_PASSWORD", raising=False)
    (tmp_path / "data").mkdir()
    planted = tmp_path / "elsewhere.txt"
    planted.write_text("keep me\n")
    (tmp_path / "data" / ADMIN_PASSWORD_FILE).symlink_to(planted)  # a link someone left there
    store = Store(f"sqlite:///{tmp_path / 'first.db'}")
    with caplog.at_level(logging.WARNING):
        password = ensure_admin(store)
    path = tmp_path / "data" / ADMIN_PASSWORD_FILE
    assert not path.is_symlink() and planted.read_text() == "keep me\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == password and len(password) >= MIN_PASSWORD_CHARS
    assert str(path) in caplog.text and password not in caplog.text
    assert authenticate(store, "admin", password).is_admin
    assert ensure_admin(store) is None  # users exist (disabled ones count too)
    store.dispose()


def test_a_chosen_admin_password_writes_no_file(tmp_path, monkeypatch, caplog):
    from capscope.server.first_run import ADMIN_PASSWORD_FILE, ensure_admin

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CAPSCOPE_ADMIN_PASSWORD", "chosen-password-1")
    store = Store(f"sqlite:///{tmp_path / 'chosen.db'}")
    with caplog.at_level(logging.WARNING):
        assert ensure_admin(store) == "chosen-password-1"
    assert not (tmp_path / "data" / ADMIN_PASSWORD_FILE).exists() and "chosen-password-1" not in caplog.text
    store.dispose()


def test_a_server_without_the_ui_makes_its_first_admin_and_demo_and_guards_the_password_file(
        tmp_path, monkeypatch):
    """On b3a8fe2 the first admin, the demo seed and the password file's protection were made by
    the web UI's mount_ui: a server started without the UI had no user to sign in with."""
    from capscope.server import first_run
    from capscope.server.api import create_app
    from capscope.server.data_roots import OutsideDataRoots

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CAPSCOPE_ADMIN_PASSWORD", "chosen-password-1")
    monkeypatch.setattr(first_run, "DEMO_SCENES", 2)
    store = Store(f"sqlite:///{tmp_path / 'served.db'}")
    app = create_app(store=store, scorer_factory=lambda: None, first_run=True)
    assert authenticate(store, "admin", "chosen-password-1").is_admin
    from capscope.annotation.browse import dataset_names
    from capscope.annotation.queue import DEMO_DATASET
    assert dataset_names(store) == [DEMO_DATASET]
    with pytest.raises(OutsideDataRoots):
        app.state.data_roots.check(tmp_path / "data" / first_run.ADMIN_PASSWORD_FILE)
    store.dispose()


def test_behind_a_trusted_proxy_back_off_counts_each_clients_own_address(tmp_path):
    """On a15ad8a every sign-in behind a proxy came from the proxy's address: one
    client's wrong passwords locked every other client out."""
    from capscope.commands.serve import proxy_options
    from capscope.server.api import create_app
    from ui_support import Served

    app = create_app(f"sqlite:///{tmp_path / 'proxied.db'}")
    add_user(app.state.store, "carol", "carol-password-1")
    wrong, right = basic(("carol", "not-her-password")), basic(("carol", "carol-password-1"))
    with Served(app, **proxy_options(["127.0.0.1"])) as served:
        def me(headers, client):
            return httpx.get(served.url + "/api/me", headers={**headers, "X-Forwarded-For": client}).status_code

        assert [me(wrong, "203.0.113.5") for _ in range(6)] == [401] * 5 + [429]
        assert me(right, "198.51.100.7") == 200  # another client behind the same proxy
        assert me(right, "203.0.113.5") == 429  # the guesser's own address still backs off
    with Served(create_app(f"sqlite:///{tmp_path / 'direct.db'}"), **proxy_options([])) as served:
        direct = served.server.config
        assert direct.proxy_headers is False  # no header is believed when no proxy is named


def test_a_trusted_proxy_is_an_address():
    from capscope.commands.serve import proxy_options

    assert proxy_options(["10.0.0.0/24", "::1"]) == {"proxy_headers": True, "forwarded_allow_ips": "10.0.0.0/24,::1"}
    with pytest.raises(CapscopeError):
        proxy_options(["proxy.example.org"])


def test_a_browser_that_signed_in_before_gets_in_past_guesses_from_its_own_address(team):
    """The way in for an admin: guesses at their name from their own address (a NAT shared with
    the guesser) back off every browser there but the one that signed in as them before."""
    from capscope.server.signin import DEVICE_COOKIE

    browser = ui_login(team, ADMIN)
    device = browser.cookies.get(DEVICE_COOKIE)
    assert device and "HttpOnly" in browser.post("/login", data={"username": ADMIN[0], "password": ADMIN[1]}
                                                 ).headers["set-cookie"]
    for _ in range(6):
        httpx.post(team.url + "/login", data={"username": ADMIN[0], "password": "a guess"})
    stranger = httpx.post(team.url + "/login", data={"username": ADMIN[0], "password": ADMIN[1]})
    assert stranger.status_code != 200  # the address backs off
    known = httpx.post(team.url + "/login", data={"username": ADMIN[0], "password": ADMIN[1]},
                       cookies={DEVICE_COOKIE: device})
    assert known.status_code == 200, known.text
    # the cookie is the admin's only: it opens no back-off for another name
    for _ in range(6):
        httpx.post(team.url + "/login", data={"username": ANN[0], "password": "a guess"},
                   cookies={DEVICE_COOKIE: device})
    assert httpx.post(team.url + "/login", data={"username": ANN[0], "password": ANN[1]},
                      cookies={DEVICE_COOKIE: device}).status_code != 200


def test_a_session_not_used_while_its_user_was_disabled_stays_ended_after_an_enable(team):
    """On a15ad8a a session was checked against a digest of the password hash and the
    active flag: disabled and enabled again, unused meanwhile, it came back to life."""
    name, password = new_user(team, "rev")
    http = ui_login(team, (name, password))
    assert ui_user(http) == name
    assert users_cli(team, "disable", name) == 0
    assert users_cli(team, "enable", name) == 0  # the session was not used in between
    assert ui_user(http) is None
    http.close()
