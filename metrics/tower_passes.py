"""The shapes of the CLIP towers' passes.

Every pass through a tower has a fixed shape: texts are padded to the bucket of
their own length (`TEXT_LENGTHS`) and run `text_rows` to a pass, images
`IMAGE_ROWS` to a pass, the last pass filled up with copies. Float results of a
matrix product depend on its shape (measured on this CPU: one ViT-B-32 image
encoded alone or among 5 differs by 2.6e-6), never on the other rows of the
same shape nor on the thread count (both measured exactly equal), so a pair's
features, and its scores, do not depend on what it was batched with.
"""
from __future__ import annotations

import torch

TEXT_LENGTHS = (4, 8, 16, 24, 32, 48, 77)  # a sequence runs padded to the first that holds it
# rows per pass, by device: a GPU needs wide passes to be busy; on a CPU a pass of a long text
# costs little more than its share of a batched one, so long texts run one to a pass
TEXT_ROWS = {"cpu": 1, "cuda": 32}
# and short ones fill a pass up to this many tokens (a 4-token bucket 16 rows, 8 tokens 8, 16
# tokens 4): a short eager pass costs its fixed overhead more than its tokens (BENCHMARKS.md run 9).
# On ONNX Runtime a pass costs about 7 ms plus 0.75 ms a token row (one thread), so a pass filled
# with copies costs a lone re-score more than it saves a batch: 16 tokens (runtime.py)
TEXT_TOKENS = {"cpu": 64, "onnx": 16}
SIDE_BY_SIDE_PASSES = 4  # at most this many text passes of a lone re-score run two at a time
PIECE_ROWS = {"eager": 64, "onnx": 8}  # `<sot> piece <eot>` sequences per pass: 4 tokens each, cheap in bulk
IMAGE_ROWS = {"cpu": 8, "cuda": 32}  # on an AMD EPYC CPU, ViT-B-32: 131 ms/image alone, 75 at 4, 66 at 8


def pass_rows(table: dict[str, int], device: torch.device) -> int:
    return table.get(device.type, table["cpu"])


def text_rows(device: torch.device, length: int, runtime: str = "eager") -> int:
    """Rows per pass of texts padded to `length` tokens: fixed per device,
    runtime and bucket, so that a text's features never depend on what it is
    batched with."""
    rows = pass_rows(TEXT_ROWS, device)
    budget = TEXT_TOKENS.get("onnx" if runtime == "onnx" else device.type)
    return max(rows, budget // length) if budget else rows


def filled_to(items: list, size: int) -> list:
    """`items` made `size` long with copies of the first: a pass of fixed shape
    (the caller keeps the first `len(items)` results)."""
    return items + [items[0]] * (size - len(items))


def padded_ids(sequences: list[list[int]], length: int) -> torch.Tensor:
    """Token-id sequences as one zero-padded len x `length` tensor."""
    ids = torch.zeros(len(sequences), length, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
    return ids


def bucket_groups(lengths: list[int], context: int = 77) -> dict[int, list[int]]:
    """Indices by padded length: the first of `TEXT_LENGTHS` (cut to the
    context) that holds each sequence, which depends on that sequence alone.
    Padding makes a row cost at most 1.6 times its own length past 8 tokens;
    few buckets mean few passes, which cost more than their padding here."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(bucket_of(n, context), []).append(i)
    return dict(sorted(groups.items()))


def bucket_of(length: int, context: int = 77) -> int:
    """The padded length a sequence of `length` ids runs at."""
    return next(b for b in sorted({min(b, context) for b in TEXT_LENGTHS} | {context}) if b >= length)
