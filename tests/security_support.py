"""Helpers of the security tests (tests/security): the team's users, HTTP
Basic headers, a UI sign-in, and Gradio events sent over HTTP as the page
sends them."""
from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import httpx

ADMIN = ("boss", "boss-password-1")
ANN = ("ann", "ann-password-12")
BOB = ("bob", "bob-password-12")


def basic(user: tuple[str, str]) -> dict[str, str]:
    token = base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def ui_login(team, user: tuple[str, str]) -> httpx.Client:
    """An HTTP client signed in to the UI as `user` (Gradio's login form), as a browser is."""
    client = httpx.Client(base_url=team.url, timeout=60)
    answer = client.post("/login", data={"username": user[0], "password": user[1]})
    assert answer.status_code == 200, answer.text
    return client


# ---------------------------------------------------------------- Gradio events over HTTP, as the page sends them

def gradio_config(client: httpx.Client) -> dict:
    return client.get("/config").json()


def fn_index(config: dict, api_name: str) -> int:
    return next(i for i, dep in enumerate(config["dependencies"]) if dep.get("api_name") == api_name)


def file_inputs(config: dict) -> list[tuple[int, list[str]]]:
    """(fn_index, input component types) of every event that takes an image or a file."""
    kinds = {c["id"]: c["type"] for c in config["components"]}
    found = []
    for index, dep in enumerate(config["dependencies"]):
        types = [kinds[i] for i in dep["inputs"]]
        if any(t in ("image", "file") for t in types):
            found.append((index, types))
    return found


def gradio_event(client: httpx.Client, index: int, data: list, timeout: float = 120) -> dict:
    """Send one event as the page does (through Gradio's queue, or straight to
    /gradio_api/run/predict for an event that skips it) and wait for its end:
    {"success", "output"} or the queue's final message, or {"status", "detail"}
    when the request itself was refused."""
    if not queued(client, index):
        answer = client.post("/gradio_api/run/predict", json={"data": data, "fn_index": index,
                                                              "session_hash": secrets.token_hex(8)}, timeout=timeout)
        if answer.status_code != 200:
            return {"status": answer.status_code, "detail": answer.json().get("detail") or answer.json().get("error")}
        return {"success": True, "output": answer.json()}
    session = secrets.token_hex(8)
    answer = client.post("/gradio_api/queue/join", json={"data": data, "fn_index": index, "session_hash": session,
                                                         "event_data": None, "trigger_id": None})
    if answer.status_code != 200:
        return {"status": answer.status_code, "detail": answer.json().get("detail")}
    with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}, timeout=timeout) as events:
        for line in events.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") in ("process_completed", "unexpected_error"):
                    return message
    raise AssertionError("the event never completed")


def queued(client: httpx.Client, index: int) -> bool:
    config = getattr(client, "gradio_config", None) or gradio_config(client)
    client.gradio_config = config
    return config["dependencies"][index].get("queue") is not False


def file_data(path: str) -> dict:
    return {"path": path, "meta": {"_type": "gradio.FileData"}, "orig_name": Path(path).name}


def uploaded(client: httpx.Client, name: str, content: bytes) -> str:
    answer = client.post("/gradio_api/upload", files={"files": (name, content)})
    assert answer.status_code == 200, answer.text
    return answer.json()[0]
