"""One function says which layout a caption file has (capscope.batch.inputs.input_layout), for
`capscope score`, `import` and `diagnose` alike."""
from __future__ import annotations

import json

import pytest

from capscope.batch.inputs import input_layout
from capscope.common.errors import CapscopeError

FILES = {
    "results.json": ('[{"image_id": 1, "caption": "a cat"}]', "coco-results"),
    "pairs.jsonl": ('{"id": "1", "image": "a.png", "caption": "a cat"}\n', "pairs"),
    "features.jsonl": ('{"id": "1", "features": "a.npz", "caption": "a cat"}\n', "pairs"),
    "scored.jsonl": (json.dumps({"id": "1", "image": "a.png", "caption": "a cat", "metrics": {}}) + "\n", "scored"),
}


@pytest.fixture()
def files(tmp_path):
    for name, (text, _) in FILES.items():
        (tmp_path / name).write_text("\n" + text)  # leading blank lines are no layout
    (tmp_path / "odd.txt").write_text("hello\n")
    return tmp_path


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_layout_is_recognised_from_the_content(files, name):
    assert input_layout(files / name) == FILES[name][1]
    assert input_layout(files / name, otherwise="pairs") == FILES[name][1]


def test_a_named_layout_is_taken_as_it_is(files):
    assert input_layout(files / "results.json", "pairs") == "pairs"
    assert input_layout(files / "missing.jsonl", "scored") == "scored"


def test_no_layout_is_an_error_unless_there_is_a_fallback(files):
    with pytest.raises(CapscopeError, match="expected a COCO results JSON"):
        input_layout(files / "odd.txt")
    with pytest.raises(CapscopeError, match="no such file"):
        input_layout(files / "missing.jsonl")
    assert input_layout(files / "odd.txt", otherwise="pairs") == "pairs"
    assert input_layout(files / "missing.jsonl", otherwise="pairs") == "pairs"
