"""Gradio's queue, capped per user.

Gradio's queue is one first-come line for every user of the page (its size
is capped, `max_size`, but not a user's share of it), so one user who queues
events as fast as they are answered keeps the others' events behind theirs,
and can fill it. Events that score skip the queue (`shared.SCORING_EVENTS`);
for the rest, `cap_per_user` refuses a user's event when they already have
`per_user` events waiting or running, as Gradio refuses one when the queue is
full (503 with the reason)."""
from __future__ import annotations

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
