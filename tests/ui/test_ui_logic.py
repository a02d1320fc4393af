"""The UI's handler logic as plain functions: drawing, token shading, the
annotate workflow against a real store, explore, benchmark and admin helpers.
No model and no browser here (see test_ui_served.py for those)."""
import json

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from capscope.pictures import draw as ui_draw

from capscope.ui import explore as ui_explore

from capscope.ui import shared as ui_shared

from capscope.ui import benchmark as ui_benchmark
from capscope.ui import benchmark_gold

from capscope.ui import admin as ui_admin

from capscope.ui import inspect as ui_inspect
from capscope.ui import inspect_scoring, inspect_views

from capscope.ui import caption_shading
from capscope.annotation import agreement, browse, importer, workflow
from capscope.annotation.users import add_user
from capscope.annotation.votes import load_item
from capscope.db import Store
from capscope.server.first_run import ensure_admin
from capscope.ui.page import demo_examples
from capscope.ui.annotate_drawing import progress_html, saved_text, token_values
from capscope.ui.annotator import Annotator
from capscope.server.scoring import Models

CAPTION = "a red circle and a blue square."
TOKENS = [("a", 0, 1, False), ("red", 2, 5, True), ("circle", 6, 12, True), ("and", 13, 16, False),
          ("a", 17, 18, False), ("blue", 19, 23, True), ("square", 24, 30, True), (".", 30, 31, False)]
BOXES = [[10, 10, 60, 60], [100, 100, 180, 180], [0, 0, 224, 224]]


def colours(image):
    return {tuple(int(v) for v in c) for c in np.asarray(image).reshape(-1, 3)}


def tokens():
    return [{"text": t, "start": s, "end": e, "semantic": sem} for t, s, e, sem in TOKENS]


def model_row(token_scores, region_scores, metric="infometic"):
    return {
        "caption": CAPTION, "tokens": tokens(), "error": None,
        "regions": [{"box": b, "confidence": None, "source": "given"} for b in BOXES],
        "metrics": {metric: {
            "scores": {"precision": 1.5, "recall": 0.5, "overall": 2.0},
            "token_scores": token_scores,
            "token_correct": [None if s is None or not t[3] else s > 0.1 for t, s in zip(TOKENS, token_scores)],
            "region_scores": region_scores, "region_mentioned": [s > 0.1 for s in region_scores],
            "null_score": 0.2}},
        "model": {"demo": True},
    }


@pytest.fixture()
def dataset(tmp_path):
    """Two scenes in CapTokenEval form, imported into a fresh SQLite store."""
    (tmp_path / "images").mkdir()
    rows = []
    for i in range(2):
        image = Image.new("RGB", (224, 224), (230, 230, 230))
        image.paste((220, 30, 30), (10, 10, 60, 60))
        image.save(tmp_path / "images" / f"s{i}.png")
        rows.append({"id": f"s{i}-{'clean' if i == 0 else 'polluted'}", "image": f"images/s{i}.png",
                     "caption": CAPTION,
                     "tokens": [{**t, "label": ("incorrect" if i and t["text"] == "blue" else "correct")
                                 if t["semantic"] else None} for t in tokens()],
                     "regions": [{"box": b, "mask": None, "label": "mentioned" if j < 2 else "unmentioned"}
                                 for j, b in enumerate(BOXES)]})
    listing = tmp_path / "captokeneval.jsonl"
    listing.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = Store(f"sqlite:///{tmp_path / 'ui.db'}")
    importer.import_captokeneval(store, listing, importer.ImportOptions(dataset="demo", regions="none",
                                                                       progress=False, annotators_per_item=2))
    ann = add_user(store, "ann", "password-1234")
    admin = add_user(store, "boss", "password-1234", "admin")
    return store, ann, admin, tmp_path


# ---------------------------------------------------------------- drawing

def test_display_scale_enlarges_small_images_only():
    assert ui_draw.display_scale((224, 224)) == 3
    assert ui_draw.display_scale((1024, 768)) == 1
    assert ui_draw.display_scale((10, 10)) == ui_draw.MAX_DISPLAY_SCALE


def test_region_at_prefers_the_smallest_box_and_clicks_map_back():
    assert ui_draw.region_at(BOXES, 30, 30) == 0          # inside box 0 and the whole-image box
    assert ui_draw.region_at(BOXES, 200, 200) == 2
    assert ui_draw.region_at(BOXES[:2], 90, 90) is None
    # displayed at 3x: a click at (90, 90) on screen is (30, 30) in the image
    assert ui_draw.clicked_region(BOXES, (224, 224), [90, 90]) == 0
    assert ui_draw.clicked_region(BOXES, (224, 224), None) is None


def test_overlays_mark_unmentioned_regions_and_chosen_ones():
    image = Image.new("RGB", (224, 224), (255, 255, 255))
    drawn = ui_draw.score_overlay(image, BOXES[:2], [0.9, 0.01], [True, False])
    assert drawn.size == (672, 672)
    seen = colours(drawn)
    assert ui_draw.UNMENTIONED in seen            # the left-out region's dashed outline
    assert ui_draw.heat(1.0) in seen                # the best-scored region, hot red
    chosen = ui_draw.labels_overlay(image, BOXES[:2], {1}, suggested={0})
    assert ui_draw.CHOSEN in colours(chosen)
    tiles = ui_draw.thumbnails(image, BOXES, {1})
    assert [caption for _, caption in tiles] == ["1", "2 ✓", "3"]


def test_heat_runs_from_cool_to_hot():
    assert ui_draw.heat(0)[2] > ui_draw.heat(0)[0]
    assert ui_draw.heat(1)[0] > ui_draw.heat(1)[2]
    assert ui_draw.normalised([1.0, 1.0]) == [0.5, 0.5]


# ---------------------------------------------------------------- inspect

def test_token_segments_join_back_into_the_caption():
    segments = caption_shading.token_segments(CAPTION + "  ", tokens())
    assert "".join(segments) == CAPTION + "  "
    assert len(segments) == len(TOKENS) and segments[1] == " red"


def test_shading_reds_unsupported_words_and_skips_function_words():
    row = model_row([None, 0.02, 0.3, None, None, 0.5, 0.08, None], [0.4, 0.05, 0.2])
    shaded = dict(enumerate(v for _, v in caption_shading.shaded_tokens(row, "infometic")))
    assert shaded[0] is None and shaded[3] is None
    assert shaded[1] >= 0.6 and shaded[6] >= 0.6           # wrong words: clearly red
    assert shaded[2] < 0 and shaded[5] < 0                 # supported: purple
    assert caption_shading.wrong_words(row, "infometic") == ["red", "square"]
    summary = inspect_views.summary_markdown(row, "infometic")
    assert "~~red~~" in summary and "Regions left out:** 2 of 3" in summary and "0.200" in summary


def test_metric_without_token_scores_shades_nothing_and_falls_back():
    row = model_row([None] * 8, [], metric="clip-s")
    row["metrics"]["clip-s"]["token_correct"] = [None] * 8
    assert all(v is None for _, v in caption_shading.shaded_tokens(row, "clip-s"))
    assert inspect_scoring.shown_metric(row, "infometic") == "clip-s"


def test_scores_side_by_side_and_phrases():
    a = model_row([0.2] * 8, [0.3, 0.3, 0.3])
    b = model_row([0.2] * 8, [0.3, 0.3, 0.3])
    b["metrics"]["infometic"]["scores"]["overall"] = 1.0
    rows = inspect_views.scores_rows(a, b)
    assert ["InfoMetIC", "overall", 2.0, 1.0] in [r[:4] for r in rows]
    assert inspect_views.scores_rows(a, None)[0][3] is None
    from capscope.metrics.registry import key_note

    overall = next(r for r in rows if r[:2] == ["InfoMetIC", "overall"])
    note = key_note("infometic", "overall")  # the table says what each number is, as the registry does
    assert overall[4:] == [note.range, "higher is better", note.meaning]
    a["metrics"]["hice"] = {"scores": {}, "phrases": [{"text": "red circle", "tokens": [1, 2], "score": 0.31,
                                                       "correct": True}]}
    assert "| red circle | 0.310 | ✓ |" in inspect_views.phrases_markdown(a)


def test_region_report_names_the_best_match():
    row = model_row([0.2] * 8, [0.3, 0.01, 0.3])
    text = inspect_views.region_report(row, "infometic", 1, [("blue", 0.31), ("square", 0.2)])
    assert "Region 2" in text and "not mentioned" in text and "**blue**" in text
    assert "Click inside" in inspect_views.region_report(None, "infometic", None, [])


def test_token_shade_bounds():
    assert caption_shading.token_shade(0.0, False, 0.1) == 1.0
    assert caption_shading.token_shade(1.0, True, 0.1) == -0.7
    assert caption_shading.token_shade(None, None, 0.1) is None
    assert inspect_views.parse_references(" a\n\n b ") == ["a", "b"] and inspect_views.parse_references("") is None


# ---------------------------------------------------------------- models

def test_models_build_once_and_leave_out_metrics_that_cannot_load():
    from capscope.common.errors import ModelUnavailable
    from capscope.metrics.registry import metric_names

    built = []

    class FakeScorer:
        demo = True

        def __init__(self, metrics):
            built.append(list(metrics))
            missing = {"pac-s": "PAC-S: checkpoint file x not found (set --pacs-checkpoint)",
                       "hice": "Alpha-CLIP: no checkpoint"}
            self.metrics = {m: None for m in metrics if m not in missing}
            self.unavailable = {m: why for m, why in missing.items() if m in metrics}

    models = Models(FakeScorer)
    assert models.available == ["infometic", "infoclip", "clip-s", "clip4dm"] and models.demo
    assert models.unavailable == {"pac-s": "PAC-S: checkpoint file x not found (set --pacs-checkpoint)",
                                  "hice": "Alpha-CLIP: no checkpoint"}
    assert built == [list(metric_names())]  # every registered metric, in one build
    for asked, why in ((["clip-s", "pac-s"], "pac-s is not available on this server: PAC-S"),
                       (["bleu"], "bleu is not loaded on this server")):
        with pytest.raises(ModelUnavailable, match=why):
            models.score(Image.new("RGB", (8, 8)), "a cat", metrics=asked)
    with pytest.raises(ValueError, match="unknown token rule"):
        Models(FakeScorer, token_rule="loose")


def test_a_keystroke_scores_the_shown_metric_first_and_the_rest_once():
    calls = []

    class FakeScorer:
        metrics = {"infometic": None, "clip-s": None, "hice": None}
        unavailable, demo = {}, True

        def __init__(self, metrics):
            pass

        def score(self, image, caption, references=None, regions=None, tokens=None, only=None):
            calls.append(list(only or self.metrics))
            row = model_row([None, 0.5, 0.05, None, None, 0.3, 0.2, None], [0.4, 0.05, 0.3])
            row["metrics"] = {m: {**row["metrics"]["infometic"], "scores": {"s": float(len(m))}}
                              for m in only or self.metrics}
            return row

    models, image = Models(FakeScorer), Image.new("RGB", (224, 224))
    first, shaded = inspect_scoring.words_first(models, image, CAPTION, "", None, "hice")
    assert calls == [["hice"]] and list(first["metrics"]) == ["hice"]
    assert [text for text, _ in shaded] == caption_shading.token_segments(CAPTION, tokens())
    assert shaded[2][1] > 0 and shaded[1][1] < 0  # "circle" (0.05) is shaded red, "red" (0.5) purple
    row = inspect_scoring.score_rest(models, image, CAPTION, "", None, first)
    assert calls[1] == ["infometic", "clip-s"]  # hice is not scored again
    assert set(row["metrics"]) == {"infometic", "clip-s", "hice"} and row["metrics"]["hice"]["scores"] == {"s": 4.0}
    inspect_scoring.score_rest(models, image, CAPTION + " again", "", None, first)  # the caption moved on
    assert calls[2] == ["infometic", "clip-s", "hice"]
    assert inspect_scoring.words_first(models, image, CAPTION, "", None, "pac-s")[0] is not None
    assert calls[3] == ["infometic", "clip-s", "hice"]  # a metric not loaded: every loaded one
    from capscope.ui.page import static_text

    script = static_text("hotkeys.js")
    assert "setTimeout" in script and "cs-caption-" in script and "cs-rest-" in script  # the pause's re-score



def test_an_overtaken_scoring_does_not_overwrite_a_newer_caption():
    """Scorings of one caption column run side by side: an answer is dropped when
    one that started later, of another caption, was shown first; one of the same
    caption is kept (a pause's whole row after the last key's words)."""
    from types import SimpleNamespace

    latest = inspect_scoring.LatestShown(pages=4)
    page, other = SimpleNamespace(session_hash="p1", username="ann"), SimpleNamespace(session_hash="p2", username="ann")
    upload = latest.start(page, "a")        # an upload's whole row, of the caption typed so far ("a re")
    rest = latest.start(page, "a")          # the pause's whole row of "a red"
    keystroke = latest.start(page, "a")     # the last key's words ("a red"), started after it
    assert latest.start(page, "b") == 1 and latest.start(other, "a") == 1  # columns and pages count apart
    assert latest.start(SimpleNamespace(session_hash="p1", username="eve"), "a") == 1  # eve sending ann's session
    # id counts apart, so she cannot hold ann's answers back
    assert latest.may_show(page, "a", keystroke, "a red")
    assert not latest.may_show(page, "a", upload, "a re")  # finished last, older, of another caption: dropped
    assert latest.may_show(page, "a", rest, "a red")  # older but of the caption shown: its whole row is kept
    assert latest.may_show(page, "a", latest.start(page, "a"), "a red square")
    assert not latest.may_show(page, "a", keystroke, "a red")  # now another caption is shown
    assert latest.may_show(SimpleNamespace(session_hash=None), "a", 1, "x")  # an API call has no page to protect
    latest.start(SimpleNamespace(session_hash="p3"), "a")  # a fifth column: the least recently used goes
    assert ("p1", "ann", "b") not in latest._tickets and len(latest._tickets) == 4
    assert latest.answer(page, "a", "a red", lambda: (1, 2)) == (1, 2)  # nothing newer shown meanwhile

    def overtaken_meanwhile():  # a scoring of a newer caption starts and is shown while this one runs
        assert latest.may_show(page, "a", latest.start(page, "a"), "a red circle")
        return 1, 2

    assert latest.answer(page, "a", "a red", overtaken_meanwhile) == (gr.skip(), gr.skip())


# ---------------------------------------------------------------- annotate (real store)

def test_annotate_clicks_are_saved_and_undone(dataset):
    store, ann, _, _ = dataset
    annotator = Annotator(store)
    item = annotator.next(ann)
    assert item["_path"].endswith(".png") and item["labels"]["revision"] == 0
    labels = annotator.toggle_token(ann, item["item_id"], 1)
    labels = annotator.toggle_token(ann, item["item_id"], 5)
    region = annotator.region_at_click(ann, item["item_id"], [3 * 150, 3 * 150])   # displayed 3x
    assert region == 1
    labels = annotator.toggle_region(ann, item["item_id"], region)
    assert labels["incorrect_tokens"] == [1, 5] and labels["mentioned_regions"] == [1]
    # the store, not the page, holds the labels: a fresh view shows them
    again = annotator.next(ann)
    assert again["item_id"] == item["item_id"] and again["labels"]["incorrect_tokens"] == [1, 5]
    assert annotator.undo(ann, item["item_id"])["mentioned_regions"] == []
    values = token_values(again, suggested={2})
    assert values[1][1] == 1.0 and values[2][1] == 0.3 and values[0][1] is None
    assert "✓ Saved" in saved_text(labels) and "2 wrong words, 1 region mentioned" in saved_text(labels)


def test_annotate_handlers_apply_one_step_each(dataset):
    from types import SimpleNamespace

    from capscope.ui.annotate_handlers import OUTPUTS, AnnotateHandlers

    store, ann, _, _ = dataset
    handlers, request = AnnotateHandlers(Annotator(store)), SimpleNamespace(username="ann")
    shown = handlers.next(None, False, request)
    item_id = shown[0]
    assert len(shown) == len(OUTPUTS) and "Item" in shown[1] and shown[2] is not None
    words = handlers.toggle_token(item_id, False, 1, request)
    assert words[0] == item_id and words[4][1][1] == 1.0 and "1 wrong word, 0 regions" in words[5]
    assert all(isinstance(part, type(gr.skip())) for part in words[1:4])  # the picture is left as it is
    keyed = handlers.on_region_key("3", item_id, False, request)
    assert "1 wrong word, 1 region mentioned" in keyed[5]
    assert workflow.get_item(store, ann, item_id)["labels"]["mentioned_regions"] == [2]
    assert "0 regions" in handlers.undo(item_id, False, request)[5]
    assert "not saved" in handlers.toggle_region(item_id, False, 7, request)[5]
    after = handlers.submit(item_id, False, request)
    assert after[0] != item_id and f"item {item_id} submitted" in after[5]
    assert handlers.suggest(after[0], False, request) == tuple(gr.skip() for _ in OUTPUTS)
    assert "not logged in" in handlers.next(None, False, SimpleNamespace(username=None))[1]


def test_submit_and_skip_advance_and_progress_counts(dataset):
    store, ann, _, _ = dataset
    annotator = Annotator(store)
    first = annotator.next(ann)
    annotator.submit(ann, first["item_id"])
    second = annotator.next(ann)
    assert second["item_id"] != first["item_id"]
    annotator.skip(ann, second["item_id"])
    assert annotator.next(ann) is None
    html = progress_html(annotator.progress(ann))
    assert "1 submitted, 1 skipped" in html and "1 / 4 judgements" in html
    back = annotator.previous(ann, None)  # back on the submitted item, "skip" must not withdraw it
    assert back["item_id"] == first["item_id"]
    assert annotator.skip(ann, first["item_id"])["status"] == "submitted"
    assert "1 submitted, 1 skipped" in progress_html(annotator.progress(ann))


def test_toggle_out_of_range_is_refused(dataset):
    from capscope.annotation.refusals import AnnotationError

    store, ann, _, _ = dataset
    annotator = Annotator(store)
    item = annotator.next(ann)
    with pytest.raises(AnnotationError):
        annotator.toggle_region(ann, item["item_id"], 99)


# ---------------------------------------------------------------- explore, benchmark, admin

def test_an_admin_removes_a_region_in_explore_and_the_gold_picture_no_longer_shows_it(dataset):
    from capscope.annotation.refusals import AnnotationError

    store, ann, admin, _ = dataset
    item = workflow.next_item(store, ann)
    workflow.save_labels(store, ann, item["item_id"], [], [0, 1], "submitted")
    before, _, _ = ui_explore._gold_views(load_item(store, item["item_id"]))
    overlay, _, note = ui_explore.remove_region_click(store, "boss", item["item_id"], 1)
    assert "region 1 removed; 1 judgement lost their votes on it" in note
    assert np.asarray(overlay).tolist() != np.asarray(before).tolist()
    assert workflow.get_item(store, ann, item["item_id"])["labels"]["mentioned_regions"] == [1]
    for wrong in (0, 1.5, True, "1", float("nan"), float("inf"), None):
        with pytest.raises(AnnotationError):
            ui_explore.remove_region_click(store, "boss", item["item_id"], wrong)
    with pytest.raises(AnnotationError, match="already"):
        ui_explore.remove_region_click(store, "boss", item["item_id"], 1)


def test_explore_filters_by_annotator_and_sorts_by_stored_score(dataset):
    store, ann, admin, _ = dataset
    annotator = Annotator(store)
    item = annotator.next(ann)
    rows, total, headers = ui_explore.explore_page(store, "demo", "all", "id", False, "ann", "", 1)
    assert [r[0] for r in rows] == [item["item_id"]] and total.startswith("1 items")
    scores = ui_shared.DatasetScores(store, models=None)
    pairs = [({"id": "s0-clean", "dataset": "demo"}, model_row([0.2] * 8, [0.3, 0.3, 0.3])),
             ({"id": "s1-polluted", "dataset": "demo"}, model_row([0.05] * 8, [0.3, 0.3, 0.3]))]
    pairs[1][1]["metrics"]["infometic"]["scores"]["overall"] = 9.0
    scores.store_predictions(pairs)
    choices = dict((v, k) for k, v in ui_explore.sort_choices(store))
    assert "score:infometic:overall" in choices
    rows, _, headers = ui_explore.explore_page(store, "", "all", "score:infometic:overall", True, "", "", 1)
    assert headers[-1] == "score" and [r[1] for r in rows] == ["s1-polluted", "s0-clean"]
    rows, _, _ = ui_explore.explore_page(store, "", "all", "uncertainty", True, "", "", 1)
    assert len(rows) == 2
    rows, total, _ = ui_explore.explore_page(store, "", "all", "score:infometic:overall", False, "", "", 1, "5", "")
    assert [r[1] for r in rows] == ["s1-polluted"] and total.startswith("1 items")
    assert len(ui_explore.explore_page(store, "", "all", "score:infometic:overall", False, "", "", 1, "x", "")[0]) == 2
    # the filters' choices and one item's data come from annotation/, plain data
    assert browse.dataset_names(store) == ["demo"] and browse.annotator_names(store) == ["ann"]
    assert browse.score_keys(store) == [("infometic", "overall"), ("infometic", "precision"), ("infometic", "recall")]
    loaded = load_item(store, item["item_id"])
    assert (loaded.caption_id, loaded.text, len(loaded.tokens), len(loaded.regions)) == (item["item_id"], CAPTION, 8, 3)
    assert load_item(store, 10**6) is None


def test_evaluation_rows_and_plot_from_scored_pairs(dataset):
    from capscope.annotation.export import captokeneval_row
    from capscope.annotation.votes import iter_items

    store, *_ = dataset
    gold = [captokeneval_row(item) for item in iter_items(store)]
    rows = [model_row([None, 0.3, 0.3, None, None, 0.3, 0.3, None], [0.3, 0.3, 0.01]),
            model_row([None, 0.3, 0.3, None, None, 0.01, 0.3, None], [0.3, 0.3, 0.01])]
    table = benchmark_gold.evaluation_rows(list(zip(gold, rows)))
    assert table[0][0] == "InfoMetIC" and table[0][1] == 2
    assert table[0][2] == 1.0 and table[0][3] == 1.0          # every token and region right
    assert table[-1][0].startswith("trivial")
    figure = benchmark_gold.distribution_plot(list(zip(gold, rows)))
    assert len(figure.axes) == 1


def test_gold_and_model_view(dataset):
    store, *_ = dataset

    class FakeScores:
        def score_item(self, item):
            return model_row([0.2] * 8, [0.3, 0.01, 0.3])

    item_id = workflow.next_item(store, dataset[1])["item_id"]
    gold_image, model_image, gold_tokens, model_tokens, note = ui_explore.gold_and_model(store, FakeScores(),
                                                                                         item_id, None)
    assert gold_image.size == model_image.size == (672, 672)
    assert gold_tokens[1][1] == -0.4 and "gold: import, revision 1" in note
    assert ui_explore.gold_and_model(store, FakeScores(), 9999, None)[-1] == "No item 9999."


def test_adjudication_clicks_flip_gold_and_keep_history(dataset):
    from capscope.annotation.gold import gold_history

    store, _, admin, _ = dataset
    item = workflow.get_item(store, admin, 1)
    _, tokens, note = ui_explore.adjudicate_click(store, admin.name, 1, token=1)   # correct -> incorrect
    assert tokens[1][1] == 1.0 and "revision 2" in note and "saved" in note
    box = item["regions"][0]["box"]
    scale = ui_draw.display_scale((item["width"], item["height"]))
    centre = [(box[0] + box[2]) / 2 * scale, (box[1] + box[3]) / 2 * scale]
    region = ui_draw.region_at([r["box"] for r in item["regions"]], centre[0] / scale, centre[1] / scale)
    before = agreement.gold_view(store, 1)["region_labels"][region]
    ui_explore.adjudicate_click(store, admin.name, 1, point=centre)
    after = agreement.gold_view(store, 1)["region_labels"][region]
    assert {before, after} == {"mentioned", "unmentioned"} or (before is None and after == "mentioned")
    history = gold_history(store, 1)
    assert [h["source"] for h in history] == ["import", "adjudicated", "adjudicated"]
    assert history[-1]["adjudicator"] == admin.name
    assert "no region under that point" in ui_explore.adjudicate_click(store, admin.name, 1, point=[-5, -5])[2]


def test_agreement_export_and_users(dataset):
    store, ann, admin, tmp_path = dataset
    summary, annotators, pairs = ui_benchmark.agreement_tables(store, "demo")
    assert "0 items with judgements" in summary and annotators == [] and pairs == []
    for fmt in ("captokeneval", "csv", "coco"):
        path = ui_shared.export_file(store, fmt, "demo")
        assert open(path, encoding="utf-8").read().strip()
    import zipfile

    with zipfile.ZipFile(ui_shared.benchmark_zip(store, "demo")) as bundle:
        names = set(bundle.namelist())
        rows = [json.loads(line) for line in bundle.read("capscope-demo/captokeneval.jsonl").splitlines()]
    assert rows and all(f"capscope-demo/{row['image']}" in names for row in rows)
    message, users = ui_admin.add_user_action(store, "newbie", "password-1234", "annotator")
    assert "added" in message and ["newbie", "annotator"] in users
    assert "Not added" in ui_admin.add_user_action(store, "newbie", "password-1234", "annotator")[0]
    assert ensure_admin(store) is None                      # users exist: nothing created


def test_import_uploaded_files(dataset, monkeypatch):
    store, _, _, tmp_path = dataset
    monkeypatch.setenv("CAPSCOPE_DATA_DIR", str(tmp_path / "data"))
    listing = tmp_path / "upload.jsonl"
    listing.write_text(json.dumps({"id": "u1", "image": "images/s0.png", "caption": "a red square."}) + "\n")
    report = ui_admin.import_files(store, [str(listing), str(tmp_path / "images" / "s0.png")], "captions",
                                     "uploaded", 1)
    assert "1 added" in report
    assert "exactly one" in ui_admin.import_files(store, [], "captions", "x", 1)


def test_demo_examples_pair_polluted_with_clean(dataset):
    *_, tmp_path = dataset
    examples = demo_examples(tmp_path)
    assert len(examples) == 2 and examples[0]["regions"][0] == {"box": BOXES[0]}
    assert demo_examples(None) == []


def test_admin_only_checks_the_callers_role(dataset):
    import gradio as gr

    store, *_ = dataset
    request = lambda name: type("Request", (), {"username": name})()  # noqa: E731
    double = ui_shared.admin_only(store, lambda x: 2 * x)
    assert double(21, request("boss")) == 42
    with pytest.raises(gr.Error):
        double(21, request("ann"))
    quiet = ui_shared.admin_only(store, lambda: (1, 2), outputs=2)
    assert len(quiet(request(None))) == 2
    assert list(__import__("inspect").signature(double).parameters) == ["x", "request"]


def test_annotate_hands_out_an_item_with_its_dataset_for_the_segmenters_look_ahead(dataset):
    """Before, Annotate's hand-outs named no dataset: a user who never clicked got no embedding ahead
    even where the team segments (the REST hand-out did)."""
    store, ann, _, _ = dataset

    class Clicks:
        asked = []

        def prefetch(self, user, image_id, path, dataset=None):
            self.asked.append((user, image_id, dataset))

    item = Annotator(store, clicks=Clicks()).next(ann)
    assert Clicks.asked == [("ann", item["image_id"], "demo")]


def test_suggestions_prefer_infometic_predictions(dataset):
    from capscope.server.suggestions import Suggestions
    from capscope.ui.annotate_drawing import suggestions_hint

    store, ann, _, _ = dataset
    scores = ui_shared.DatasetScores(store, models=None)
    hice = model_row([None, 0.3, 0.3, None, None, 0.3, 0.3, None], [0.3, 0.3, 0.3], metric="hice")
    info = model_row([None, 0.02, 0.3, None, None, 0.3, 0.3, None], [0.3, 0.01, 0.3])
    info["metrics"].update(hice["metrics"])
    scores.store_predictions([({"id": "s0-clean", "dataset": "demo"}, info)])
    item = Annotator(store).next(ann)
    wrong, mentioned, metric, version = Suggestions(store, Models()).get(ann, item)
    assert metric == "infometic" and wrong == {1} and mentioned == {0, 2}
    assert version == '{"demo": true}'  # the row's "model", as imported: not a model version's tag
    assert "imported predictions (infometic)" in suggestions_hint((wrong, mentioned, metric, version), False)
    assert "model version **v3:0123456789ab** (infometic)" in suggestions_hint(({1}, set(), metric, "v3:0123456789ab"),
                                                                              False)
    assert "the server's default model" in suggestions_hint(({1}, set(), metric, None), True)


def test_stored_predictions_are_decided_under_the_servers_token_rule():
    from capscope.server.suggestions import decided as _decided

    item = {"tokens": [{"semantic": True}] * 12 + [{"semantic": False}]}
    stored = {"token_scores": [0.06] * 11 + [0.03, 0.5], "region_scores": [0.2, 0.05]}
    # 12 semantic words seen: relative threshold 0.1 * 5 / 12 = 0.042; the paper's 0.1
    assert _decided(item, stored, "infometic", "relative", 1.0) == ({11}, {0}, "infometic")
    assert _decided(item, stored, "infometic", "paper", 1.0) == (set(range(12)), {0}, "infometic")
    hice = _decided(item, {"token_scores": [0.3] * 12 + [None], "region_scores": [0.1]}, "hice", "relative", 1.0)
    assert hice == (set(), set(), "hice")  # HICE-S keeps its own cut whatever the rule
    # a version's fitted scale of 0.6 moves the word cut to 0.025 (regions keep beta): 0.03 is correct
    assert _decided(item, stored, "infometic", "relative", 0.6) == (set(), {0}, "infometic")


def test_label_clicks_never_run_the_model_for_suggestions(dataset):
    from capscope.server.suggestions import Suggestions

    store, ann, _, _ = dataset

    class CountingModels:
        calls = 0
        version = None
        token_rule = "relative"

        def current(self):
            return None, self.version

        def score_on(self, scorer, *args, **kwargs):
            CountingModels.calls += 1
            return model_row([None, 0.02, 0.3, None, None, 0.3, 0.3, None], [0.3, 0.01, 0.3])

    item = Annotator(store).next(ann)
    suggestions = Suggestions(store, CountingModels())
    assert suggestions.get(ann, item, compute=False) is None and CountingModels.calls == 0
    assert suggestions.get(ann, item)[:2] == ({1}, {0, 2}) and CountingModels.calls == 1
    assert suggestions.cached(item["item_id"]) is not None
    suggestions.models.version = "v1:0123456789ab"  # an activation: the item is looked at again
    assert suggestions.cached(item["item_id"]) is None
    assert suggestions.get(ann, item)[3] == "v1:0123456789ab" and CountingModels.calls == 2


def test_without_any_model_the_page_says_so_and_scoring_fails_softly():
    def factory(metrics):
        raise RuntimeError("open_clip: no weights here")

    models = Models(factory)
    text = ui_inspect.banner(models)[0]["value"]
    assert "No scoring model" in text
    row = inspect_scoring.score_caption(models, Image.new("RGB", (32, 32)), "a red circle.", "", None)
    assert "no metric can be loaded" in row["error"]
    assert "Cannot score" in inspect_views.summary_markdown(row, "infometic")


def test_scratch_folders_of_earlier_requests_go_once_old(monkeypatch, tmp_path):
    import os
    import time

    monkeypatch.setattr(ui_shared, "_scratch_root", lambda: type("Root", (), {"name": str(tmp_path)})())
    first = ui_shared.scratch_folder("export-")
    (first / "items.jsonl").write_text("{}\n")
    second = ui_shared.scratch_folder("compare-")
    assert first.parent == second.parent == tmp_path and first.exists()  # young: kept
    old = time.time() - ui_shared.SCRATCH_KEEP_S - 1
    os.utime(first, (old, old))
    third = ui_shared.scratch_folder("export-")
    assert not first.exists() and second.exists() and third.exists()


def test_the_admin_tab_shows_the_audit_log_newest_first_and_downloads_it(tmp_path):
    import json as json_module

    from capscope.annotation import audit
    from capscope.db import Store
    from capscope.ui import admin as ui_admin

    store = Store(f"sqlite:///{tmp_path / 'audit.db'}")
    assert ui_admin.audit_rows(store) == [[""] * len(ui_admin.AUDIT_HEADERS)]
    audit.record(store, "sign-in", actor="ann", address="127.0.0.1", details={"by": "web UI"})
    audit.record(store, "export", actor="boss", target="demo", details={"format": "csv"})
    rows = ui_admin.audit_rows(store)
    assert [row[2] for row in rows] == ["export", "sign-in"] and rows[0][1] == "boss" and rows[1][3] == "127.0.0.1"
    assert [row[2] for row in ui_admin.audit_rows(store, "sign-in")] == ["sign-in"]
    assert [row[1] for row in ui_admin.audit_rows(store, "", " boss ")] == ["boss"]
    with open(ui_admin.audit_file(store), encoding="utf-8") as handle:
        assert [json_module.loads(line)["action"] for line in handle] == ["sign-in", "export"]
