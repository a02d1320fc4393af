"""Agreement figures against library implementations (krippendorff,
statsmodels' Fleiss kappa, scikit-learn's Cohen kappa), and gold labels."""
import json
import random
from collections import Counter

import numpy as np
import pytest

from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation import agreement
from capscope.annotation import workflow as wf
from capscope.annotation.refusals import Invalid
from capscope.annotation.export import iter_export
from capscope.annotation.users import add_user
from capscope.db import Store


def _unit_counts(matrix: np.ndarray) -> Counter:
    """raters x units with NaN for missing -> {(n0, n1): units}."""
    counts = Counter()
    for column in matrix.T:
        values = column[~np.isnan(column)]
        counts[(int((values == 0).sum()), int((values == 1).sum()))] += 1
    return counts


@pytest.mark.parametrize("seed", range(5))
def test_krippendorff_alpha_with_missing_ratings(seed):
    import krippendorff

    rng = np.random.default_rng(seed)
    truth = rng.random(80) < 0.3
    matrix = np.where(rng.random((4, 80)) < 0.8, truth, ~truth).astype(float)
    matrix[rng.random((4, 80)) < 0.3] = np.nan
    expected = krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal")
    assert agreement.krippendorff_alpha(_unit_counts(matrix)) == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("seed", range(5))
def test_fleiss_kappa(seed):
    from statsmodels.stats.inter_rater import fleiss_kappa

    rng = np.random.default_rng(seed)
    truth = rng.random(60) < 0.4
    matrix = np.where(rng.random((5, 60)) < 0.75, truth, ~truth).astype(float)
    counts = _unit_counts(matrix)
    table = np.array([[(matrix[:, u] == 0).sum(), (matrix[:, u] == 1).sum()] for u in range(60)])
    assert agreement.fleiss_kappa(counts) == pytest.approx(fleiss_kappa(table, method="fleiss"), abs=1e-10)


@pytest.mark.parametrize("seed", range(5))
def test_cohen_kappa(seed):
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(seed)
    a = rng.random(50) < 0.3
    b = np.where(rng.random(50) < 0.8, a, ~a)
    confusion = [[int(((a == i) & (b == j)).sum()) for j in (0, 1)] for i in (0, 1)]
    assert agreement.cohen_kappa(confusion) == pytest.approx(cohen_kappa_score(a, b), abs=1e-10)


def test_undefined_agreement_is_none():
    assert agreement.fleiss_kappa({(3, 0): 10}) is None
    assert agreement.krippendorff_alpha({(3, 0): 10}) is None
    assert agreement.cohen_kappa([[5, 0], [0, 0]]) is None
    assert agreement.fleiss_kappa({}) is None


@pytest.fixture()
def labelled(tmp_path):
    """6 items, 3 annotators with noisy labels; ann2 skips item 6."""
    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path, n_images=2, n_captions=6, annotators_per_item=3)
    rng = random.Random(7)
    users = [add_user(store, f"ann{i}", "long-enough-secret") for i in range(3)]
    sent = {}
    for user in users:
        while (item := wf.next_item(store, user)) is not None:
            if user.name == "ann2" and item["item_id"] == 6:
                wf.skip(store, user, 6)
                continue
            tokens = [i for i in range(len(item["tokens"])) if rng.random() < 0.35]
            regions = [i for i in range(len(item["regions"])) if rng.random() < 0.5]
            wf.save_labels(store, user, item["item_id"], tokens, regions, "submitted")
            sent[(user.name, item["item_id"])] = (set(tokens), set(regions), item)
    return store, sent


def _expected_matrices(sent, semantic_only=True):
    raters = sorted({name for name, _ in sent})
    token_columns, region_columns = [], []
    for item_id in sorted({i for _, i in sent}):
        item = next(v[2] for (n, i), v in sent.items() if i == item_id)
        for t, token in enumerate(item["tokens"]):
            if semantic_only and not token["semantic"]:
                continue
            token_columns.append([float(t in sent[(r, item_id)][0]) if (r, item_id) in sent else np.nan
                                  for r in raters])
        for g in range(len(item["regions"])):
            region_columns.append([float(g in sent[(r, item_id)][1]) if (r, item_id) in sent else np.nan
                                   for r in raters])
    return raters, np.array(token_columns).T, np.array(region_columns).T


def test_store_report_matches_libraries(labelled):
    import krippendorff
    from sklearn.metrics import cohen_kappa_score
    from statsmodels.stats.inter_rater import fleiss_kappa

    store, sent = labelled
    report = agreement.agreement_report(store)
    raters, tokens, regions = _expected_matrices(sent)
    for kind, matrix in (("tokens", tokens), ("regions", regions)):
        expected_alpha = krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal")
        assert report[kind]["krippendorff_alpha"] == pytest.approx(expected_alpha, abs=1e-10)
        complete = matrix[:, ~np.isnan(matrix).any(axis=0)]  # statsmodels needs equal raters per unit
        table = np.stack([(complete == 0).sum(0), (complete == 1).sum(0)], axis=1)
        only_complete = agreement.fleiss_kappa(_unit_counts(complete))
        assert only_complete == pytest.approx(fleiss_kappa(table), abs=1e-10)
    for pair in report["pairs"]:
        a, b = raters.index(pair["a"]), raters.index(pair["b"])
        both = ~np.isnan(tokens[a]) & ~np.isnan(tokens[b])
        assert pair["token_units"] == both.sum()
        assert pair["token_cohen_kappa"] == pytest.approx(cohen_kappa_score(tokens[a][both], tokens[b][both]))
    assert [a["judgements"] for a in report["annotators"]] == [6, 6, 5]


def test_majority_gold_and_adjudication(labelled):
    store, sent = labelled
    admin = add_user(store, "boss", "long-enough-secret", "admin")
    assert agreement.gold_from_majority(store, min_judgements=3) == 5  # item 6 has only 2 judgements
    rows = {row["id"]: row for row in map(json.loads, iter_export(store, "captokeneval"))}
    row = rows["cap00000"]
    for t, token in enumerate(row["tokens"]):
        votes = sum(t in sent[(f"ann{r}", 1)][0] for r in range(3))
        assert token["votes"] == {"incorrect": votes, "total": 3}
        assert token["label"] == ("incorrect" if votes >= 2 else "correct")
    n_tokens, n_regions = len(row["tokens"]), len(row["regions"])
    labels = ["correct"] * n_tokens
    labels[1] = "incorrect"
    agreement.adjudicate(store, admin, 1, labels, ["mentioned"] + [None] * (n_regions - 1))
    agreement.gold_from_majority(store, min_judgements=3)  # keeps the adjudicated gold
    row = next(r for r in map(json.loads, iter_export(store, "captokeneval")) if r["id"] == "cap00000")
    assert [t["label"] for t in row["tokens"]] == labels
    assert row["regions"][0]["label"] == "mentioned"
    with pytest.raises(Invalid):
        agreement.adjudicate(store, admin, 1, labels[:-1], [None] * n_regions)
    with pytest.raises(Invalid):
        agreement.adjudicate(store, admin, 1, ["wrong"] * n_tokens, [None] * n_regions)


def test_gold_history_keeps_what_adjudication_replaced(labelled):
    from capscope.annotation.gold import gold_history

    store, _ = labelled
    admin = add_user(store, "boss", "long-enough-secret", "admin")
    agreement.gold_from_majority(store, min_judgements=3)
    agreement.gold_from_majority(store, min_judgements=3)  # the same labels again: no new revision
    majority = gold_history(store, 1)
    assert [(h["revision"], h["source"], h["adjudicator"]) for h in majority] == [(1, "majority", None)]
    tokens, regions = majority[0]["token_labels"], majority[0]["region_labels"]
    flipped = ["incorrect" if label == "correct" else "correct" for label in tokens]
    agreement.adjudicate(store, admin, 1, flipped, regions)
    agreement.adjudicate(store, admin, 1, tokens, regions)  # changed back: a third revision
    history = gold_history(store, 1)
    assert [(h["revision"], h["source"], h["adjudicator"]) for h in history] == [
        (1, "majority", None), (2, "adjudicated", "boss"), (3, "adjudicated", "boss")]
    assert history[1]["token_labels"] == flipped and history[2]["token_labels"] == tokens == history[0]["token_labels"]
    assert gold_history(store, 999) == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_adjudications_keep_a_gapless_history(backend, tmp_path):
    import contextlib
    import threading

    from annotation_support import fresh_pg_database
    from capscope.annotation.gold import gold_history

    with (fresh_pg_database() if backend == "postgresql" else contextlib.nullcontext(sqlite_url(tmp_path))) as url:
        store = Store(url)
        import_small_dataset(store, tmp_path, n_images=1, n_captions=1, annotators_per_item=1)
        item = wf.get_item(store, add_user(store, "boss", "long-enough-secret", "admin"), 1)
        n_tokens, n_regions = len(item["tokens"]), len(item["regions"])
        admins = [add_user(store, f"admin{i}", "long-enough-secret", "admin") for i in range(2)]
        errors = []

        def adjudicate_often(admin, label):
            for k in range(8):
                try:
                    agreement.adjudicate(store, admin, 1, [label if k % 2 else None] * n_tokens, [None] * n_regions)
                except Exception as err:  # noqa: BLE001  (any failure is the finding)
                    errors.append(repr(err))

        threads = [threading.Thread(target=adjudicate_often, args=(a, label))
                   for a, label in zip(admins, ("correct", "incorrect"))]
        [t.start() for t in threads]
        [t.join() for t in threads]
        history = gold_history(store, 1)
        store.dispose()
    assert errors == []
    assert [h["revision"] for h in history] == list(range(1, len(history) + 1)) and len(history) >= 2
