"""Engines, sessions and migrations.

`Store(url)` opens any SQLAlchemy URL (SQLite by default) and brings its
schema to the newest Alembic revision. Reads and writes use separate session
factories: on SQLite a write transaction starts with `BEGIN IMMEDIATE`, so
its reads and writes are one atomic step (a deferred BEGIN would let two
writers read the same state and then collide), while long reads such as a
streamed export never hold the write lock. On PostgreSQL writers lock the rows
they change (`SELECT ... FOR UPDATE`).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
_WRITE_OPTION = "capscope_write"
_RETRYABLE_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock
_PG_MIGRATION_LOCK = 7_406_123

T = TypeVar("T")


def data_dir() -> Path:
    """`CAPSCOPE_DATA_DIR`, else `$XDG_DATA_HOME/capscope`, else `~/.local/share/capscope`."""
    if os.environ.get("CAPSCOPE_DATA_DIR"):
        return Path(os.environ["CAPSCOPE_DATA_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "capscope"


def create_private_folder(folder: Path) -> None:
    """`folder` and its missing parents, made readable by this user only (0700)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    for made in missing:
        os.chmod(made, 0o700)


def create_private_file(path: Path) -> None:
    """An SQLite file that does not exist yet is created empty, readable by this
    user only (0600), in a private folder; SQLite gives its -wal and -shm the
    same mode. An existing file is left as its owner set it."""
    create_private_folder(path.parent)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


def default_db_url() -> str:
    """`CAPSCOPE_DB_URL`, else an SQLite file in the data folder."""
    if os.environ.get("CAPSCOPE_DB_URL"):
        return os.environ["CAPSCOPE_DB_URL"]
    return f"sqlite:///{data_dir() / 'capscope.db'}"


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
    if not in_memory:
        create_private_file(Path(database).expanduser())
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        **({"poolclass": StaticPool} if in_memory else {"pool_size": 20, "max_overflow": 20}),
    )
    _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        # take BEGIN out of pysqlite's hands so that "begin" below decides its kind
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=FULL")  # a commit the user saw survives a power cut
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        immediate = conn.get_execution_options().get(_WRITE_OPTION)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _is_retryable(err: DBAPIError) -> bool:
    sqlstate = getattr(err.orig, "sqlstate", None)
    if sqlstate in _RETRYABLE_SQLSTATES:
        return True
    return isinstance(err, OperationalError) and "database is locked" in str(err.orig)


class Store:
    """A database: engine, read and write sessions, migrations."""

    def __init__(self, url: str | None = None, *, migrate: bool = True):
        self.url = url or default_db_url()
        self.engine = make_engine(self.url)
        self.dialect = self.engine.dialect.name
        self._writer = self.engine.execution_options(**{_WRITE_OPTION: True})
        self._read_sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(self._writer, expire_on_commit=False)
        # SQLite lets one writer in at a time and makes the others sleep and poll (1, 2, 5 ... 100 ms): the
        # writers of this process take turns on a lock instead, so a save waits for the write before it only
        self._write_turn = threading.RLock() if self.dialect == "sqlite" else nullcontext()
        if migrate:
            self.upgrade()

    def __repr__(self) -> str:
        return f"Store({make_url(self.url).render_as_string(hide_password=True)!r})"

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reading; nothing it does is committed."""
        with self._read_sessions() as session:
            try:
                yield session
            finally:
                session.rollback()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in one write transaction, committed on success."""
        with self._write_sessions() as session, session.begin():
            yield session

    def run_write(self, work: Callable[[Session], T], attempts: int = 6) -> T:
        """`work(session)` in a write transaction, retried when the database
        reports a lock timeout, deadlock or serialization failure."""
        for attempt in range(attempts):
            try:
                with self._write_turn, self.write() as session:
                    return work(session)
            except DBAPIError as err:
                if attempt == attempts - 1 or not _is_retryable(err):
                    raise
                log.warning("write retried after %s", type(err.orig).__name__)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def upgrade(self, revision: str = "head") -> None:
        """Bring the schema up to `revision` with Alembic (safe to run from several processes)."""
        self._migrate("upgrade", revision)

    def downgrade(self, revision: str) -> None:
        """Take the schema down to `revision` ("base" drops every table)."""
        self._migrate("downgrade", revision)

    def _migrate(self, direction: str, revision: str) -> None:
        from alembic import command

        logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger("alembic").level))
        # one transaction, under the write lock: a second process waits, then finds nothing to do
        with self._writer.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
            config = alembic_config()
            config.attributes["connection"] = conn
            getattr(command, direction)(config, revision)

    def private_files(self) -> list[Path]:
        """The files of an SQLite database (the file, its -wal, -shm and
        -journal), resolved: no server user may name them (opening and closing
        the live file in the server process would drop SQLite's locks)."""
        parsed = make_url(self.url)
        database = parsed.database or ""
        if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
            return []
        main = Path(database).expanduser().resolve()
        return [main] + [main.with_name(main.name + suffix) for suffix in ("-wal", "-shm", "-journal")]

    def ping(self) -> None:
        """One round trip to the database; raises when it cannot be reached."""
        with self.read() as session:
            session.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()


def alembic_config():
    from alembic.config import Config

    config = Config(str(MIGRATIONS_DIR.parent / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config
