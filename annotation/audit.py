"""The audit log: who did what, when, from which address.

One row per sign-in (ok and failed), sign-out, user added, replaced (a new
password), disabled or enabled, role change, import, export, gold written (with
its method), adjudication, training started, model activated; `ACTIONS` names
them, and the releases and review decisions still to come. Rows are only ever
added: nothing in capscope changes or deletes one.

Who and from where: what records an action may say so; otherwise the one
acting now, set by `acting_as` around a request's work (the server sets it for
every request, the web UI's admin handlers for theirs, the command line for
its commands).
"""
from __future__ import annotations

import contextvars
import csv
import io
import json
from contextlib import contextmanager
from datetime import datetime
from typing import Iterator

from sqlalchemy import func, select

from capscope.common.spreadsheet import csv_cells
from capscope.db import AuditEvent, Store

# "release made" and "review decision" are for the releases and review steps still to come
ACTIONS = ("sign-in", "sign-in failed", "sign-out", "user added", "user replaced", "user disabled", "user enabled",
           "role changed", "import", "export", "gold written", "adjudication", "training started", "model activated",
           "control marked", "control unmarked", "controls set", "queue order set", "review set", "release made",
           "review decision", "region removed")
MAX_PAGE_SIZE = 500
MAX_DETAILS_CHARS = 2000
FIELDS = ("id", "at", "actor", "action", "address", "target", "details")
_acting: contextvars.ContextVar[tuple[str | None, str | None]] = contextvars.ContextVar("capscope_acting",
                                                                                        default=(None, None))


@contextmanager
def acting_as(actor: str | None, address: str | None = None) -> Iterator[None]:
    """Record what happens inside as done by `actor` from `address`."""
    token = _acting.set((actor, address))
    try:
        yield
    finally:
        _acting.reset(token)


def acting_now() -> str | None:
    """Who is acting now (`acting_as`, `set_acting`), if anyone said."""
    return _acting.get()[0]


def set_acting(actor: str | None, address: str | None = None) -> None:
    """`acting_as` for the rest of this context (an ASGI request's)."""
    _acting.set((actor, address))


def record(store: Store, action: str, *, target: str | None = None, details: dict | None = None,
           actor: str | None = None, address: str | None = None) -> None:
    """Add one row, in a write of its own."""
    store.run_write(lambda session: record_in(session, action, target=target, details=details, actor=actor,
                                              address=address))


def record_in(session, action: str, *, target: str | None = None, details: dict | None = None,
              actor: str | None = None, address: str | None = None) -> None:
    """Add one row in the session's transaction (it is kept only if the action is)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    acting, from_address = _acting.get()
    session.add(AuditEvent(action=action, actor=_cut(actor or acting, 200), address=_cut(address or from_address, 100),
                           target=_cut(target, 300), details=_bounded(details)))


def events(store: Store, *, action: str | None = None, actor: str | None = None, since: datetime | None = None,
           until: datetime | None = None, page: int = 1, page_size: int = 50) -> dict:
    """A page of rows, newest first: {"total", "page", "page_size", "events": [...]}."""
    query = _filtered(select(AuditEvent), action, actor, since, until)
    with store.read() as session:
        total = session.scalar(_filtered(select(func.count(AuditEvent.id)), action, actor, since, until))
        rows = session.scalars(query.order_by(AuditEvent.id.desc()).offset((page - 1) * page_size)
                               .limit(page_size)).all()
        return {"total": total, "page": page, "page_size": page_size, "events": [event_view(e) for e in rows]}


def iter_export(store: Store, fmt: str = "jsonl", *, action: str | None = None, actor: str | None = None,
                since: datetime | None = None, until: datetime | None = None, batch: int = 1000) -> Iterator[str]:
    """Every row (oldest first) as JSON lines or CSV, read in batches: streamed, never held whole."""
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"audit export format must be jsonl or csv, not {fmt!r}")
    if fmt == "csv":
        yield _csv_line(FIELDS)
    after = 0
    while True:
        with store.read() as session:
            rows = session.scalars(_filtered(select(AuditEvent), action, actor, since, until)
                                   .where(AuditEvent.id > after).order_by(AuditEvent.id).limit(batch)).all()
            views = [event_view(e) for e in rows]
        if not views:
            return
        for view in views:
            yield json.dumps(view) + "\n" if fmt == "jsonl" else _csv_line(_csv_cells(view))
        after = views[-1]["id"]


def event_view(event: AuditEvent) -> dict:
    return {"id": event.id, "at": event.at.isoformat(), "actor": event.actor, "action": event.action,
            "address": event.address, "target": event.target, "details": event.details}


def _filtered(query, action, actor, since, until):
    if action is not None:
        query = query.where(AuditEvent.action == action)
    if actor is not None:
        query = query.where(AuditEvent.actor == actor)
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if until is not None:
        query = query.where(AuditEvent.at < until)
    return query


def _csv_cells(view: dict) -> list:
    return csv_cells([view[f] if f != "details" else json.dumps(view[f]) for f in FIELDS])


def _csv_line(cells) -> str:
    out = io.StringIO()
    csv.writer(out).writerow(cells)
    return out.getvalue()


def _bounded(details: dict | None) -> dict | None:
    """Details as plain JSON (a path or a number type becomes text), at most `MAX_DETAILS_CHARS` long."""
    if details is None:
        return None
    text = json.dumps(details, default=str)
    return json.loads(text) if len(text) <= MAX_DETAILS_CHARS else {"cut": text[:MAX_DETAILS_CHARS]}


def _cut(text: str | None, most: int) -> str | None:
    return None if text is None else str(text)[:most]
