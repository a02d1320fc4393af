"""What every request to `capscope serve` passes before the app sees it.

Outermost first:
- `SecurityHeaders`: every answer says it may not be framed by another site
  (`frame-ancestors 'none'`, `X-Frame-Options`) and must not be sniffed.
- CORS (Starlette's middleware, added by `create_app`): off unless origins are
  configured (`capscope serve --cors-origin`); its presence also keeps Gradio
  from adding its own, which echoes origins.
- `BodyLimit`: bodies over their path's limit are refused (413) as they arrive.
- `InFlightCap`: a caller's requests to the scorer beyond its cap are refused
  (429) before their bodies are read.
- `RequestGuard`: state-changing requests from another site are refused
  (signed-in REST calls that change something must also carry JSON or an
  `X-Requested-With` header: `script_or_json`, checked with the credentials
  by the API); JSON bodies with
  a lone surrogate, or nested past `MAX_JSON_DEPTH`, are refused (422); a
  Gradio event may name only files that were uploaded to Gradio (a file data
  naming a server path or a URL is refused, 403), and Gradio's file route
  fetches no URL.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from capscope.common.jsonl import too_deep
from capscope.common.limits import MAX_JSON_DEPTH

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_HEADERS = (
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
GRADIO_PREFIX = "/gradio_api/"
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_URL_LIKE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://|^data:|^//")


def refuse(status: int, detail: str):
    return JSONResponse({"detail": detail}, status_code=status)


class SecurityHeaders:
    """Add `SECURITY_HEADERS` to every HTTP answer that does not set them itself."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


class BodyLimit:
    """Reject request bodies over the limit with 413 before the app reads them
    whole: `by_path` for exact paths, `by_prefix` for path prefixes (Gradio's
    uploads), `default` for the rest."""

    def __init__(self, app, default: int, by_path: dict[str, int] | None = None,
                 by_prefix: dict[str, int] | None = None):
        self.app, self.default = app, default
        self.by_path, self.by_prefix = by_path or {}, by_prefix or {}

    def limit_for(self, path: str) -> int:
        if path in self.by_path:
            return self.by_path[path]
        return next((limit for prefix, limit in self.by_prefix.items() if path.startswith(prefix)), self.default)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope["path"])
        declared = Headers(scope=scope).get("content-length")
        if declared is not None:
            problem = _declared_length_problem(declared, limit)
            if problem:
                return await refuse(*problem)(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, f"request body over {limit} bytes")
            return message

        return await self.app(scope, limited_receive, send)


def _declared_length_problem(declared: str, limit: int) -> tuple[int, str] | None:
    try:
        length = int(declared)
    except ValueError:
        return 400, "malformed Content-Length"
    if length > limit:
        return 413, f"request body is {length} bytes (limit {limit})"
    return None


class RequestGuard:
    """Cross-site, content-type and JSON-body checks (see the module's docstring).
    `origins`: the other sites allowed to call (`--cors-origin`); `upload_folder`:
    where Gradio keeps uploaded files (the only files a Gradio event may name)."""

    def __init__(self, app, origins: tuple[str, ...] = (), upload_folder: str | Path | None = None):
        self.app = app
        self.origins = frozenset(origin.rstrip("/") for origin in origins)
        self._upload_folder = Path(upload_folder) if upload_folder else None

    @property
    def upload_folder(self) -> Path:
        if self._upload_folder is None:
            from gradio.utils import get_upload_folder

            return Path(get_upload_folder()).resolve()
        return self._upload_folder.resolve()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers, path, method = Headers(scope=scope), scope["path"], scope["method"]
        problem = self.request_problem(headers, path, method)
        if problem is None and method not in SAFE_METHODS and (is_json(headers) or path.startswith(GRADIO_PREFIX)):
            try:
                body = await read_body(receive)
            except HTTPException as err:  # over the body limit, raised as the body arrived
                return await refuse(err.status_code, err.detail)(scope, receive, send)
            problem = self.body_problem(path, body)
            receive = replay(body, receive)
        if problem is not None:
            return await refuse(*problem)(scope, receive, send)
        return await self.app(scope, receive, send)

    def request_problem(self, headers: Headers, path: str, method: str) -> tuple[int, str] | None:
        if path.startswith(GRADIO_PREFIX + "file=") and _URL_LIKE.match(path[len(GRADIO_PREFIX + "file="):]):
            return 403, "this server fetches no URL"
        if method in SAFE_METHODS:
            return None
        if not self.same_site(headers):
            return 403, ("request from another site refused (capscope serve --cors-origin ORIGIN allows one)")
        return None

    def same_site(self, headers: Headers) -> bool:
        """No Origin (not a browser, or a same-site navigation) and not marked
        cross-site by the browser; or an Origin of this host or a configured one."""
        origin = headers.get("origin")
        if origin is None:
            return headers.get("sec-fetch-site") != "cross-site"
        if origin.rstrip("/") in self.origins:
            return True
        host = urlsplit(origin).netloc if origin != "null" else None
        return bool(host) and host in (headers.get("host"), headers.get("x-forwarded-host"))

    def body_problem(self, path: str, body: bytes) -> tuple[int, str] | None:
        needs_files = path.startswith(GRADIO_PREFIX)
        if not needs_files and not _ESCAPED_SURROGATE.search(body):
            return None
        try:
            text = body.decode("utf-8")
            if too_deep(text):
                return 422, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
            data = json.loads(text)
        except ValueError:
            return None  # not UTF-8 JSON: the app answers that itself
        for value in walk(data):
            if isinstance(value, str) and not encodable(value):
                return 422, "a text holds a lone surrogate (not valid Unicode)"
            if needs_files and is_file_data(value) and not self.uploaded(value.get("path")):
                return 403, "a file must be uploaded to this server before an event names it"
        return None

    def uploaded(self, path) -> bool:
        if not isinstance(path, str) or not path or _URL_LIKE.match(path):
            return False
        try:
            return Path(path).resolve().is_relative_to(self.upload_folder)
        except (OSError, ValueError, RuntimeError):
            return False


class InFlightCap:
    """At most `per_caller` requests in flight to each of `paths` per caller,
    refused with 429 before their bodies are read, after `refusal_delay_s`:
    one caller's flood costs the server next to nothing beyond the scorings the
    caller is allowed (ScoreGate decides those), and a client that retries at
    once is slowed to a refusal per delay per connection instead of a busy
    loop. The caller: the REST credentials presented, else the user of the web
    UI's session (`state.session_user(token)`, set once the UI is mounted),
    else the session cookie itself."""

    def __init__(self, app, paths: frozenset[str], per_caller: int, state=None, refusal_delay_s: float = 0.5):
        self.app, self.paths, self.per_caller, self.state = app, paths, per_caller, state
        self.refusal_delay_s = refusal_delay_s
        self.in_flight: dict[str, int] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.paths:
            return await self.app(scope, receive, send)
        caller = self.caller(Headers(scope=scope))
        if self.in_flight.get(caller, 0) >= self.per_caller:
            await asyncio.sleep(self.refusal_delay_s)
            response = JSONResponse({"detail": f"you already have {self.per_caller} requests of this kind in flight; "
                                               "wait for their answers"}, status_code=429, headers={"Retry-After": "1"})
            return await response(scope, receive, send)
        self.in_flight[caller] = self.in_flight.get(caller, 0) + 1
        try:
            return await self.app(scope, receive, send)
        finally:
            left = self.in_flight[caller] - 1
            if left:
                self.in_flight[caller] = left
            else:
                del self.in_flight[caller]

    def caller(self, headers: Headers) -> str:
        credentials = headers.get("authorization")
        if credentials:
            return "basic:" + hashlib.sha256(credentials.encode()).hexdigest()
        token = session_token(headers.get("cookie", ""))
        user = getattr(self.state, "session_user", None)
        name = user(token) if user is not None and token else None
        return f"user:{name}" if name else "session:" + hashlib.sha256((token or "").encode()).hexdigest()


def session_token(cookies: str) -> str | None:
    """The web UI's session token from a Cookie header (Gradio's access-token cookies)."""
    for part in cookies.split(";"):
        name, _, value = part.strip().partition("=")
        if name.startswith("access-token") and value:
            return value
    return None


class ThreadBudget:
    """Sets the worker threads that synchronous handlers run in (anyio's
    default limiter, 40) once the event loop runs: scorings waiting for their
    turn hold a thread each (ScoreGate lets 32 wait), and a label save must
    still find one."""

    def __init__(self, app, threads: int):
        self.app, self.threads, self.done = app, threads, False

    async def __call__(self, scope, receive, send):
        if not self.done:
            import anyio.to_thread

            anyio.to_thread.current_default_thread_limiter().total_tokens = self.threads
            self.done = True
        return await self.app(scope, receive, send)


def script_or_json(method: str, headers) -> bool:
    """A request that changes something carries JSON or an `X-Requested-With`
    header, neither of which a form on another site can send without a CORS
    preflight (a browser adds cached HTTP Basic credentials to a form's POST by itself)."""
    return method in SAFE_METHODS or is_json(headers) or "x-requested-with" in headers


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
