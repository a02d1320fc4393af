"""The Alembic migrations build exactly the models' schema; SQLite runs with
WAL, foreign keys and a busy timeout; opening a database twice migrates once."""
import pytest
from sqlalchemy import inspect, select, text

from annotation_support import fresh_pg_database, sqlite_url
from capscope.db import Base, Store
from capscope.db.store import SQLITE_BUSY_TIMEOUT_MS, default_db_url


def _schema_diff(store: Store) -> list:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def test_migrations_match_models_sqlite(tmp_path):
    store = Store(sqlite_url(tmp_path))
    assert _schema_diff(store) == []
    tables = set(inspect(store.engine).get_table_names())
    assert {"images", "regions", "captions", "tokens", "users", "assignments", "labels", "label_revisions",
            "flags", "predictions", "gold_labels", "model_versions", "alembic_version"} <= tables


@pytest.mark.postgres
def test_migrations_match_models_postgres():
    with fresh_pg_database() as url:
        store = Store(url)
        try:
            assert _schema_diff(store) == []
            Store(url)  # a second open is a no-op
        finally:
            store.dispose()


def test_sqlite_pragmas_and_reopen(tmp_path):
    url = sqlite_url(tmp_path)
    Store(url)
    store = Store(url)
    with store.read() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert session.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert session.execute(text("PRAGMA busy_timeout")).scalar() == SQLITE_BUSY_TIMEOUT_MS
        assert session.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0011"


def test_downgrade_and_upgrade_again(tmp_path):
    store = Store(sqlite_url(tmp_path))
    store.downgrade("base")
    assert set(inspect(store.engine).get_table_names()) <= {"alembic_version"}
    store.upgrade()
    assert _schema_diff(store) == []


def test_upgrade_to_gold_history_keeps_existing_gold_as_revision_one(tmp_path):
    from capscope.db import GoldRevision

    store = Store(sqlite_url(tmp_path))
    store.downgrade("0001")
    with store.write() as session:  # a database of the first release (its own columns: plain SQL), one gold set
        for sql in ("INSERT INTO datasets (id, name, created_at) VALUES (1, 'd', '2024-01-01 00:00:00')",
                    "INSERT INTO images (id, sha256, path, width, height, n_bytes, regions_source, created_at) "
                    f"VALUES (1, '{'0' * 64}', 'x.png', 4, 4, 1, 'none', '2024-01-01 00:00:00')",
                    "INSERT INTO captions (id, dataset_id, external_id, image_id, text, \"references\", content_hash, "
                    "annotators_needed, created_at) VALUES (1, 1, 'a', 1, 'a dog', '[]', 'h', 3, '2024-01-01 00:00:00')",
                    "INSERT INTO gold_labels (caption_id, token_labels, region_labels, source, updated_at) "
                    "VALUES (1, '[\"correct\", null]', '[]', 'import', '2024-01-01 00:00:00')"):
            session.execute(text(sql))
    store.upgrade()
    with store.read() as session:
        revision = session.scalars(select(GoldRevision)).one()
        assert (revision.caption_id, revision.revision, revision.source) == (1, 1, "import")
        assert revision.token_labels == ["correct", None]


def test_upgrade_gives_a_versions_stored_predictions_its_fitted_word_scale(tmp_path):
    from capscope.db import Prediction

    store = Store(sqlite_url(tmp_path))
    store.downgrade("0004")
    with store.write() as session:  # a fine-tuned version that fitted 0.6; its predictions, and an imported file's
        for sql in ("INSERT INTO datasets (id, name, created_at) VALUES (1, 'd', '2024-01-01 00:00:00')",
                    "INSERT INTO images (id, sha256, path, width, height, n_bytes, regions_source, created_at) "
                    f"VALUES (1, '{'0' * 64}', 'x.png', 4, 4, 1, 'none', '2024-01-01 00:00:00')",
                    "INSERT INTO captions (id, dataset_id, external_id, image_id, text, \"references\", content_hash, "
                    "annotators_needed, created_at) VALUES (1, 1, 'a', 1, 'a dog', '[]', 'h', 3, '2024-01-01 00:00:00')",
                    "INSERT INTO model_versions (id, name, path, sha256, labels, figures, status, active, created_at) "
                    f"VALUES (3, 'v', 'v.pt', '{'ab' * 32}', '{{}}', '{{\"word_threshold\": {{\"scale\": 0.6}}}}', "
                    "'ready', 0, '2024-01-01 00:00:00')"):
            session.execute(text(sql))
        for metric, version in (("infometic", "v3:abababababab"), ("hice", "v3:abababababab"),
                                ("infometic", "scored.jsonl")):
            session.execute(text("INSERT INTO predictions (caption_id, metric, model_version, scores, token_scores, "
                                 "region_scores, created_at) VALUES (1, :metric, :version, '{}', '[]', '[]', "
                                 "'2024-01-01 00:00:00')"), {"metric": metric, "version": version})
    store.upgrade()
    with store.read() as session:
        scales = {(p.metric, p.model_version): p.word_scale for p in session.scalars(select(Prediction))}
    assert scales == {("infometic", "v3:abababababab"): 0.6, ("hice", "v3:abababababab"): None,
                      ("infometic", "scored.jsonl"): None}


def test_foreign_keys_are_enforced(tmp_path):
    from sqlalchemy.exc import IntegrityError

    from capscope.db import Token

    store = Store(sqlite_url(tmp_path))
    with pytest.raises(IntegrityError):
        with store.write() as session:
            session.add(Token(caption_id=12345, index=0, text="x", start=0, end=1, semantic=True))


def test_default_url_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("CAPSCOPE_DB_URL", raising=False)
    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    assert default_db_url() == f"sqlite:///{tmp_path / 'data' / 'capscope.db'}"
    monkeypatch.setenv("CAPSCOPE_DB_URL", "postgresql+psycopg://u@h/db")
    assert default_db_url() == "postgresql+psycopg://u@h/db"


ONE_JUDGEMENT = (  # a dataset, an image with one region, a two-word caption, and one submitted judgement of it
    "INSERT INTO datasets (id, name, created_at) VALUES (1, 'd', '2024-01-01 00:00:00')",
    "INSERT INTO images (id, sha256, path, width, height, n_bytes, regions_source, created_at) "
    f"VALUES (1, '{'0' * 64}', 'x.png', 4, 4, 1, 'file', '2024-01-01 00:00:00')",
    "INSERT INTO regions (id, image_id, \"index\", source, x0, y0, x1, y1) VALUES (1, 1, 0, 'file', 0, 0, 2, 2)",
    "INSERT INTO captions (id, dataset_id, external_id, image_id, text, \"references\", content_hash, "
    "annotators_needed, created_at) VALUES (1, 1, 'a', 1, 'a dog', '[]', 'h', 3, '2024-01-01 00:00:00')",
    "INSERT INTO tokens (id, caption_id, \"index\", text, start, \"end\", semantic) "
    "VALUES (1, 1, 0, 'a', 0, 1, FALSE), (2, 1, 1, 'dog', 2, 5, TRUE)",
    "INSERT INTO users (id, name, role, password_hash, active, created_at) "
    "VALUES (1, 'ann', 'annotator', 'x', TRUE, '2024-01-01 00:00:00')",
    "INSERT INTO assignments (id, caption_id, user_id, status, lease_expires_at, revision, time_spent_ms, "
    "created_at, updated_at, submitted_at) VALUES (1, 1, 1, 'submitted', '2024-01-01 00:00:00', 1, 0, "
    "'2024-01-01 00:00:00', '2024-01-01 00:00:00', '2024-01-01 00:00:00')",
    "INSERT INTO labels (assignment_id, caption_id, kind, \"index\", created_at) "
    "VALUES (1, 1, 'token', 1, '2024-01-01 00:00:00'), (1, 1, 'region', 0, '2024-01-01 00:00:00')",
)


def test_upgrade_to_added_regions_keeps_labels_and_regions_meaning_what_they_did(tmp_path):
    """A database written before regions could be added, junk or tied: after the upgrade every
    region is a proposal every annotator saw, and every judgement says what it said."""
    from capscope.annotation.votes import load_item

    store = Store(sqlite_url(tmp_path))
    store.downgrade("0005")
    with store.write() as session:
        for sql in (*ONE_JUDGEMENT,
                    "INSERT INTO label_revisions (assignment_id, revision, action, status, incorrect_tokens, "
                    "mentioned_regions, created_at) VALUES (1, 1, 'edit', 'submitted', '[1]', '[0]', "
                    "'2024-01-01 00:00:00')"):
            session.execute(text(sql))
    store.upgrade()
    item = load_item(store, 1)
    assert item.regions[0]["added_by"] is None and item.regions[0]["created_at"] is None
    assert item.region_votes(0) == (1, 1) and item.junk_votes(0) == 0 and item.region_label(0) == "mentioned"
    assert item.token_votes(1) == (1, 1) and item.link_votes() == []


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_upgrade_to_the_audit_log_keeps_users_and_their_sessions(backend, tmp_path):
    import contextlib

    from capscope.db import AuditEvent, User

    with (fresh_pg_database() if backend == "postgresql" else contextlib.nullcontext(sqlite_url(tmp_path))) as url:
        store = Store(url)
        try:
            store.downgrade("0006")
            assert "audit_events" not in inspect(store.engine).get_table_names()
            with store.write() as session:
                session.execute(text("INSERT INTO users (name, role, password_hash, active, created_at) "
                                     "VALUES ('ann', 'annotator', 'x', TRUE, '2024-01-01 00:00:00')"))
            store.upgrade()
            assert _schema_diff(store) == []
            with store.write() as session:
                assert session.scalars(select(User.session_version)).one() == 0
                session.add(AuditEvent(action="sign-in", actor="ann", address="127.0.0.1"))
            with store.read() as session:
                assert session.scalars(select(AuditEvent.action)).all() == ["sign-in"]
        finally:
            store.dispose()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_upgrade_to_label_quality_and_back_keeps_every_judgement(backend, tmp_path):
    """0007 -> 0008 -> 0007 -> 0008: no item becomes a control, no dataset reviews, and no label,
    tie or revision of a judgement is lost on the way (a table rebuild would cascade into them)."""
    import contextlib

    from capscope.annotation.votes import load_item
    from capscope.db import Assignment, Caption, Dataset

    with (fresh_pg_database() if backend == "postgresql" else contextlib.nullcontext(sqlite_url(tmp_path))) as url:
        store = Store(url)
        try:
            store.downgrade("0007")
            with store.write() as session:
                for sql in (*ONE_JUDGEMENT,
                            "INSERT INTO links (assignment_id, caption_id, token_index, region_index, created_at) "
                            "VALUES (1, 1, 1, 0, '2024-01-01 00:00:00')",
                            "INSERT INTO label_revisions (assignment_id, revision, action, status, incorrect_tokens, "
                            "mentioned_regions, junk_regions, links, created_at) VALUES (1, 1, 'edit', 'submitted', "
                            "'[1]', '[0]', '[]', '[[1, 0]]', '2024-01-01 00:00:00')"):
                    session.execute(text(sql))
            count = "SELECT (SELECT count(*) FROM labels), (SELECT count(*) FROM links), " \
                    "(SELECT count(*) FROM label_revisions), (SELECT count(*) FROM assignments)"
            for step in ("upgrade", "downgrade", "upgrade"):
                store.upgrade() if step == "upgrade" else store.downgrade("0007")
                with store.read() as session:
                    assert tuple(session.execute(text(count)).one()) == (2, 1, 1, 1), step
            item = load_item(store, 1)
            assert item.token_votes(1) == (1, 1) and item.region_votes(0) == (1, 1)
            assert item.link_votes() == [{"token": 1, "region": 0, "votes": 1, "total": 1}]
            assert _schema_diff(store) == []
            with store.read() as session:
                assert session.get(Caption, 1).control is False and session.get(Dataset, 1).review is False
                assert session.get(Dataset, 1).control_rate == pytest.approx(0.1)
                assert session.get(Assignment, 1).review_status is None
        finally:
            store.dispose()
