"""One small least-recently-used cache for what is worth keeping per image
(image features, region proposals): bounded, so a long-running server does not
grow without end."""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable


class LRUCache:
    """A mapping of at most `size` entries; setting a new one forgets the one
    used longest ago (reading an entry counts as a use)."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"cache size must be at least 1, got {size}")
        self.size = size
        self._entries: OrderedDict = OrderedDict()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, key: Hashable):
        self._entries.move_to_end(key)
        return self._entries[key]

    def __setitem__(self, key: Hashable, value) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def get_or_compute(self, key: Hashable, compute: Callable[[], object]):
        if key not in self._entries:
            self[key] = compute()
        return self[key]

    def get_many(self, keys: list, compute: Callable[[list[int]], list]) -> list:
        """The values of `keys`, in order: cached ones as they are, the others
        from `compute(indices)`, called once with the index of the first
        occurrence of each missing key (a key repeated in one batch is computed
        once) and returning their values in that order."""
        known = {key: self[key] for key in dict.fromkeys(keys) if key in self._entries}
        first: dict = {}
        for i, key in enumerate(keys):
            if key not in known:
                first.setdefault(key, i)
        todo = list(first.values())
        fresh = dict(zip((keys[i] for i in todo), compute(todo))) if todo else {}
        for key, value in fresh.items():
            self[key] = value
        return [known[key] if key in known else fresh[key] for key in keys]
