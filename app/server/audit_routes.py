"""The audit log over REST (docs/formats.md §8): admins read it, filtered and
paged, and export it whole; no route changes or deletes a row."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import StreamingResponse

from capscope.annotation import audit


def audit_router(admin_user) -> APIRouter:
    """The routes, each behind `admin_user` (the API's admin dependency)."""
    router = APIRouter(dependencies=[Depends(admin_user)])

    @router.get("/api/audit")
    def audit_events(store=Depends(_store), action: str | None = Query(None, max_length=40),
                     actor: str | None = Query(None, max_length=200), since: datetime | None = None,
                     until: datetime | None = None, page: int = Query(1, ge=1, le=10**9),
                     page_size: int = Query(50, ge=1, le=audit.MAX_PAGE_SIZE)) -> dict:
        """Newest first: {"total", "page", "page_size", "events": [{"id", "at", "actor", "action", "address",
        "target", "details"}]}; `action` one of the log's actions, `since`/`until` ISO times (UTC)."""
        _check_action(action)
        return audit.events(store, action=action, actor=actor, since=_naive(since), until=_naive(until),
                            page=page, page_size=page_size)

    @router.get("/api/audit/export")
    def audit_export(store=Depends(_store), format: Literal["jsonl", "csv"] = "jsonl",
                     action: str | None = Query(None, max_length=40), actor: str | None = Query(None, max_length=200),
                     since: datetime | None = None, until: datetime | None = None):
        """Every row, oldest first, streamed as JSON lines or CSV."""
        _check_action(action)
        rows = audit.iter_export(store, format, action=action, actor=actor, since=_naive(since),
                                 until=_naive(until))
        media = "application/x-ndjson" if format == "jsonl" else "text/csv"
        return StreamingResponse(rows, media_type=media,
                                 headers={"Content-Disposition": f'attachment; filename="capscope-audit.{format}"'})

    return router


def _store(request: Request):
    return request.app.state.store


def _check_action(action: str | None) -> None:
    if action is not None and action not in audit.ACTIONS:
        raise HTTPException(422, f"unknown action {action!r}; choose from {', '.join(audit.ACTIONS)}")


def _naive(moment: datetime | None) -> datetime | None:
    """A time as the log stores it: UTC without a zone."""
    if moment is None or moment.tzinfo is None:
        return moment
    from datetime import timezone

    return moment.astimezone(timezone.utc).replace(tzinfo=None)
