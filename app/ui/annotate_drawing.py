"""Drawing the Annotate tab: every output a handler returns, from the item and its
labels as the store holds them (the picture with its regions, the words, what was
saved, the progress bars, the ties and the model suggestions' line)."""
from __future__ import annotations

import html
from datetime import datetime

import gradio as gr

from capscope.annotation.model_versions import DEFAULT_TAG, is_version_tag
from capscope.annotation.users import UserInfo
from capscope.server.suggestions import item_picture
from capscope.pictures import draw as ui_draw
from capscope.ui.annotate_actions import empty_draft
from capscope.ui.annotator import Annotator
from capscope.ui.segment_drafts import drawn_draft


def token_values(item: dict, suggested: set[int] | None = None) -> list[tuple[str, float | None]]:
    """Score-mode values: 1.0 (red) for words this annotator marked incorrect;
    a model suggestion, when shown, as a faint 0.3."""
    from capscope.ui.caption_shading import token_segments

    marked = set(item["labels"]["incorrect_tokens"]) if item.get("labels") else set()
    segments = token_segments(item["caption"], item["tokens"])
    return [(text, 1.0 if i in marked else 0.3 if suggested and i in suggested else None)
            for i, text in enumerate(segments)]


def saved_text(labels: dict | None, note: str = "") -> str:
    if not labels:
        return note
    at = labels.get("saved_at", "")
    try:
        at = datetime.fromisoformat(at.rstrip("Z")).strftime("%H:%M:%S UTC")
    except ValueError:
        pass
    words, regions = len(labels["incorrect_tokens"]), len(labels["mentioned_regions"])
    status = labels["status"]
    text = (f"<span class='cs-ok'>✓ Saved</span> · revision {labels['revision']} · {at} · "
            f"{words} wrong word{'s' * (words != 1)}, {regions} region{'s' * (regions != 1)} mentioned · {status}")
    return f"{text} · {note}" if note else text


def _bar(done: int, total: int) -> str:
    share = 0 if total <= 0 else min(100, round(100 * done / total))
    return f"<div class='cs-progress'><div style='width:{share}%'></div></div>"


def progress_html(progress: dict) -> str:
    me, team = progress.get("me", {}), progress["everyone"]
    mine_total = me.get("submitted", 0) + me.get("available", 0) + me.get("in_progress", 0)
    return (f"<b>Mine</b>: {me.get('submitted', 0)} submitted, {me.get('skipped', 0)} skipped, "
            f"{me.get('available', 0)} more available{_bar(me.get('submitted', 0), mine_total)}"
            f"<b>Everyone</b>: {team['judgements_submitted']} / {team['judgements_needed']} judgements, "
            f"{team['items_complete']} / {team['items']} items complete"
            f"{_bar(team['judgements_submitted'], team['judgements_needed'])}")


def item_header(item: dict) -> str:
    text = (f"**Item {item['item_id']}** · `{html.escape(item['id'])}` · dataset {html.escape(item['dataset'])} · "
            f"{sum(not r.get('removed') for r in item['regions'])} regions. "
            "Click wrong words; click the regions the caption mentions.")
    review = item.get("review") or {}
    if review.get("status") == "returned":  # a reviewer sent it back: their comment, then submit again
        text += (f"\n\n<div id='cs-returned'>↩ <b>Sent back by {html.escape(review.get('reviewer') or '')}</b>: "
                 f"“{html.escape(review.get('comment') or '')}” · correct it and submit again.</div>")
    return text


def ties_text(item: dict) -> str:
    """The item's ties as a line: “word” → region numbers."""
    links = (item.get("labels") or {}).get("links") or []
    if not links:
        return "<small>No words tied to regions yet (mode “Tie word → regions”: a word, then its regions).</small>"
    by_word: dict[int, list[int]] = {}
    for token, region in links:
        by_word.setdefault(token, []).append(region + 1)
    shown = " · ".join(f"“{html.escape(item['tokens'][t]['text'])}” → {', '.join(map(str, sorted(r)))}"
                       for t, r in sorted(by_word.items()))
    return f"<small>Ties: {shown}</small>"


def render(annotator: Annotator, user: UserInfo, item: dict | None, note: str = "", show_suggestions: bool = False,
           compute: bool = False, words_only: bool = False) -> tuple:
    """Every output; with `words_only` (a word toggled on the same item) the
    picture, thumbnails and header are left as they are, which keeps clicks quick."""
    progress = progress_html(annotator.progress(user))
    if item is None:
        return (None, "**Nothing left in your queue.** Thank you!", None, [], [], note, progress, "", "",
                empty_draft())
    # label clicks never run the model: only the suggestions handler (model queue) computes
    suggestion = annotator.suggestions.get(user, item, compute) \
        if show_suggestions and annotator.suggestions is not None else None
    wrong, mentioned = (suggestion[0], suggestion[1]) if suggestion else (None, None)
    if words_only:
        picture = (gr.skip(), gr.skip(), gr.skip())
    else:
        picture = _picture(item, mentioned)
    hint = suggestions_hint(suggestion, compute) if show_suggestions else ""
    return (item["item_id"], *picture, token_values(item, wrong), saved_text(item.get("labels"), note),
            progress, hint, ties_text(item), item.get("_draft", gr.skip()))


def _picture(item: dict, suggested_regions: set[int] | None) -> tuple:
    """(header, image with the chosen and suggested regions, thumbnails)."""
    image = item_picture(item["_path"])
    boxes = ui_draw.shown_boxes(item["regions"])  # None for a region taken away
    labels = item.get("labels") or {}
    chosen, junk = set(labels.get("mentioned_regions", ())), set(labels.get("junk_regions", ()))
    picture = ui_draw.labels_overlay(image, boxes, chosen, suggested_regions, junk,
                                     masks=ui_draw.shown_masks(item["regions"]))  # a saved mask shows as drawn
    draft = item.get("_draft") or {}
    if draft.get("points") or draft.get("box"):
        picture = drawn_draft(picture, image.size, draft)
    return item_header(item), picture, ui_draw.thumbnails(image, boxes, chosen)


def suggestion_source(version: str | None) -> str:
    """Who made a suggestion: a model version by its tag, the server's default
    model (None), or predictions imported from a file (any other tag)."""
    if version is None or version == DEFAULT_TAG:
        return "the server's default model"
    if is_version_tag(version):
        return f"model version **{version}**"
    return "imported predictions"


def suggestions_hint(suggestion: tuple | None, computed: bool) -> str:
    """The line under the caption; it says which model version made the suggestions."""
    if suggestion:
        return (f"Model suggestions from {suggestion_source(suggestion[3])} ({suggestion[2]}): "
                "faint red words, dashed boxes.")
    return "No model suggestions for this item." if computed else "Model suggestions are being computed…"
