"""`capscope models download infometic|pacs`: the released checkpoints, fetched
with gdown from the public Google Drive folders that the authors' READMEs link
(HAWLYQ/InfoMetIC, aimagelab/pacscore), into the files the loaders look in.

A download is resumable (gdown keeps a `.part` file beside the target and
continues it); the file's sha256 is recorded beside it at the first download
and checked on every later load (`checksums.verify`). Without a network the
command fails at once, in one line naming the Drive folder and the flag or
variable that points capscope to a copy fetched by hand.
"""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from . import checksums, loading
from .loading import ModelUnavailable

# The host a download needs; tests point it at a closed port on loopback.
DRIVE_ADDRESS = ("drive.google.com", 443)
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class DriveFile:
    name: str                    # the file's name in the Drive folder
    relative: str                # where the loader looks, under capscope's cache
    variable: str | None = None  # environment variable the loader reads first
    file_id: str | None = None   # Drive id when the README gives one, else looked up in the folder

    def target(self) -> Path:
        if self.variable:
            return loading.env_or_cache(self.variable, self.relative)
        return loading.cache_dir() / self.relative


@dataclass(frozen=True)
class Release:
    component: str
    folder_id: str
    flag: str
    variable: str
    files: tuple[DriveFile, ...]

    @property
    def folder_url(self) -> str:
        return f"https://drive.google.com/drive/folders/{self.folder_id}"

    def by_hand(self) -> str:
        names = ", ".join(f.name for f in self.files)
        return f"download {names} from {self.folder_url} and pass {self.flag} FILE or set {self.variable}"


RELEASES = {
    # README of HAWLYQ/InfoMetIC: "download the checkpoint (462M) from google driver".
    "infometic": Release(
        "InfoMetIC", "1LZRZ-Q24_PRfpvRvwBlkldkBk9zGdTHM", "--infometic-checkpoint", "CAPSCOPE_INFOMETIC_CHECKPOINT",
        (DriveFile("best_model.pth", "infometic/best_model.pth", "CAPSCOPE_INFOMETIC_CHECKPOINT"),),
    ),
    # README of aimagelab/pacscore, "Loading CLIP Models". Its ViT-L/14 link repeats the
    # ViT-B/32 file id, so that file is looked up by name in the folder.
    "pacs": Release(
        "PAC-S", "15Da_nh7CYv8xfryIdETG6dPFSqcBiqpd", "--pacs-checkpoint", "CAPSCOPE_PACS_CHECKPOINT",
        (
            DriveFile("clip_ViT-B-32.pth", "pacs/clip_ViT-B-32.pth", "CAPSCOPE_PACS_CHECKPOINT",
                      "1F-0Pma-vfJPAiDzeyl-iEdSXZIO1cDae"),
            DriveFile("openClip_ViT-L-14.pth", "pacs/openClip_ViT-L-14.pth"),
        ),
    ),
}


def offline_requested() -> bool:
    return any(os.environ.get(v, "0").lower() not in ("0", "", "false") for v in ("HF_HUB_OFFLINE", "CAPSCOPE_OFFLINE"))


def drive_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether Google Drive answers within `timeout` seconds, name lookup included
    (a lookup without a network can hang far longer than a connect)."""
    if offline_requested():
        return False
    reached: list[bool] = []

    def attempt() -> None:
        try:
            socket.create_connection(DRIVE_ADDRESS, timeout=timeout).close()
            reached.append(True)
        except OSError:
            pass

    probe = threading.Thread(target=attempt, daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(reached)


def download_release(name: str, log=print) -> list[Path]:
    """Fetch the files of one release that are not here yet; returns their paths.
    Files already present are checked against their recorded sha256, not fetched."""
    if name not in RELEASES:
        raise ValueError(f"unknown release {name!r}; choose from {', '.join(RELEASES)}")
    release = RELEASES[name]
    missing = [f for f in release.files if not _present(release, f, log)]
    if not missing:
        return [f.target() for f in release.files]
    if not drive_reachable():
        raise ModelUnavailable(f"{release.component}: Google Drive cannot be reached; {release.by_hand()}")
    ids = _file_ids(release, missing)
    for drive_file in missing:
        _fetch(release, drive_file, ids[drive_file.name], log)
    return [f.target() for f in release.files]


def _present(release: Release, drive_file: DriveFile, log) -> bool:
    target = drive_file.target()
    if not target.is_file():
        return False
    try:
        digest = checksums.verify(target)
    except checksums.ChecksumMismatch as err:
        # capscope downloaded this file (it recorded the digest): fetch it anew
        log(f"{release.component}: {err}")
        target.unlink()
        checksums.record_path(target).unlink()
        return False
    state = f"sha256 {digest[:12]}... as recorded" if digest else "not downloaded by capscope, left as it is"
    log(f"{release.component} {drive_file.name}: present at {target} ({state})")
    return True


def _file_ids(release: Release, files: list[DriveFile]) -> dict[str, str]:
    ids = {f.name: f.file_id for f in files if f.file_id}
    if len(ids) < len(files):
        listed = _list_folder(release)
        for f in files:
            if f.name not in ids:
                if f.name not in listed:
                    raise ModelUnavailable(f"{release.component}: {f.name} is not in {release.folder_url}; {release.by_hand()}")
                ids[f.name] = listed[f.name]
    return ids


def _list_folder(release: Release) -> dict[str, str]:
    """File name -> Drive id for every file in the folder (subfolders included)."""
    import gdown

    try:
        entries = gdown.download_folder(id=release.folder_id, skip_download=True, quiet=True)
    except Exception as err:  # gdown raises its own and requests' errors
        raise ModelUnavailable(
            f"{release.component}: cannot list {release.folder_url} ({type(err).__name__}); {release.by_hand()}"
        ) from None
    return {Path(entry.path).name: entry.id for entry in entries or []}


def _fetch(release: Release, drive_file: DriveFile, file_id: str, log) -> None:
    import gdown

    target = drive_file.target()
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"{release.component} {drive_file.name}: downloading from {release.folder_url} to {target}")
    try:
        gdown.download(id=file_id, output=str(target), quiet=False, resume=True)
    except Exception as err:
        raise ModelUnavailable(
            f"{release.component}: download of {drive_file.name} failed ({type(err).__name__}); "
            f"run the command again to resume, or {release.by_hand()}"
        ) from None
    if not target.is_file():  # older gdown versions return None instead of raising
        raise ModelUnavailable(f"{release.component}: download of {drive_file.name} failed; {release.by_hand()}")
    digest = checksums.record(target, f"google-drive:{file_id} ({release.folder_url})")
    log(f"{release.component} {drive_file.name}: ready, sha256 {digest} recorded in {checksums.record_path(target).name}")
