"""The Review tab's plain logic: the reviewer's working copy, undo, the diff against the
annotator's labels and how the caption shows it (the browser test drives the rest)."""
from capscope.ui import reviewing_copy as tab

VIEW = {"assignment_id": 7, "caption": "a red cat", "item_id": 1,
        "tokens": [{"text": "a", "start": 0, "end": 1, "semantic": False},
                   {"text": "red", "start": 2, "end": 5, "semantic": True},
                   {"text": "cat", "start": 6, "end": 9, "semantic": True}],
        "labels": {"incorrect_tokens": [1], "mentioned_regions": [0], "junk_regions": [2]}}


def test_toggles_undo_and_the_diff():
    work = tab.fresh_work(VIEW)
    assert tab.changes(VIEW, work) == {}
    assert "No changes" in tab.describe(VIEW, {})
    work = tab.toggled(tab.toggled(work, "tokens", 2), "tokens", 1)
    work = tab.toggled(work, "regions", 2)  # mentioning a junk region takes the junk mark away
    assert (work["tokens"], work["regions"], work["junk"]) == ([2], [0, 2], [])
    diff = tab.changes(VIEW, work)
    assert diff == {"incorrect_tokens": {"added": [2], "removed": [1]},
                    "mentioned_regions": {"added": [2], "removed": []},
                    "junk_regions": {"added": [], "removed": [2]}}
    line = tab.describe(VIEW, diff)
    assert "+ word “cat” incorrect" in line and "− word “red” incorrect" in line and "+ region 3 mentioned" in line
    assert [score for _, score in tab.token_values(VIEW, work)] == [None, -0.6, 0.5]
    back = tab.undone(tab.undone(tab.undone(work)))
    assert (back["tokens"], back["regions"], back["junk"], back["steps"]) == ([1], [0], [2], [])
    assert tab.undone(back) == back


def test_text_from_users_is_escaped():
    view = {**VIEW, "tokens": [{"text": "<b>", "start": 0, "end": 1, "semantic": True}] + VIEW["tokens"][1:],
            "annotator": "ann", "id": "<x>", "dataset": "d", "submitted_at": None,
            "review": {"status": "pending", "comment": "<script>", "reviewer": "rev"}, "since_returned": {},
            "history": [{"revision": 1, "action": "returned", "by": "rev", "status": "draft",
                         "incorrect_tokens": [], "mentioned_regions": [], "comment": "<img>", "at": None}]}
    assert "<script>" not in tab.header(view, 0) and "&lt;script&gt;" in tab.header(view, 0)
    assert "<img>" not in tab.history_html(view)
    assert "word “&lt;b&gt;” incorrect" in tab.describe(view, {"incorrect_tokens": {"added": [0], "removed": []}})
