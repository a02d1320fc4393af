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
them by the thousand), `'unsafe-eval'` (its HTML component compiles its
template with `new Function`; text a user sends is handed to it as a value,
never compiled), and its own `<base href>` of the page's origin.
"""
from __future__ import annotations

import re
import secrets

PAGE_POLICY = ("default-src 'self'; script-src 'nonce-{nonce}' 'strict-dynamic' 'unsafe-eval'; "
               "style-src 'self' 'unsafe-inline'; "
               "img-src 'self' data: blob:; font-src 'self' data:; media-src 'self' data: blob:; "
               "connect-src 'self'; worker-src 'self' blob:; frame-src 'self'; object-src 'none'; "
               "base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
OTHER_POLICY = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox; " \
               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
_SCRIPT_TAG = re.compile(rb"<script(?=[\s>])")


class ContentPolicy:
    """ASGI middleware: `PAGE_POLICY` with a nonce for the UI's page at `page_paths`,
    `OTHER_POLICY` for every other answer (see the module's docstring)."""

    def __init__(self, app, page_paths: frozenset[str] = frozenset({"/"})):
        self.app, self.page_paths = app, page_paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] in self.page_paths and scope["method"] == "GET":
            return await self.app(scope, receive, _NoncedPage(send))
        return await self.app(scope, receive, _with_policy(send, OTHER_POLICY))


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
    tags and sends it with `PAGE_POLICY`; any other answer passes with `OTHER_POLICY`."""

    def __init__(self, send):
        self.send, self.start, self.body = send, None, []
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
        headers = _policy_headers(self.start, PAGE_POLICY.format(nonce=nonce), len(page))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": page, "more_body": False})
