"""What a new server makes before its first request: the first admin and the demo dataset.

On a database without users an `admin` user is created (password from
CAPSCOPE_ADMIN_PASSWORD, else a random one written to `admin-password.txt` in
the data folder, readable by its owner only, never logged); on a database
without datasets the demo dataset is generated into the data folder and
imported. `private_files` names what no user may read through the server:
the database's files and that password file.
"""
from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from capscope.annotation import browse, importer, queue
from capscope.annotation.refusals import Invalid
from capscope.annotation.users import add_user, list_users
from capscope.common.errors import CapscopeError
from capscope.db import Store, data_dir

log = logging.getLogger(__name__)

DEMO_SCENES = 24
ADMIN_PASSWORD_FILE = "admin-password.txt"


def first_run(store: Store, folder: Path | None = None, scenes: int | None = None) -> None:
    """The first admin when there is no user, the demo dataset when there is no dataset;
    a demo that cannot be made is a warning (the server works on an empty store)."""
    ensure_admin(store)
    try:
        seed_demo(store, folder, DEMO_SCENES if scenes is None else scenes)
    except Exception as err:  # noqa: BLE001  the server still works on an empty store
        log.warning("demo dataset not seeded: %s", err)


def seed_demo(store: Store, folder: Path | None = None, scenes: int = DEMO_SCENES) -> Path | None:
    """Generate and import the demo dataset when the store has no dataset yet."""
    if browse.dataset_names(store):
        return None
    from capscope.demo.dataset import write_demo_data

    folder = folder or data_dir() / "demo-data"
    if not (folder / "captokeneval.jsonl").is_file():
        log.info("first run: writing %d demo scenes to %s", scenes, folder)
        write_demo_data(folder, scenes, seed=0, progress=False)
    options = importer.ImportOptions(dataset=queue.DEMO_DATASET, annotators_per_item=3, regions="none",
                                     progress=False)
    report = importer.import_captokeneval(store, folder / "captokeneval.jsonl", options)
    log.info("first run: demo dataset imported: %s", report.summary())
    return folder


def ensure_admin(store: Store) -> str | None:
    """Create `admin` when there is no user at all; returns the password it set. A random
    password goes to a file only the server's owner can read, never to the log (logs are
    kept, shipped and shared)."""
    if list_users(store, include_disabled=True):
        return None
    chosen = os.environ.get("CAPSCOPE_ADMIN_PASSWORD")
    password = chosen or secrets.token_urlsafe(18)
    try:
        add_user(store, "admin", password, "admin")
    except Invalid as err:
        raise CapscopeError(f"CAPSCOPE_ADMIN_PASSWORD: {err}") from None
    if not chosen:
        path = write_admin_password(data_dir() / ADMIN_PASSWORD_FILE, password)
        log.warning("first run: created user 'admin'; its password is in %s (read it, delete the file, and "
                    "change the password: capscope users add admin --role admin --replace)", path)
    return password


def write_admin_password(path: Path, password: str) -> Path:
    """Write the password to a new file with mode 0600. O_EXCL: never through a link someone
    planted; a stale file from an earlier first run is removed first (the link, not its target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(password + "\n")
    return path


def private_files(store: Store) -> list[Path]:
    """The database's files and the first admin's password file: no user reads them through the server."""
    return [*store.private_files(), (data_dir() / ADMIN_PASSWORD_FILE).resolve()]
