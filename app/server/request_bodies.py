"""Reading a request as the guards of app/server/guards.py do: which bodies
they read, in what encoding, every value inside parsed JSON, and handing the
body already read on to the app."""
from __future__ import annotations

import json

from starlette.datastructures import Headers

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
GRADIO_PREFIX = "/gradio_api/"
GRADIO_UPLOAD = GRADIO_PREFIX + "upload"


def script_or_json(method: str, headers) -> bool:
    """A request that changes something carries JSON or an `X-Requested-With`
    header, neither of which a form on another site can send without a CORS
    preflight (a browser adds cached HTTP Basic credentials to a form's POST by itself)."""
    return method in SAFE_METHODS or is_json(headers) or "x-requested-with" in headers


def reads_body(headers: Headers, path: str, method: str) -> bool:
    """Whether the guard reads the body: JSON, and anything to Gradio's routes (which read JSON whatever the
    Content-Type) but its upload route's multipart form, which Gradio streams to disk itself."""
    if method in SAFE_METHODS:
        return False
    if path.startswith(GRADIO_PREFIX):
        return path.rstrip("/") != GRADIO_UPLOAD
    return is_json(headers)


def is_multipart(headers: Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "multipart/form-data"


def as_utf8(body: bytes) -> tuple[bytes, tuple[int, str] | None]:
    """(the body as UTF-8 without a byte-order mark, problem or None). JSON's readers (Python's, and
    so FastAPI's and Gradio's) take UTF-16 and UTF-32 and a BOM too: the guard must read what they read."""
    if not body or body[0] < 0x80 and body[:2].find(b"\x00") < 0:
        return body, None  # plain ASCII-led UTF-8 without a BOM: the common case, not copied
    encoding = json.detect_encoding(body)
    if encoding == "utf-8":
        return body, None
    try:
        return body.decode(encoding).encode("utf-8"), None
    except (UnicodeDecodeError, UnicodeEncodeError):
        return body, (400, f"the body is not valid {encoding.upper()} text")


def with_length(scope, length: int):
    """The scope with its Content-Length set to the body handed on (a BOM dropped or the text re-encoded)."""
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


def is_json(headers: Headers) -> bool:
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def is_file_data(value) -> bool:
    """What Gradio treats as a file: a dict whose `meta._type` is gradio.FileData."""
    return isinstance(value, dict) and isinstance(value.get("meta"), dict) \
        and value["meta"].get("_type") == "gradio.FileData"


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def walk(data):
    """Every value (and key) inside parsed JSON, without recursion."""
    stack = [data]
    while stack:
        value = stack.pop()
        yield value
        if isinstance(value, dict):
            stack.extend(value.values())
            stack.extend(value)
        elif isinstance(value, list):
            stack.extend(value)


async def read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def replay(body: bytes, receive):
    """A `receive` that hands the app the body already read, then the client's own messages (its disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
