"""The Review tab's working copy: the reviewer's toggles of a judgement's words and
regions (nothing saved until a decision), undo, the change against the
annotator's labels, and how the tab draws them (header, caption, diff, history,
picture)."""
from __future__ import annotations

import functools
import html
from datetime import datetime

from capscope.annotation import review, workflow
from capscope.metrics.images import read_image
from capscope.pictures import draw as ui_draw


@functools.lru_cache(maxsize=32)
def _image(path: str):
    return read_image(path)


# ---------------------------------------------------------------- the working copy

def fresh_work(view: dict | None) -> dict:
    """The reviewer's working copy of the judgement's labels, and the undo steps."""
    if view is None:
        return {"assignment": None, "tokens": [], "regions": [], "junk": [], "steps": []}
    labels = view["labels"]
    return {"assignment": view["assignment_id"], "tokens": list(labels["incorrect_tokens"]),
            "regions": list(labels["mentioned_regions"]), "junk": list(labels["junk_regions"]), "steps": []}


def toggled(work: dict, part: str, index: int) -> dict:
    """The working copy with one word ("tokens") or region ("regions") flipped; a region
    marked mentioned is no junk any more (as in Annotate)."""
    changed = {**work, "steps": [*work["steps"], {k: work[k] for k in ("tokens", "regions", "junk")}]}
    values = set(work[part]) ^ {index}
    changed[part] = sorted(values)
    if part == "regions" and index in values:
        changed["junk"] = sorted(set(work["junk"]) - {index})
    return changed


def undone(work: dict) -> dict:
    if not work["steps"]:
        return work
    return {**work, **work["steps"][-1], "steps": work["steps"][:-1]}


def changes(view: dict, work: dict) -> dict:
    """The working copy against the annotator's labels (review.label_diff's shape)."""
    labels = view["labels"]
    before = workflow.LabelState(frozenset(labels["incorrect_tokens"]), frozenset(labels["mentioned_regions"]),
                                 "submitted", frozenset(labels["junk_regions"]))
    after = workflow.LabelState(frozenset(work["tokens"]), frozenset(work["regions"]), "submitted",
                                frozenset(work["junk"]))
    return review.label_diff(before, after)


# ---------------------------------------------------------------- drawing

def _when(stamp: str | None, form: str = "%Y-%m-%d %H:%M UTC") -> str:
    if not stamp:
        return ""
    try:
        return datetime.fromisoformat(stamp.rstrip("Z")).strftime(form)
    except ValueError:
        return stamp


def header(view: dict, waiting: int) -> str:
    text = (f"**Judgement by {html.escape(view['annotator'])}** · item {view['item_id']} · "
            f"`{html.escape(view['id'])}` · dataset {html.escape(view['dataset'])} · submitted "
            f"{_when(view['submitted_at'])} · {waiting} waiting for you")
    state = view.get("review") or {}
    if state.get("status") not in (None, "pending"):
        text += f" · **{state['status']}** by {html.escape(state.get('reviewer') or '')}"
    elif view.get("since_returned") is not None and state.get("comment"):
        text += (f"\n\nSent back before by {html.escape(state.get('reviewer') or '')}: "
                 f"“{html.escape(state['comment'])}”")
    return text


def token_values(view: dict, work: dict) -> list[tuple[str, float | None]]:
    """Score mode: red for words marked incorrect by both, lighter red for words the reviewer
    marks, purple for the annotator's marks the reviewer takes away."""
    from capscope.ui.caption_shading import token_segments

    theirs, mine = set(view["labels"]["incorrect_tokens"]), set(work["tokens"])
    values = []
    for i, text in enumerate(token_segments(view["caption"], view["tokens"])):
        score = 1.0 if i in theirs and i in mine else 0.5 if i in mine else -0.6 if i in theirs else None
        values.append((text, score))
    return values


def describe(view: dict, diff: dict) -> str:
    """The diff as a line: + what the reviewer adds, − what they take away."""
    if not diff:
        return ("<div id='cs-review-diff-text'>No changes: <b>Accept</b> keeps the annotator's labels. Click "
                "words and regions to correct them.</div>")
    words = view["tokens"]
    names = {"incorrect_tokens": lambda i: f"word “{html.escape(words[i]['text'])}” incorrect",
             "mentioned_regions": lambda i: f"region {i + 1} mentioned",
             "junk_regions": lambda i: f"region {i + 1} junk",
             "links": lambda pair: f"“{html.escape(words[pair[0]]['text'])}” → region {pair[1] + 1}"}
    parts = []
    for part, change in diff.items():
        parts += [f"<span class='cs-diff-add'>+ {names[part](x)}</span>" for x in change["added"]]
        parts += [f"<span class='cs-diff-remove'>− {names[part](x)}</span>" for x in change["removed"]]
    return f"<div id='cs-review-diff-text'><b>Your correction</b>: {' · '.join(parts)}</div>"


def history_html(view: dict) -> str:
    rows = []
    for h in view["history"]:
        if h["action"] in ("start",):
            continue
        comment = html.escape(h["comment"] or "")
        rows.append(f"<tr><td>{h['revision']}</td><td>{html.escape(h['action'])}</td>"
                    f"<td>{html.escape(h['by'])}</td><td>{html.escape(h['status'])}</td>"
                    f"<td>{len(h['incorrect_tokens'])}</td><td>{len(h['mentioned_regions'])}</td>"
                    f"<td>{comment}</td><td>{_when(h['at'], '%m-%d %H:%M:%S')}</td></tr>")
    return ("<table class='cs-review-history'><tr><th>#</th><th>step</th><th>by</th><th>status</th>"
            "<th>wrong words</th><th>regions</th><th>comment</th><th>at (UTC)</th></tr>" + "".join(rows) + "</table>")


def picture(view: dict, work: dict) -> tuple:
    image = _image(view["_path"])
    boxes = ui_draw.shown_boxes(view["regions"])
    removed = set(view["labels"]["mentioned_regions"]) - set(work["regions"])
    overlay = ui_draw.labels_overlay(image, boxes, set(work["regions"]), removed, set(work["junk"]),
                                     masks=ui_draw.shown_masks(view["regions"]))
    return overlay, ui_draw.thumbnails(image, boxes, set(work["regions"]))
