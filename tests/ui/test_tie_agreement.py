"""The Benchmark tab's "region → best word against the team's ties": demo scenes whose named
shapes an annotator added back by clicking (through the REST API) and tied to their nouns;
each metric's best word for those regions set beside the ties and beside a word at random."""
import pytest
from fastapi.testclient import TestClient

from annotation_support import sqlite_url
from capscope.annotation.importer import ImportOptions, import_captokeneval
from capscope.annotation.users import add_user
from capscope.db import Store
from capscope.server.api import create_app
from capscope.demo import click_targets
from capscope.studies import click_noc
from capscope.ui.benchmark_gold import _majority_ties, tie_agreement
from capscope.ui.shared import DatasetScores


def test_majority_ties_need_more_than_half_of_those_who_saw_the_region():
    gold = {"links": [{"token": 3, "region": 1, "votes": 2, "total": 3}, {"token": 4, "region": 1, "votes": 1,
                                                                          "total": 2},
                      {"token": 5, "region": 0, "votes": 1, "total": 1}]}
    assert _majority_ties(gold) == {1: {3}, 0: {5}}
    assert _majority_ties({"id": "x"}) == {}


@pytest.mark.slow
def test_best_words_of_tied_regions_are_set_beside_the_ties(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path, targets = click_targets.write_scenes(tmp_path, n=6, seed=11)
    store = Store(sqlite_url(tmp_path))
    import_captokeneval(store, path, ImportOptions(dataset="ties", annotators_per_item=1, progress=False))
    add_user(store, "ann", "ann-password-1")
    app = create_app(store=store, segmenter="classic")
    click_noc.run_study(TestClient(app), ("ann", "ann-password-1"), targets)
    pairs = DatasetScores(store, app.state.models).score_dataset("ties", 10)
    rows = {row[0]: row[1:] for row in tie_agreement(app.state.models, pairs)}
    objects = sum(len(t) for t in targets.values())
    assert "InfoMetIC" in rows
    tied, agreement, chance = rows["InfoMetIC"]
    assert tied == objects and 0 <= agreement <= 1 and 0 < chance < 1
