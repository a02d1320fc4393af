"""The annotation store's tables (SQLAlchemy 2.0 typed ORM).

Times are naive UTC datetimes everywhere, so SQLite and PostgreSQL compare
them the same way. The schema itself is created and changed only through the
Alembic migrations in `migrations/`; `tests/test_db_schema.py` checks that the
migrations and these models agree.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ROLES = ("admin", "annotator", "reviewer")
ASSIGNMENT_STATUSES = ("draft", "submitted", "skipped")
LABEL_KINDS = ("token", "region", "junk")  # junk: a region that is no object
GOLD_SOURCES = ("import", "majority", "adjudicated", "dawid-skene", "model-aware")
# a submitted judgement in a dataset with review on: None (no review), then pending until a reviewer
# accepts it, corrects it or sends it back (returned: a draft again, for its annotator)
REVIEW_STATES = ("pending", "accepted", "corrected", "returned")


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict: JSON, list: JSON, datetime: DateTime()}


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # which eligible item the annotation queue hands out first (annotation/queue.py)
    queue_order: Mapped[str] = mapped_column(String(20), default="sequential", server_default="sequential")
    queue_seed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # label quality (annotation/controls.py): the share of handed-out items that are controls,
    # whether an annotator sees a control's answer once submitted, the control accuracy under
    # which an annotator is flagged, and whether submitted judgements go to review
    control_rate: Mapped[float] = mapped_column(Float, default=0.1, server_default="0.1")
    show_control_answers: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    min_control_accuracy: Mapped[float | None] = mapped_column(Float, default=None)
    review: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")


class Image(Base):
    """One image file, found again by the hash of its bytes."""

    __tablename__ = "images"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    path: Mapped[str] = mapped_column(Text)
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    n_bytes: Mapped[int] = mapped_column(Integer)
    # where the regions came from ("file", a proposer name, "none" = not proposed yet)
    regions_source: Mapped[str] = mapped_column(String(40), default="none")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    regions: Mapped[list[Region]] = relationship(
        back_populates="image", order_by="Region.index", cascade="all, delete-orphan"
    )


class Region(Base):
    __tablename__ = "regions"
    __table_args__ = (UniqueConstraint("image_id", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(40))
    x0: Mapped[float] = mapped_column(Float)
    y0: Mapped[float] = mapped_column(Float)
    x1: Mapped[float] = mapped_column(Float)
    y1: Mapped[float] = mapped_column(Float)
    mask_rle: Mapped[dict | None] = mapped_column(JSON, default=None)  # COCO RLE, counts as str
    confidence: Mapped[float | None] = mapped_column(Float, default=None)
    # a region an annotator added: who (the user's name, kept through export and import), when,
    # and the clicks and box that made it; None for a proposal, which every annotator saw
    added_by: Mapped[str | None] = mapped_column(String(100), default=None)
    created_at: Mapped[datetime | None] = mapped_column(default=None)
    prompts: Mapped[dict | None] = mapped_column(JSON, default=None)
    # a region taken away keeps its row and index (labels name regions by index): when, by whom,
    # and how (REMOVED_HOW: undone or withdrawn by the one who added it, removed by an admin)
    removed_at: Mapped[datetime | None] = mapped_column(default=None)
    removed_by: Mapped[str | None] = mapped_column(String(100), default=None)
    removed_how: Mapped[str | None] = mapped_column(String(20), default=None)

    image: Mapped[Image] = relationship(back_populates="regions")

    @property
    def box(self) -> list[float]:
        return [self.x0, self.y0, self.x1, self.y1]


class Caption(Base):
    """One caption of one image: the unit annotators label (an "item")."""

    __tablename__ = "captions"
    __table_args__ = (UniqueConstraint("dataset_id", "external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    external_id: Mapped[str] = mapped_column(String(200))
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id"), index=True)
    text: Mapped[str] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200), default=None)
    references: Mapped[list] = mapped_column(JSON, default=list)
    content_hash: Mapped[str] = mapped_column(String(64))
    annotators_needed: Mapped[int] = mapped_column(Integer, default=3)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # place in its dataset's random / uncertainty queue, lowest first; None: after the ranked ones, by id
    queue_rank: Mapped[float | None] = mapped_column(Float, default=None, index=True)
    # an item with gold that the queue mixes into every annotator's work to measure them
    control: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")

    tokens: Mapped[list[Token]] = relationship(order_by="Token.index", cascade="all, delete-orphan")
    image: Mapped[Image] = relationship()
    dataset: Mapped[Dataset] = relationship()


class Token(Base):
    __tablename__ = "tokens"
    __table_args__ = (UniqueConstraint("caption_id", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    start: Mapped[int] = mapped_column(Integer)
    end: Mapped[int] = mapped_column(Integer)
    semantic: Mapped[bool] = mapped_column(Boolean)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    password_hash: Mapped[str] = mapped_column(String(300))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # raised whenever the user is disabled, enabled, given a new password or role: a session
    # issued before never comes back, not even after a disable and an enable
    session_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # the dataset Annotate hands this user items from (None: every dataset, the demo dataset last)
    annotate_dataset: Mapped[str | None] = mapped_column(String(200), default=None)


class AuditEvent(Base):
    """Who did what, when, from where: one row per sign-in, sign-out, change of a user,
    import, export, gold written, adjudication, training started, model activated.
    Only ever added to (annotation/audit.py); nothing in capscope changes or deletes one."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_action_at", "action", "at"),
                      Index("ix_audit_events_actor_at", "actor", "at"))

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    actor: Mapped[str | None] = mapped_column(String(200), default=None)  # a user, "command line (...)", or None
    action: Mapped[str] = mapped_column(String(40))
    address: Mapped[str | None] = mapped_column(String(100), default=None)
    target: Mapped[str | None] = mapped_column(String(300), default=None)
    details: Mapped[dict | None] = mapped_column(JSON, default=None)


class Assignment(Base):
    """A caption given to one annotator. `status` is draft until submitted or
    skipped; a draft whose lease has expired no longer holds a slot."""

    __tablename__ = "assignments"
    __table_args__ = (
        UniqueConstraint("caption_id", "user_id"),
        Index("ix_assignments_user_status", "user_id", "status"),
        Index("ix_assignments_caption_status", "caption_id", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(20), default="draft")
    lease_expires_at: Mapped[datetime] = mapped_column()
    revision: Mapped[int] = mapped_column(Integer, default=0)
    time_spent_ms: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(default=None)
    review_status: Mapped[str | None] = mapped_column(String(20), default=None)  # REVIEW_STATES
    review_comment: Mapped[str | None] = mapped_column(Text, default=None)
    reviewer: Mapped[str | None] = mapped_column(String(100), default=None)  # the reviewer's name
    reviewed_at: Mapped[datetime | None] = mapped_column(default=None)

    caption: Mapped[Caption] = relationship()
    user: Mapped[User] = relationship()


class Label(Base):
    """The current positive labels of an assignment: an incorrect token or a
    mentioned region. Anything absent is correct / unmentioned once submitted."""

    __tablename__ = "labels"
    __table_args__ = (
        UniqueConstraint("assignment_id", "kind", "index"),
        Index("ix_labels_caption_kind_index", "caption_id", "kind", "index"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(10))
    index: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Link(Base):
    """A word an annotator tied to the region it speaks of (current state, like `Label`)."""

    __tablename__ = "links"
    __table_args__ = (
        UniqueConstraint("assignment_id", "token_index", "region_index"),
        Index("ix_links_caption", "caption_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"))
    token_index: Mapped[int] = mapped_column(Integer)
    region_index: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LabelRevision(Base):
    """Append-only history: the full label state after every change.
    `undo_to` is the revision whose labels an undo from this state restores."""

    __tablename__ = "label_revisions"
    __table_args__ = (UniqueConstraint("assignment_id", "revision"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    incorrect_tokens: Mapped[list] = mapped_column(JSON)
    mentioned_regions: Mapped[list] = mapped_column(JSON)
    # None in revisions written before regions could be junk and words tied: none were
    junk_regions: Mapped[list | None] = mapped_column(JSON, default=None)
    links: Mapped[list | None] = mapped_column(JSON, default=None)  # [[token, region], ...]
    undo_to: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # a step taken by someone other than the annotator (a reviewer), and what they wrote
    actor: Mapped[str | None] = mapped_column(String(100), default=None)  # a user's name
    comment: Mapped[str | None] = mapped_column(Text, default=None)
    # the region an "add region" step added (an undo back to that step names it too): undo takes it back
    region: Mapped[int | None] = mapped_column(Integer, default=None)


class Flag(Base):
    """An annotator's note on an item: unsure, bad image, or a free comment."""

    __tablename__ = "flags"

    id: Mapped[int] = mapped_column(primary_key=True)
    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(30))
    comment: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Prediction(Base):
    """A model's scores for a caption, shown (when asked) as pre-annotation."""

    __tablename__ = "predictions"
    __table_args__ = (UniqueConstraint("caption_id", "metric", "model_version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(50))
    model_version: Mapped[str] = mapped_column(String(200))
    scores: Mapped[dict] = mapped_column(JSON, default=dict)
    token_scores: Mapped[list] = mapped_column(JSON, default=list)
    region_scores: Mapped[list] = mapped_column(JSON, default=list)
    # mean closeness of the token scores to the decision threshold, 0..1
    uncertainty: Mapped[float | None] = mapped_column(Float, default=None)
    # what the word threshold is multiplied by for these token scores (a fine-tuned
    # checkpoint's fitted scale); None: 1, the token rule's own threshold
    word_scale: Mapped[float | None] = mapped_column(Float, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class GoldLabel(Base):
    """The adjudicated (or imported) label of every token and region of a caption."""

    __tablename__ = "gold_labels"

    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"), primary_key=True)
    token_labels: Mapped[list] = mapped_column(JSON)  # "correct" | "incorrect" | None per token
    region_labels: Mapped[list] = mapped_column(JSON)  # "mentioned" | "unmentioned" | None per region
    # votes carried in from an imported file, added to the store's own votes on export
    token_votes: Mapped[list | None] = mapped_column(JSON, default=None)
    region_votes: Mapped[list | None] = mapped_column(JSON, default=None)  # may carry "junk" counts
    link_votes: Mapped[list | None] = mapped_column(JSON, default=None)  # [{"token", "region", "votes", "total"}]
    source: Mapped[str] = mapped_column(String(20))
    adjudicator_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # how sure the consensus is of each label, 0..1 (None: not measured, as for imported gold)
    token_confidence: Mapped[list | None] = mapped_column(JSON, default=None)
    region_confidence: Mapped[list | None] = mapped_column(JSON, default=None)



class GoldRevision(Base):
    """Every gold label set written for a caption, oldest first: an
    adjudication never loses the labels it replaced."""

    __tablename__ = "gold_revisions"
    __table_args__ = (UniqueConstraint("caption_id", "revision"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    caption_id: Mapped[int] = mapped_column(ForeignKey("captions.id", ondelete="CASCADE"), index=True)
    revision: Mapped[int] = mapped_column(Integer)
    token_labels: Mapped[list] = mapped_column(JSON)
    region_labels: Mapped[list] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(20))
    adjudicator_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    token_confidence: Mapped[list | None] = mapped_column(JSON, default=None)
    region_confidence: Mapped[list | None] = mapped_column(JSON, default=None)


class Release(Base):
    """A frozen version of a dataset's benchmark (annotation/release.py): who made it and when,
    the gold revision of every item it froze, its rows as written (gzip), its metadata and the
    options given, so that it can be written again byte for byte."""

    __tablename__ = "releases"
    __table_args__ = (UniqueConstraint("dataset_id", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    version: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(200), default=None)
    method: Mapped[str] = mapped_column(String(40))
    gold_revisions: Mapped[dict] = mapped_column(JSON, default=dict)  # item id -> gold revision frozen
    rows_gz: Mapped[bytes] = mapped_column(LargeBinary)
    details: Mapped[dict] = mapped_column(JSON, default=dict)  # {"metadata": ..., "options": ...}


class ModelVersion(Base):
    """A fine-tuned InfoMetIC checkpoint the server can score with: its file,
    what it was trained from and on, and its held-out figures before and after.
    At most one row is `active` (annotation/model_versions.py keeps it so);
    none active = the server's default model."""

    __tablename__ = "model_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    parent_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id", ondelete="SET NULL"), default=None)
    dataset: Mapped[str | None] = mapped_column(String(200), default=None)
    labels: Mapped[dict] = mapped_column(JSON, default=dict)
    figures: Mapped[dict] = mapped_column(JSON, default=dict)  # the fine-tuning report's "before" and "after"
    status: Mapped[str] = mapped_column(String(20), default="ready")
    active: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
