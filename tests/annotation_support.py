"""Helpers shared by the database, annotation and API tests."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_ENV = "CAPSCOPE_TEST_PG_URL"


def make_images(folder: Path, n: int, size=(64, 48)) -> list[str]:
    """n distinct small PNGs with a coloured box each; their file names."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(n):
        image = Image.new("RGB", size, (230, 230 - i % 50, 220))
        draw = ImageDraw.Draw(image)
        draw.rectangle([4 + i % 20, 4, 24 + i % 20, 30], fill=(200, 30 + i % 200, 30))
        name = f"img{i:04d}.png"
        image.save(folder / name)
        names.append(name)
    return names


def write_jsonl(path: Path, rows) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def caption_rows(image_names: list[str], n: int, regions: bool = True) -> list[dict]:
    """n captions over the images, each with two given boxes (no proposals needed)."""
    rows = []
    for i in range(n):
        row = {"id": f"cap{i:05d}", "image": image_names[i % len(image_names)],
               "caption": f"a small red square and a blue circle number {i}."}
        if regions:
            row["regions"] = [{"box": [4, 4, 30, 30]}, {"box": [30, 10, 60, 40]}]
        rows.append(row)
    return rows


def sqlite_url(tmp_path: Path, name: str = "capscope.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def import_small_dataset(store, folder: Path, n_images: int, n_captions: int, annotators_per_item: int):
    """`n_captions` captions (caption_rows) over `n_images` generated images in
    `folder`, imported with their given boxes; returns the import report."""
    from capscope.annotation.importer import ImportOptions, import_captions

    names = make_images(folder / "images", n_images)
    return import_captions(store, write_jsonl(folder / "captions.jsonl", caption_rows(names, n_captions)),
                           folder / "images",
                           ImportOptions(annotators_per_item=annotators_per_item, regions="none", progress=False))


def prepare_load(db_url: str, folder: Path, captions: int, clients: int, annotators_per_item: int = 3) -> None:
    """The load tests' store: `captions` captions (caption_rows, given boxes) over 20 images as the dataset
    "load", the admin `admin` / `admin-password-1` and annotators `annNN` / `ann-password-NN`."""
    from capscope.annotation.importer import ImportOptions, import_captions
    from capscope.annotation.users import add_user
    from capscope.db import Store

    names = make_images(folder / "images", 20)
    rows = write_jsonl(folder / "captions.jsonl", caption_rows(names, captions))
    store = Store(db_url)
    report = import_captions(store, rows, folder / "images",
                             ImportOptions(dataset="load", annotators_per_item=annotators_per_item,
                                           regions="none", batch_size=200, progress=False))
    assert report.added == captions and not report.errors
    add_user(store, "admin", "admin-password-1", "admin")
    for i in range(clients):
        add_user(store, f"ann{i:02d}", f"ann-password-{i:02d}")
    store.dispose()


@contextmanager
def fresh_pg_database():
    """A new, empty PostgreSQL database on the CAPSCOPE_TEST_PG_URL server, dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} is not set (no PostgreSQL server for this run)")
    name = f"capscope_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_server(db_url: str, extra_env: dict | None = None):
    """`capscope serve` in a subprocess; yields its base URL."""
    import httpx

    port = free_port()
    env = {**os.environ, "CAPSCOPE_DB_URL": db_url, **(extra_env or {})}
    process = subprocess.Popen([sys.executable, "-m", "capscope.cli", "serve", "--port", str(port)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited: {process.stdout.read().decode(errors='replace')[-2000:]}")
            try:
                if httpx.get(base + "/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start in 60 s")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


TEAM = (("ann", "ann-password-1"), ("bob", "bob-password-1"))  # two annotators
TEAM_ADMIN = ("boss", "boss-password-1")


def small_team_client(tmp_path: Path):
    """(store, REST test client) over `import_small_dataset` (2 images, 2 captions, 2 annotators an item)
    with the annotators of TEAM and the admin TEAM_ADMIN; no scorer."""
    from fastapi.testclient import TestClient

    from capscope.annotation.users import add_user
    from capscope.db import Store
    from capscope.server.api import create_app

    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path, n_images=2, n_captions=2, annotators_per_item=2)
    for name, password in TEAM:
        add_user(store, name, password)
    add_user(store, *TEAM_ADMIN, role="admin")
    return store, TestClient(create_app(store=store, scorer_factory=lambda: None), raise_server_exceptions=False)
