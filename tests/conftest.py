import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
os.environ.setdefault("YOLO_AUTOINSTALL", "false")  # ultralytics must never pip-install during tests
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no test reaches the network
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # Ray reports usage online unless told not to
# Ray binds a node to the machine's own network address; the tests' clusters stay on loopback
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
sys.path.insert(0, str(TESTS))


@pytest.fixture(scope="session")
def released_checkpoint(tmp_path_factory):
    """The seeded state dict in the released layout, saved as best_model.pth."""
    import torch
    from released_weights import released_state_dict

    path = tmp_path_factory.mktemp("infometic") / "best_model.pth"
    torch.save(released_state_dict(0), path)
    return path


@pytest.fixture(scope="session")
def clip_checkpoint(tmp_path_factory):
    """A randomly initialised open_clip ViT-B-32, saved as a user's local file would be."""
    import open_clip
    import torch

    torch.manual_seed(0)
    model = open_clip.create_model("ViT-B-32", pretrained=None)
    path = tmp_path_factory.mktemp("clip") / "vit-b-32.pt"
    torch.save(model.state_dict(), path)
    return path
