"""An annotator's labels of one item as rows, and their history: the label state
(`LabelState`), read from and written to the label and tie rows, and the
append-only revisions (`LabelRevision`) every change adds. The calls that change
labels (annotation/workflow.py), review and region removal build on these."""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import delete, select, tuple_

from capscope.db import Assignment, Label, LabelRevision, Link


class LabelState(NamedTuple):
    """One annotator's labels of one item: incorrect tokens, mentioned regions,
    the status, junk regions and (token, region) ties."""
    tokens: frozenset[int]
    regions: frozenset[int]
    status: str
    junk: frozenset[int] = frozenset()
    links: frozenset[tuple[int, int]] = frozenset()

    def without_regions(self, gone: set[int]) -> LabelState:
        """These labels with no mention, junk mark or tie on the regions `gone`."""
        return LabelState(self.tokens, self.regions - gone, self.status, self.junk - gone,
                          frozenset(pair for pair in self.links if pair[1] not in gone))


def current_state(session, assignment: Assignment) -> LabelState:
    rows = session.execute(select(Label.kind, Label.index).where(Label.assignment_id == assignment.id)).all()
    links = session.execute(select(Link.token_index, Link.region_index)
                            .where(Link.assignment_id == assignment.id)).all()
    return LabelState(frozenset(i for k, i in rows if k == "token"), frozenset(i for k, i in rows if k == "region"),
                      assignment.status, frozenset(i for k, i in rows if k == "junk"),
                      frozenset((t, r) for t, r in links))


def head_revision(session, assignment: Assignment) -> LabelRevision | None:
    return session.scalar(select(LabelRevision).where(LabelRevision.assignment_id == assignment.id,
                                                      LabelRevision.revision == assignment.revision))


def write_labels(session, assignment: Assignment, old: LabelState, new: LabelState) -> None:
    """Make the assignment's label and tie rows `new` (they are `old` now)."""
    _write_label_rows(session, assignment, "token", old.tokens, new.tokens)
    _write_label_rows(session, assignment, "region", old.regions, new.regions)
    _write_label_rows(session, assignment, "junk", old.junk, new.junk)
    _write_links(session, assignment, old.links, new.links)


def _write_label_rows(session, assignment: Assignment, kind: str, old: set[int], new: set[int]) -> None:
    gone = old - new
    if gone:
        session.execute(delete(Label).where(Label.assignment_id == assignment.id, Label.kind == kind,
                                            Label.index.in_(gone)))
    session.add_all(Label(assignment_id=assignment.id, caption_id=assignment.caption_id, kind=kind, index=i)
                    for i in sorted(new - old))


def _write_links(session, assignment: Assignment, old: frozenset, new: frozenset) -> None:
    gone = old - new
    if gone:  # one statement, however many ties go: the write lock is held for one
        session.execute(delete(Link).where(Link.assignment_id == assignment.id,
                                           tuple_(Link.token_index, Link.region_index).in_(sorted(gone)))
                        .execution_options(synchronize_session=False))
    session.add_all(Link(assignment_id=assignment.id, caption_id=assignment.caption_id, token_index=t,
                         region_index=r) for t, r in sorted(new - old))


def append_revision(session, assignment: Assignment, state: LabelState, action: str, undo_to: int | None,
                    now: datetime, *, actor: str | None = None, comment: str | None = None) -> LabelRevision:
    """The assignment's next revision: `state` after `action`, by `actor` when it is not the
    annotator (a reviewer), with their `comment`. The assignment's status is `state.status`."""
    assignment.status = state.status
    assignment.revision += 1
    revision = LabelRevision(assignment_id=assignment.id, revision=assignment.revision, action=action,
                             status=state.status, incorrect_tokens=sorted(state.tokens),
                             mentioned_regions=sorted(state.regions), junk_regions=sorted(state.junk),
                             links=[list(pair) for pair in sorted(state.links)], undo_to=undo_to, created_at=now,
                             actor=actor, comment=comment)
    session.add(revision)
    session.flush()
    return revision


def head_undo_to(session, assignment: Assignment) -> int | None:
    """Where an undo from the assignment's current revision goes (None: nothing to undo)."""
    head = head_revision(session, assignment)
    return None if head is None else head.undo_to
