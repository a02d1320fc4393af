"""The Content-Security-Policy of every answer: only the page's own scripts run.

The web UI's page (Gradio's, served at the UI's path) gets a fresh nonce per
answer, written into each of its `<script>` tags, and a policy that lets run
only scripts with that nonce and what they load (`'strict-dynamic'`: Gradio's
bundle and its chunks, and the `head` script it adds). No inline event
handler, `javascript:` link or injected `<script>` runs, whatever text a user
managed to put on the page; nothing is fetched from another site, no plugin
loads, and no `<base>` can point the page's links elsewhere. Every other answer
(JSON, images, files users uploaded, even one served as HTML) runs no script
at all. What Gradio needs keeps it from being stricter: inline styles (it sets
them by the thousand) and `'unsafe-eval'` (its HTML component compiles its
template with `new Function`; text a user sends is handed to it as a value,
never compiled). Gradio's page carries `<base href="./">`, which changes no
address on a page served at the UI's path: it is taken out, so that the policy
can forbid every `<base>` (`base-uri 'none'`).

FastAPI's interactive REST documentation (the app's `docs_url`) is a page of
its own: Swagger UI's two scripts (its bundle from its CDN and the inline
call that starts it) run by a nonce, its styles and icons from the same CDN;
nothing else runs there either.
"""
from __future__ import annotations

import re
import secrets

PAGE_POLICY = ("default-src 'self'; script-src 'nonce-{nonce}' 'strict-dynamic' 'unsafe-eval'; "
               "style-src 'self' 'unsafe-inline'; "
               "img-src 'self' data: blob:; font-src 'self' data:; media-src 'self' data: blob:; "
               "connect-src 'self'; worker-src 'self' blob:; frame-src 'none'; object-src 'none'; "
               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SWAGGER_CDN = "https://cdn.jsdelivr.net"  # where FastAPI's Swagger UI page takes its script and styles
DOCS_POLICY = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline' " + SWAGGER_CDN + "; "
               "img-src 'self' data: https://fastapi.tiangolo.com; font-src data:; connect-src 'self'; "
               "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
OTHER_POLICY = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox; " \
               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
_SCRIPT_TAG = re.compile(rb"<script(?=[\s>])")
_SAME_PAGE_BASE = re.compile(rb'<base href="\./"\s*/?>')  # Gradio's: the page's own folder, as without it


class ContentPolicy:
    """ASGI middleware: `PAGE_POLICY` with a nonce for the UI's page at `page_paths`,
    `OTHER_POLICY` for every other answer (see the module's docstring)."""

    def __init__(self, app, page_paths: frozenset[str] = frozenset({"/"})):
        self.app, self.page_paths = app, page_paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] == "GET" and scope["path"] in self.page_paths:
            return await self.app(_uncompressed(scope), receive, _NoncedPage(send, PAGE_POLICY))
        docs = getattr(scope.get("app"), "docs_url", None)  # FastAPI's Swagger UI page, if the app has one
        if scope["method"] == "GET" and docs and scope["path"] == docs:
            return await self.app(_uncompressed(scope), receive, _NoncedPage(send, DOCS_POLICY))
        return await self.app(scope, receive, _with_policy(send, OTHER_POLICY))


def _uncompressed(scope) -> dict:
    """The request without Accept-Encoding: a page is rewritten here, so it must come as text."""
    return {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]}


def _with_policy(send, policy: str):
    async def sending(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": _policy_headers(message, policy)}
        await send(message)

    return sending


def _policy_headers(message, policy: str, length: int | None = None) -> list:
    kept = [(k, v) for k, v in message.get("headers", [])
            if k.lower() != b"content-security-policy" and (length is None or k.lower() != b"content-length")]
    extra = [] if length is None else [(b"content-length", str(length).encode())]
    return [*kept, (b"content-security-policy", policy.encode()), *extra]


class _NoncedPage:
    """A `send` that holds an HTML answer whole, writes a fresh nonce into its script
    tags, takes out Gradio's same-page `<base>` and sends it with `policy` (its
    `{nonce}` filled in); any other answer passes with `OTHER_POLICY`."""

    def __init__(self, send, policy: str):
        self.send, self.policy, self.start, self.body = send, policy, None, []
        self.passing = None

    async def __call__(self, message):
        if message["type"] == "http.response.start":
            kinds = [v for k, v in message.get("headers", []) if k.lower() == b"content-type"]
            if not kinds or not kinds[0].lower().startswith(b"text/html"):
                self.passing = _with_policy(self.send, OTHER_POLICY)
                return await self.passing(message)
            self.start = message
            return None
        if self.passing is not None or message["type"] != "http.response.body":
            return await (self.passing or self.send)(message)
        self.body.append(message.get("body", b""))
        if message.get("more_body"):
            return None  # the page is held whole (Gradio's is about 400 KB) to write its nonces
        nonce = secrets.token_urlsafe(18)
        page = _SCRIPT_TAG.sub(b'<script nonce="' + nonce.encode() + b'"', b"".join(self.body))
        page = _SAME_PAGE_BASE.sub(b"", page, count=1)
        headers = _policy_headers(self.start, self.policy.format(nonce=nonce), len(page))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": page, "more_body": False})
