"""Annotation store: SQLAlchemy models, sessions and migrations. Imports nothing else of capscope."""
from capscope.db.models import (  # noqa: F401
    Assignment,
    AuditEvent,
    Base,
    Caption,
    Dataset,
    Flag,
    GoldLabel,
    GoldRevision,
    Image,
    Label,
    LabelRevision,
    Link,
    ModelVersion,
    Prediction,
    Region,
    Release,
    Token,
    User,
    utcnow,
)
from capscope.db.store import Store, data_dir, default_db_url  # noqa: F401
