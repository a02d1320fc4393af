"""The folders a server reads files from when its users name them.

`capscope serve --data-root DIR` (repeatable; default the data folder,
`CAPSCOPE_DATA_DIR` or its default) names them. A path the web UI is given
(the Benchmark tab's judgement file or folder on the server) and every image a
judgement file names, uploaded or not, must lie inside one of them once `..`
and symbolic links are resolved; anything else is refused with one line. The
command line (`capscope score`, `import`, `evaluate`, `correlate`) reads what
its own user names and is not confined.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from capscope.common.errors import CapscopeError


class OutsideDataRoots(CapscopeError, ValueError):
    """A path a server user named lies outside the server's data roots."""


class DataRoots:
    """The server's data roots; `check(path)` gives the resolved path inside
    one of them or raises OutsideDataRoots. Private files inside a root (the
    database and its -wal and -shm, `protect`) are refused by path and by
    identity (a hard link to one is refused too)."""

    def __init__(self, folders: Iterable[str | Path] | None = None):
        given = tuple(Path(folder).expanduser() for folder in folders or ())
        if not given:
            from capscope.db import data_dir

            given = (data_dir(),)
        self.folders = given
        self.private: set[Path] = set()

    def protect(self, files: Iterable[str | Path]) -> None:
        """Refuse these files (the server's database files, its first admin password) whoever names them."""
        self.private.update(Path(f).expanduser().resolve() for f in files)

    def extended(self, folders: Iterable[str | Path]) -> DataRoots:
        """These roots and `folders`, refusing the same private files (the same set: protected later, refused there too)."""
        wider = DataRoots([*self.folders, *folders])
        wider.private = self.private
        return wider

    def resolved(self) -> list[Path]:
        """The roots with their links resolved (now: a root may be made or moved after the server starts)."""
        return [folder.resolve() for folder in self.folders]

    def check(self, path: str | Path, what: str = "path") -> Path:
        try:
            resolved = Path(path).expanduser().resolve()
        except (OSError, RuntimeError, ValueError) as err:  # a NUL byte, a loop of links
            raise OutsideDataRoots(f"{what} {str(path)!r} is not a usable path ({err})") from None
        roots = self.resolved()
        if not any(resolved.is_relative_to(root) for root in roots):
            raise OutsideDataRoots(f"{what} {path} is outside the server's data roots ({', '.join(map(str, roots))}); "
                                   "put it inside one, or start the server with --data-root DIR")
        if self.is_private(resolved):
            raise OutsideDataRoots(f"{what} {path} is one of the server's own files (its database or its first "
                                   "admin's password); "
                                   "no user may read it through the server")
        return resolved

    def open_checked(self, path: str | Path, what: str = "file") -> BinaryIO:
        """The file at `path` opened for reading, once, then checked as `check` checks a path, on
        what was opened (its own path and identity): a link swapped between a check and an open
        cannot lead outside. A regular file only (a FIFO would hold the handler); OSError when it
        cannot be opened, OutsideDataRoots when what was opened may not be read."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                raise IsADirectoryError(errno.EISDIR, f"{what} is not a regular file", str(path))
            self.check(_opened_path(fd, path), what)
            if (opened.st_dev, opened.st_ino) in {_identity_or_none(p) for p in self.private}:
                raise OutsideDataRoots(f"{what} {path} is one of the server's own files; no user may read it")
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def is_private(self, resolved: Path) -> bool:
        if resolved in self.private:
            return True
        try:
            identity = _identity(resolved)
        except OSError:
            return False
        return any(_identity_or_none(private) == identity for private in self.private)

    def __repr__(self) -> str:
        return f"DataRoots({', '.join(map(str, self.folders))})"


def _opened_path(fd: int, named: str | Path) -> Path:
    """The path of the file an open descriptor holds (Linux's /proc; elsewhere the
    named path, whose identity must then be the descriptor's)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        opened, named_stat = os.fstat(fd), os.stat(named)
        if (opened.st_dev, opened.st_ino) != (named_stat.st_dev, named_stat.st_ino):
            raise OutsideDataRoots(f"{named} changed while it was opened") from None
        return Path(named)


def _identity(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino


def _identity_or_none(path: Path) -> tuple[int, int] | None:
    try:
        return _identity(path)
    except OSError:
        return None


def check_folders(folders: Iterable[str | Path] | None) -> DataRoots:
    """`capscope serve --data-root`: each must be an existing folder."""
    for folder in folders or ():
        if not Path(folder).expanduser().is_dir():
            raise CapscopeError(f"--data-root {folder}: no such folder")
    return DataRoots(folders)
