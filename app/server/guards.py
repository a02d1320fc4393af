"""What every request to `capscope serve` passes before the app sees it.

Outermost first:
- `SecurityHeaders`: every answer says it may not be framed by another site
  (`frame-ancestors 'none'`, `X-Frame-Options`) and must not be sniffed.
- CORS (Starlette's middleware, added by `create_app`): off unless origins are
  configured (`capscope serve --cors-origin`); its presence also keeps Gradio
  from adding its own, which echoes origins.
- `CallerIdentity` (app/server/callers.py): who the request comes from, decided
  before any of its body is read.
- `BodyLimit`: bodies over their path's limit, and a stranger's over
  `ANONYMOUS_BODY_BYTES` whatever the path, are refused (413) as they arrive.
- `InFlightCap`: a caller's requests to the scorer beyond its cap are refused
  (429) before their bodies are read.
- `RequestGuard`: state-changing requests from another site are refused
  (signed-in REST calls that change something must also carry JSON or an
  `X-Requested-With` header: request_bodies.script_or_json, checked with the credentials
  by the API); JSON bodies with
  a lone surrogate, nested past `MAX_JSON_DEPTH` or of more than
  `MAX_JSON_VALUES` values, are refused (422); a body in UTF-16, UTF-32 or
  after a byte-order mark is handed on as plain UTF-8, so that the guard and
  the app read the same text; Gradio's upload route takes only a multipart
  form, never read here; a
  Gradio event may name only files that were uploaded to Gradio (a file data
  naming a server path or a URL is refused, 403), and Gradio's file route
  fetches no URL. Gradio's routes the page never calls are not there (404): its
  `token` route would hand any script on the page the session cookie.
"""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from capscope.common.in_flight import Busy, InFlight
from capscope.common.jsonl import too_deep
from capscope.common.limits import MAX_JSON_DEPTH
from capscope.server.callers import caller_of
from capscope.server.request_bodies import (GRADIO_PREFIX, GRADIO_UPLOAD, SAFE_METHODS, as_utf8, encodable,
                                            is_file_data, is_multipart, read_body, reads_body, replay, walk,
                                            with_length)

SECURITY_HEADERS = (
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
ANONYMOUS_BODY_BYTES = 64 * 2**10   # a body from someone not signed in (the sign-in form is far smaller)
MAX_JSON_VALUES = 100_000           # separators (",", ":") in one JSON body: 10,000 label pairs need 40,000
PARSE_ON_THREAD_BYTES = 64 * 2**10  # a JSON body at least this long is parsed in a worker thread
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_URL_LIKE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://|^data:|^//")
# Gradio's routes that capscope's page never calls: `token` gives any script on the page the session
# cookie's value (over HTTPS, where the browser sends it), undoing HttpOnly; the others serve Gradio's
# run history, vibe editing, profiling and hot reload, none of which a team's server offers
UNUSED_GRADIO_ROUTES = re.compile(r"^/gradio_api/(token|runs|run-history|vibe-[a-z-]+|undo-vibe-edit|profiling|"
                                  r"dev/reload|process_recording)(/.*)?$")


def refuse(status: int, detail: str):
    # a body refused unread is not read to its end either: the connection closes with the answer, so that a
    # client sending more than it may costs the server no reading (uvicorn would otherwise drain it)
    headers = {"Connection": "close"} if status == 413 else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


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
    uploads), `default` for the rest; `anonymous` at most for a caller who is
    not signed in (callers.CallerIdentity decides), whatever the path."""

    def __init__(self, app, default: int, by_path: dict[str, int] | None = None,
                 by_prefix: dict[str, int] | None = None, anonymous: int = ANONYMOUS_BODY_BYTES):
        self.app, self.default, self.anonymous = app, default, anonymous
        self.by_path, self.by_prefix = by_path or {}, by_prefix or {}

    def limit_for(self, path: str, signed_in: bool = True) -> int:
        if path in self.by_path:
            limit = self.by_path[path]
        else:
            limit = next((limit for prefix, limit in self.by_prefix.items() if path.startswith(prefix)), self.default)
        return limit if signed_in else min(limit, self.anonymous)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope["path"], caller_of(scope).signed_in)
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
        if problem is None and reads_body(headers, path, method):
            try:
                body = await read_body(receive)
            except HTTPException as err:  # over the body limit, raised as the body arrived
                return await refuse(err.status_code, err.detail)(scope, receive, send)
            read, (body, problem) = body, as_utf8(body)
            if problem is None:
                problem = await self.checked_body(path, body)
            if body is not read:
                scope = with_length(scope, len(body))
            receive = replay(body, receive)
        if problem is not None:
            return await refuse(*problem)(scope, receive, send)
        return await self.app(scope, receive, send)

    def request_problem(self, headers: Headers, path: str, method: str) -> tuple[int, str] | None:
        if UNUSED_GRADIO_ROUTES.match(path):
            return 404, "Not Found"
        if path.startswith(GRADIO_PREFIX + "file=") and _URL_LIKE.match(path[len(GRADIO_PREFIX + "file="):]):
            return 403, "this server fetches no URL"
        if method in SAFE_METHODS:
            return None
        if not self.same_site(headers):
            return 403, ("request from another site refused (capscope serve --cors-origin ORIGIN allows one)")
        if path.rstrip("/") == GRADIO_UPLOAD and not is_multipart(headers):
            return 415, "an upload is a multipart/form-data body"
        return None

    async def checked_body(self, path: str, body: bytes) -> tuple[int, str] | None:
        """`body_problem`, in a worker thread for a long body (parsing it must not hold the event loop)."""
        if len(body) < PARSE_ON_THREAD_BYTES:
            return self.body_problem(path, body)
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self.body_problem, path, body)

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
        if body.count(b",") + body.count(b":") > MAX_JSON_VALUES:
            return 413, f"a JSON body holds at most {MAX_JSON_VALUES} values"
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
        self.app, self.paths, self.state = app, paths, state
        self.refusal_delay_s = refusal_delay_s
        self.in_flight = InFlight(per_caller, "requests of this kind in flight")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.paths:
            return await self.app(scope, receive, send)
        caller = self.caller(scope)
        try:
            self.in_flight.enter(caller)
        except Busy as refusal:
            await asyncio.sleep(self.refusal_delay_s)
            response = JSONResponse({"detail": str(refusal)}, status_code=429, headers={"Retry-After": "1"})
            return await response(scope, receive, send)
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight.leave(caller)

    @staticmethod
    def caller(scope) -> str:
        return caller_of(scope).key


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
