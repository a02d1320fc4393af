"""The server builds its text towers' one-thread ONNX sessions while the scorer
loads, so that the first keystroke does not pay the export."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from capscope.server.scoring import warm_text_towers


def test_each_onnx_text_tower_runs_a_text_on_one_thread_and_eager_ones_are_left_alone():
    seen = []

    def backbone(runtime):
        return SimpleNamespace(runtime=runtime, encode_texts=lambda texts: seen.append((runtime, torch.get_num_threads())))

    scorer = SimpleNamespace(metrics={"clip-s": SimpleNamespace(backbone=backbone("onnx")),
                                      "hice": SimpleNamespace(clip=backbone("onnx"), backbone=None),
                                      "infometic": SimpleNamespace(backbone=backbone("eager"))})
    threads = torch.get_num_threads()
    warm_text_towers(scorer)
    assert seen == [("onnx", 1), ("onnx", 1)] or threads == 1 and len(seen) == 2
    assert torch.get_num_threads() == threads
