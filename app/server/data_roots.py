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

from collections.abc import Iterable
from pathlib import Path

from capscope.metrics.errors import CapscopeError


class OutsideDataRoots(CapscopeError, ValueError):
    """A path a server user named lies outside the server's data roots."""


class DataRoots:
    """The server's data roots; `check(path)` gives the resolved path inside
    one of them or raises OutsideDataRoots."""

    def __init__(self, folders: Iterable[str | Path] | None = None):
        given = tuple(Path(folder).expanduser() for folder in folders or ())
        if not given:
            from capscope.db import data_dir

            given = (data_dir(),)
        self.folders = given

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
        return resolved

    def __repr__(self) -> str:
        return f"DataRoots({', '.join(map(str, self.folders))})"


def check_folders(folders: Iterable[str | Path] | None) -> DataRoots:
    """`capscope serve --data-root`: each must be an existing folder."""
    for folder in folders or ():
        if not Path(folder).expanduser().is_dir():
            raise CapscopeError(f"--data-root {folder}: no such folder")
    return DataRoots(folders)
