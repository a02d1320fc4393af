"""The released InfoMetIC and PAC-S checkpoints: fetched by `capscope models
download` and, on first use, by a scorer that finds none (`fetch_on_first_use`),
into the files the loaders look in. They come from the public Google Drive
folders that the authors' READMEs link (HAWLYQ/InfoMetIC, aimagelab/pacscore),
through gdown; or first from an institution's mirror when CAPSCOPE_WEIGHTS_MIRROR
names one (a base URL holding the same files at the same relative paths as
capscope's cache: `BASE/infometic/best_model.pth`, `BASE/pacs/clip_ViT-B-32.pth`).

A download is resumable (a `.part` file beside the target is continued); a file
whose sha256 differs from the one capscope expects is refused and deleted, never
loaded; the digest is recorded beside the file and checked on every later load
(`checksums.verify`). Without a network the command fails at once, in one line
naming the Drive folder and the flag or variable that points capscope to a copy
fetched by hand.
"""
from __future__ import annotations

import http.client
import os
import socket
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from capscope.common import checksums
from . import loading
from .loading import ModelUnavailable

# The host a download needs; tests point it at a closed port on loopback.
DRIVE_ADDRESS = ("drive.google.com", 443)
PROBE_TIMEOUT_S = 3.0
MIRROR_VARIABLE = "CAPSCOPE_WEIGHTS_MIRROR"
HTTP_TIMEOUT_S = 60
_CHUNK = 1 << 20


@dataclass(frozen=True)
class DriveFile:
    name: str                    # the file's name in the Drive folder
    relative: str                # where the loader looks, under capscope's cache
    variable: str | None = None  # environment variable the loader reads first
    file_id: str | None = None   # Drive id when the README gives one, else looked up in the folder
    # the sha256 capscope expects; None: not published by the authors, so the digest of the first
    # download is recorded and every later load is checked against it
    sha256: str | None = None

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


def download_release(name: str, log=print, only: str | None = None) -> list[Path]:
    """Fetch the files of one release (or just the file named `only`) that are
    not here yet; returns their paths. Files already present are checked against
    their recorded sha256, not fetched. The mirror is tried first when set."""
    if name not in RELEASES:
        raise ValueError(f"unknown release {name!r}; choose from {', '.join(RELEASES)}")
    release = RELEASES[name]
    files = [f for f in release.files if only is None or f.name == only]
    missing = [f for f in files if not _present(release, f, log)]
    mirror = os.environ.get(MIRROR_VARIABLE, "").rstrip("/")
    if mirror:
        missing = [f for f in missing if not _from_mirror(release, f, mirror, log)]
    if missing:
        if not drive_reachable():
            raise ModelUnavailable(f"{release.component}: Google Drive cannot be reached; {release.by_hand()}")
        ids = _file_ids(release, missing)
        for drive_file in missing:
            _fetch(release, drive_file, ids[drive_file.name], log)
    return [f.target() for f in files]


def fetch_on_first_use(name: str, only: str | None = None, log=None) -> bool:
    """What a scorer does when the release's file is not in the cache: fetch it
    when a mirror is set or Drive answers (never when offline is asked for);
    True when it is here now. A failure is logged, not raised: the caller says
    what is missing and how to get it."""
    import logging

    logger = logging.getLogger(__name__)
    if offline_requested() and not os.environ.get(MIRROR_VARIABLE):
        return False
    try:
        download_release(name, log=log or logger.info, only=only)
        return True
    except ModelUnavailable as err:
        logger.warning("%s", err)
        return False


def _from_mirror(release: Release, drive_file: DriveFile, mirror: str, log) -> bool:
    """Fetch one file from the mirror; False (logged) when the mirror fails, so Drive is tried next."""
    url = f"{mirror}/{drive_file.relative}"
    try:
        fetch_http(url, drive_file.target(), drive_file.sha256, release.component, log)
        return True
    except ModelUnavailable as err:
        log(f"{err}; trying Google Drive")
        return False


def fetch_http(url: str, target: Path, expected: str | None, component: str, log=print) -> str:
    """Download `url` to `target` through `target.part`, continuing a part left
    by an interrupted run (HTTP Range), with a progress bar; the sha256 is
    checked against `expected` (a mismatch is deleted and refused) and recorded
    beside the file. Returns the digest."""
    from tqdm import tqdm

    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    done = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={done}-"} if done else {})
    log(f"{component} {target.name}: downloading from {url}" + (f", resuming at {done} bytes" if done else ""))
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            if done and response.status != 206:  # the server ignored the range: start over
                done = 0
            size = response.headers.get("Content-Length")
            total = done + int(size) if size else None
            with part.open("ab" if done else "wb") as out, \
                    tqdm(total=total, initial=done, unit="B", unit_scale=True, desc=target.name) as bar:
                while block := response.read(_CHUNK):
                    out.write(block)
                    bar.update(len(block))
            if total is not None and part.stat().st_size < total:
                raise ConnectionError(f"got {part.stat().st_size} of {total} bytes")
    except urllib.error.HTTPError as err:
        if err.code == 416 and done:  # the part already holds the whole file
            pass
        else:
            raise ModelUnavailable(f"{component}: {url} answered HTTP {err.code}") from None
    except (OSError, http.client.HTTPException, ValueError) as err:  # refused, reset, cut short
        raise ModelUnavailable(f"{component}: download of {target.name} from {url} stopped ({type(err).__name__}: "
                               f"{str(err)[:80]}); run again to resume") from None
    digest = checksums.file_sha256(part)
    if expected and digest != expected:
        part.unlink()
        raise ModelUnavailable(f"{component}: {target.name} from {url} has sha256 {digest[:12]}..., not the "
                               f"{expected[:12]}... capscope expects; refused and deleted")
    part.replace(target)
    checksums.record(target, url, digest)
    log(f"{component} {target.name}: ready, sha256 {digest}")
    return digest


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
    if drive_file.sha256 and checksums.file_sha256(target) != drive_file.sha256:
        target.unlink()
        raise ModelUnavailable(f"{release.component}: {drive_file.name} from {release.folder_url} has another sha256 "
                               f"than the {drive_file.sha256[:12]}... capscope expects; refused and deleted")
    digest = checksums.record(target, f"google-drive:{file_id} ({release.folder_url})")
    log(f"{release.component} {drive_file.name}: ready, sha256 {digest} recorded in {checksums.record_path(target).name}")
