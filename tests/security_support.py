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


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """(key file, certificate file) for 127.0.0.1, made now: a team's HTTPS, on loopback."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .sign(key, hashes.SHA256()))
    key_file, cert_file = folder / "key.pem", folder / "cert.pem"
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return key_file, cert_file
