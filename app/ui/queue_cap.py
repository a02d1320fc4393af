"""Gradio's queue, capped per user.

Gradio's queue is one first-come line for every user of the page (its size
is capped, `max_size`, but not a user's share of it), so one user who queues
events as fast as they are answered keeps the others' events behind theirs,
and can fill it. Events that score skip the queue (`shared.SCORING_EVENTS`);
for the rest, `cap_per_user` refuses a user's event when they already have
`per_user` events waiting or running, as Gradio refuses one when the queue is
full (503 with the reason)."""
from __future__ import annotations

import inspect
import logging

import gradio as gr

log = logging.getLogger(__name__)

PER_USER_EVENTS = 16


def cap_per_user(blocks, per_user: int = PER_USER_EVENTS) -> None:
    """Wrap the queue of `blocks` (after `blocks.queue(...)`) so that no user has more than `per_user` events in it."""
    queue = blocks._queue  # Gradio keeps each event there from its push until it ends
    push = queue.push

    async def capped_push(body, request, username):
        if username is not None:
            mine = sum(1 for event in list(queue.event_ids_to_events.values()) if event.username == username)
            if mine >= per_user:
                return False, f"you already have {mine} events waiting or running; wait for them to finish", \
                    "queue_full"
        return await push(body=body, request=request, username=username)

    queue.push = capped_push


def merged_load(loads: list[tuple]) -> tuple:
    """One page-load event for a tab's `loads` ((fn, inputs, outputs) each), so
    that an admin's page, whose tabs load 17 things, stays well under the cap
    (it refused the last of them on a slow machine). Each fn gets its own inputs
    and, when its signature asks, the request; a failure leaves only its own
    outputs unchanged."""
    parts = [(fn, _as_list(inputs), _as_list(outputs), "request" in inspect.signature(fn).parameters)
             for fn, inputs, outputs in loads]

    def load(*args):
        request, args = args[-1], list(args[:-1])
        values = []
        for fn, inputs, outputs, wants_request in parts:
            mine, args = args[:len(inputs)], args[len(inputs):]
            try:
                result = fn(*mine, request) if wants_request else fn(*mine)
            except Exception:
                log.exception("page load %s failed", getattr(fn, "__name__", fn))
                result = tuple(gr.skip() for _ in outputs)
                result = result[0] if len(outputs) == 1 else result
            values.extend([result] if len(outputs) == 1 else list(result))
        return values[0] if len(values) == 1 else tuple(values)  # Gradio takes one output's value bare

    load.__signature__ = inspect.Signature([
        *(inspect.Parameter(f"input_{i}", inspect.Parameter.POSITIONAL_ONLY)
          for i in range(sum(len(part[1]) for part in parts))),
        inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request)])
    load.__annotations__ = {"request": gr.Request}
    return load, [i for part in parts for i in part[1]], [o for part in parts for o in part[2]]


def _as_list(components) -> list:
    if components is None:
        return []
    return list(components) if isinstance(components, (list, tuple)) else [components]
