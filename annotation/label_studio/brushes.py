"""Label Studio's brush RLE: a region's mask as a `brushlabels` result and back."""
from __future__ import annotations

import numpy as np

RLE_SIZES = (3, 6, 9, 12)  # bit widths for a run's length in the brush RLE (4 bits each in its header)


def brush_rle(mask: np.ndarray) -> list[int]:
    """A boolean mask as Label Studio's brush RLE: the mask as an RGBA image
    (255 in every channel inside, 0 outside) flattened and packed as runs of
    equal bytes. The bit layout: the number of bytes (32 bits), the byte width
    less one (5 bits), four run-length widths less one (4 bits each); then per
    run a repeat flag (1), which width (2), the run's length less one, the byte."""
    values = np.repeat(np.where(np.asarray(mask, dtype=bool).ravel(), 255, 0), 4)
    fields = [(len(values), 32), (7, 5), *[(size - 1, 4) for size in RLE_SIZES]]
    if len(values):
        edges = np.flatnonzero(np.diff(values)) + 1
        for start, end in zip(np.concatenate([[0], edges]), np.concatenate([edges, [len(values)]])):
            value, left = int(values[start]), int(end - start)
            while left:
                n = min(left, 1 << RLE_SIZES[-1])
                width = next(k for k, size in enumerate(RLE_SIZES) if n - 1 < 1 << size)
                fields += [(1, 1), (width, 2), (n - 1, RLE_SIZES[width]), (value, 8)]
                left -= n
    bits = "".join(format(v, f"0{n}b") for v, n in fields)
    bits += "0" * (-len(bits) % 8)
    return list(int(bits, 2).to_bytes(len(bits) // 8, "big")) if bits else []


def brush_mask(rle: list[int], height: int, width: int) -> np.ndarray:
    """`brush_rle` read back (any run of Label Studio's layout, literal runs
    included): the alpha channel above zero."""
    bits = "".join(format(b, "08b") for b in rle)
    at = 0

    def read(n: int) -> int:
        nonlocal at
        at += n
        return int(bits[at - n:at], 2)

    total, word = read(32), read(5) + 1
    if total != height * width * 4:  # refused before allocating: the header may claim billions
        raise ValueError("brush RLE of another size than the image")
    sizes = [read(4) + 1 for _ in range(4)]
    out = np.zeros(total, dtype=np.int64)
    i = 0
    while i < total:
        repeat = read(1)
        end = i + 1 + read(sizes[read(2)])
        if repeat:
            out[i:end] = read(word)
        else:
            for k in range(i, end):
                out[k] = read(word)
        i = end
    return out.reshape(height, width, 4)[:, :, 3] > 0
