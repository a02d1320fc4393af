"""The Admin tab's label quality section, its handlers on a real store (the REST and
domain behaviour are in tests/annotation/test_label_quality.py)."""
from annotation_support import import_small_dataset, sqlite_url
from capscope.annotation import workflow
from capscope.annotation.users import add_user
from capscope.db import Store
from capscope.ui import label_quality


def test_settings_controls_gold_table_and_plot(tmp_path):
    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path, n_images=2, n_captions=6, annotators_per_item=2)
    team = [add_user(store, "ann", "ann-password-1"), add_user(store, "bob", "bob-password-1")]
    assert "Not saved" in label_quality.save_settings(store, "default", 0.9, None, False)
    assert "20%" in label_quality.save_settings(store, "default", 0.2, 0.8, True)
    assert "Not changed" in label_quality.mark_controls(store, "1, two", True)
    assert "stopped at item 1" in label_quality.mark_controls(store, "1", True)  # no gold yet
    for ann in team:
        for _ in range(6):
            item = workflow.next_item(store, ann)
            workflow.save_labels(store, ann, item["item_id"], [1], [], "submitted")
    assert "**6** items by **dawid-skene**" in label_quality.make_gold(store, "default", "dawid-skene", "relative")
    assert label_quality.mark_controls(store, "1 2", True) == "2 items marked as controls."
    text, rate, flag, answers, table, figure = label_quality.show_quality(store, "default")
    assert (rate, flag, answers) == (0.2, 0.8, True) and "20%" in text
    assert table[0][0] == "ann" and table[0][1] == 6 and figure is not None
    assert label_quality.parse_ids("3, 7 12") == [3, 7, 12]


def test_the_admin_releases_section_makes_lists_and_offers_a_zip(tmp_path, monkeypatch):
    import zipfile

    from capscope.annotation import audit
    from capscope.ui import releases

    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "server"))
    store = Store(sqlite_url(tmp_path))
    import_small_dataset(store, tmp_path, n_images=2, n_captions=3, annotators_per_item=1)
    assert "choose a dataset" in releases.make_release_action(store, "", "1.0", "", "", "")[0]
    with audit.acting_as("boss"):
        message, table, archive = releases.make_release_action(store, "default", "1.0", "CC0", "", "be careful")
    assert "3 items" in message and table[0][:3] == ["default", "1.0", 3] and table[0][5] == "boss"
    with zipfile.ZipFile(archive) as zipped:
        assert "default-1.0/metadata.json" in zipped.namelist()
        assert "be careful" in zipped.read("default-1.0/datasheet.md").decode()
    again = releases.make_release_action(store, "default", "1.0", "", "", "")
    assert "exists" in again[0] and again[2] is None
