"""Alembic environment. capscope passes its own connection in
`config.attributes["connection"]`; run from the alembic command line, the
database is CAPSCOPE_DB_URL (or the default SQLite file)."""
from alembic import context

from capscope.db.models import Base

config = context.config


def run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    from capscope.db.store import Store

    store = Store(migrate=False)
    with store.engine.begin() as conn:
        run(conn)
