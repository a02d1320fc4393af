"""No file reaches a handler that a user did not upload, and the database is
never a data file. On eb11b64 a Gradio FileData naming a server path was
copied into Gradio's cache and served back (a secret, the database's -wal);
reading the live SQLite file through a path field dropped the server's locks,
so a CLI command beside it deleted the -wal and later saves went nowhere."""
from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from security_support import ADMIN, ANN, BOB, basic, file_data, file_inputs, fn_index, gradio_config, gradio_event, \
    ui_login, uploaded

SECRET = b"capscope-test-secret-7f3a"


@pytest.fixture(scope="module")
def secret(team_root) -> Path:
    path = team_root / "outside" / "secret.txt"  # outside every data root
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(SECRET)
    return path


def server_paths(team, secret) -> list[str]:
    db = team.store.private_files()[0]
    return [str(secret), str(db), str(db) + "-wal", "/etc/passwd", "http://127.0.0.1:9/x.png",
            "file:///etc/passwd", str(team.data / "demo-data" / "captokeneval.jsonl")]


def cached_copies_of_secret() -> list[Path]:
    from gradio.utils import get_upload_folder

    folder = Path(get_upload_folder())
    return [p for p in folder.rglob("*") if p.is_file() and p.stat().st_size == len(SECRET)
            and p.read_bytes() == SECRET]


@pytest.mark.parametrize("user", [ANN, ADMIN], ids=["annotator", "admin"])
def test_no_event_can_name_a_server_file(team, secret, user):
    client = ui_login(team, user)
    config = gradio_config(client)
    events = file_inputs(config)
    assert len(events) >= 4  # Inspect's scorers and clicks, Admin import, Benchmark upload
    for index, types in events:
        for path in server_paths(team, secret):
            value = file_data(path)
            data = [[value] if t == "file" else value if t == "image" else None for t in types]
            answer = gradio_event(client, index, data)
            assert answer.get("status") == 403, (index, path, answer)
            assert "uploaded" in answer["detail"]
    assert cached_copies_of_secret() == []
    db = team.store.private_files()[0]
    for path in (str(secret), str(db), str(db) + "-wal", str(Path("pyproject.toml").resolve()),
                 "http://127.0.0.1:9/x.png"):
        assert client.get(f"/gradio_api/file={path}").status_code in (403, 404), path


def test_gradio_checks_uploads_itself_too(team, secret):
    """The second wall: the mounted Blocks count as launched, so Gradio's own
    check refuses a file that was not uploaded even if a request got past capscope's."""
    from gradio.context import LocalContext
    from gradio.exceptions import InvalidPathError
    from gradio.processing_utils import _check_allowed
    from gradio.routes import App

    blocks = next(r.app for r in team.server.config.app.routes if isinstance(getattr(r, "app", None), App)).blocks
    assert blocks.has_launched
    token = LocalContext.blocks.set(blocks)
    try:
        with pytest.raises(InvalidPathError):
            _check_allowed(str(secret), check_in_upload_folder=True)
    finally:
        LocalContext.blocks.reset(token)


@pytest.mark.slow  # over 1.5 s here: the fast lane keeps under 5 minutes
def test_an_uploaded_image_is_scored(team):
    client = ui_login(team, ANN)
    config = gradio_config(client)
    picture = io.BytesIO()
    Image.new("RGB", (96, 96), (220, 30, 30)).save(picture, "PNG")
    path = uploaded(client, "red.png", picture.getvalue())
    answer = gradio_event(client, fn_index(config, "score_a"), [file_data(path), "a red square", "", "infometic", None, None])
    assert answer["success"], answer
    assert answer["output"]["data"][1]["path"].endswith(".jpeg")  # the overlay was drawn


def private_modes(team) -> dict[str, int]:
    db = team.store.private_files()[0]
    return {"data folder": stat.S_IMODE(team.data.stat().st_mode), "database": stat.S_IMODE(db.stat().st_mode),
            "wal": stat.S_IMODE(Path(str(db) + "-wal").stat().st_mode)}


def test_the_database_and_its_folder_are_private(team):
    assert private_modes(team) == {"data folder": 0o700, "database": 0o600, "wal": 0o600}


def path_field_answers(team, paths: list[str]) -> list[str]:
    """What the admin's path fields answer for each path: Compare's NAME=FILE,
    Benchmark's judgement file, and the REST diagnose folder."""
    client = ui_login(team, ADMIN)
    config = gradio_config(client)
    compare, correlate = fn_index(config, "compare_captioners"), fn_index(config, "correlate")
    answers = []
    for path in paths:
        output = gradio_event(client, compare, [f"m={path}", []])["output"]["data"]
        answers.append(output[0])
        output = gradio_event(client, correlate, ["flickr8k-expert", path, None, ["clip-s"], 0])["output"]["data"]
        answers.append(output[0])
        answer = client.get("/api/diagnose", params={"folder": path}, headers=basic(ADMIN))
        answers.append(f"{answer.status_code} {answer.json()['detail']}")
    return answers


def capscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from capscope.cli import main; raise SystemExit(main())", *args],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())


@pytest.mark.slow
def test_no_label_is_lost_beside_path_fields_and_the_command_line(team, tmp_path):
    db = team.store.private_files()[0]
    hard_link, symlink = team.data / "copy.db", team.data / "link.db"
    os.link(db, hard_link)
    symlink.symlink_to(db)
    try:
        answers = path_field_answers(team, [str(db), str(db) + "-wal", str(db) + "-shm", str(hard_link),
                                            str(symlink)])
    finally:
        hard_link.unlink()
        symlink.unlink()
    for answer in answers:
        assert "server's own files" in answer or answer.startswith("403"), answer

    item = team_http_next(team, BOB)
    saved = []
    for round_ in range(3):
        for command in (["users", "list"], ["export", "--format", "captokeneval", "--out",
                                             str(tmp_path / f"gold{round_}.jsonl")]):
            done = capscope(*command)
            assert done.returncode == 0, done.stderr
        labels = {"incorrect_tokens": [round_], "mentioned_regions": [], "status": "draft"}
        answer = team_http(team).put(f"/api/items/{item}/labels", json=labels, headers=basic(BOB))
        assert answer.status_code == 200, answer.text
        saved.append(labels["incorrect_tokens"])
    assert team_http(team).get("/api/items", headers=basic(ADMIN)).status_code == 200
    history = team_http(team).get(f"/api/items/{item}/history", headers=basic(BOB)).json()
    assert [entry["incorrect_tokens"] for entry in history][-3:] == saved
    # as another process sees the file (opening it in this process, the server's, would drop its locks)
    seen = subprocess.run([sys.executable, "-c", OUTSIDE_READ, str(db)], capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0, seen.stderr
    integrity, revisions = seen.stdout.split()
    assert integrity == "ok" and int(revisions) >= 3


OUTSIDE_READ = """
import sqlite3, sys
with sqlite3.connect(sys.argv[1]) as db:
    print(db.execute("PRAGMA integrity_check").fetchone()[0], db.execute("SELECT count(*) FROM label_revisions").fetchone()[0])
"""


def team_http(team):
    import httpx

    return httpx.Client(base_url=team.url, timeout=60)


def team_http_next(team, user) -> int:
    answer = team_http(team).get("/api/items/next", headers=basic(user))
    assert answer.status_code == 200, answer.text
    return answer.json()["item_id"]


def test_the_first_admin_password_file_is_refused_too(team):
    from capscope.server.data_roots import OutsideDataRoots

    password_file = team.data / "admin-password.txt"
    with pytest.raises(OutsideDataRoots, match="server's own files"):
        team.server.config.app.state.data_roots.check(password_file)
