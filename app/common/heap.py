"""The server's long-lived objects, kept out of the garbage collector's full passes.

A served capscope holds a few hundred thousand objects that live as long as
the process (torch, Gradio, spaCy, the models): one full collection walks
them all, about 175-250 ms on 2 cores, and with it every request the server is
handling waits. A request that allocates much (a large JSON body) sets one off
every few seconds. `freeze_long_lived` moves what exists now out of the
collector's sight (Python's `gc.freeze`), once the app is built and again once
a model is loaded; cycles made later are still collected.
"""
from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    gc.collect()
    gc.freeze()
