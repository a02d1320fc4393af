"""Where a click segmenter's weights come from: SAM 2.1's (small and tiny) and
MobileSAM's files, named by the user or cached, fetched on first use and checked
on every load."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .loading import ModelUnavailable, cache_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Weights:
    """A click segmenter's weights file: named by the user (`variable`), else kept in
    capscope's cache at `relative`, fetched from `url` on first use. The download's
    sha256 is checked against `sha256` when the authors publish one, and recorded
    beside the file in any case; every later load checks the file against it
    (`loading.read_checkpoint`), so a file changed on disk is refused."""
    component: str
    url: str
    variable: str
    relative: str
    sha256: str | None = None

    def cached(self) -> Path:
        return cache_dir() / self.relative

    def given(self, checkpoint=None) -> Path | None:
        value = checkpoint or os.environ.get(self.variable)
        return Path(value) if value else None

    def here(self) -> bool:
        """Whether the file is here already (nothing is fetched)."""
        given = self.given()
        return (given or self.cached()).is_file()

    def path(self, checkpoint=None) -> Path:
        """The file, downloaded first when neither named nor cached."""
        from .downloads import fetch_http

        hint = f"set {self.variable} to a local {self.url.rsplit('/', 1)[-1]}"
        given = self.given(checkpoint)
        if given is not None:
            if not given.is_file():
                raise ModelUnavailable(f"{self.component}: checkpoint {given} not found ({hint})")
            return given
        target = self.cached()
        if not target.is_file():
            try:
                fetch_http(self.url, target, self.sha256, self.component, log=log.info)
            except ModelUnavailable as err:
                raise ModelUnavailable(f"{err}; {hint}") from None
        return target


SAM2_CONFIGS = {"small": "configs/sam2.1/sam2.1_hiera_s.yaml", "tiny": "configs/sam2.1/sam2.1_hiera_t.yaml"}
SAM2_WEIGHTS = {
    "small": Weights("SAM 2", "https://dl.fbaipublicfiles.com/segment_anything_2/092824/sam2.1_hiera_small.pt",
                     "CAPSCOPE_SAM2_CHECKPOINT", "sam2/sam2.1_hiera_small.pt"),
    "tiny": Weights("SAM 2 tiny", "https://dl.fbaipublicfiles.com/segment_anything_2/092824/sam2.1_hiera_tiny.pt",
                    "CAPSCOPE_SAM2_TINY_CHECKPOINT", "sam2/sam2.1_hiera_tiny.pt"),
}
SAM2_CONFIG, SAM2_URL = SAM2_CONFIGS["small"], SAM2_WEIGHTS["small"].url
# the release ultralytics itself fetches its assets from; the same file and place as `--regions mobilesam`'s
MOBILESAM_WEIGHTS = Weights("MobileSAM", "https://github.com/ultralytics/assets/releases/download/v8.4.0/mobile_sam.pt",
                            "CAPSCOPE_MOBILESAM_WEIGHTS", "ultralytics/mobile_sam.pt")


def sam2_checkpoint(checkpoint=None, size: str = "small") -> Path:
    return SAM2_WEIGHTS[size].path(checkpoint)
