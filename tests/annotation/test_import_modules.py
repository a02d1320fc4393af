"""The importer, a folder split by concern: the public entry keeps every name, and each
concern module does its part on hand-made input."""
import io
import math

import pytest

from capscope.annotation import importer, uncertainty
from capscope.annotation.importer import image_files as import_images
from capscope.annotation.importer import predictions as import_predictions
from capscope.annotation.importer import problems as import_report
from capscope.annotation.importer import row_regions as import_regions
from capscope.annotation.importer import rows as import_rows

PUBLIC = {
    "ImportOptions": importer, "import_captions": importer, "import_captokeneval": importer,
    "ImportReport": import_report, "RejectedRow": import_report, "RowProblem": import_report,
    "import_predictions": import_predictions, "token_uncertainty": uncertainty,
    "read_jsonl": import_rows, "prepare_row": import_rows, "finish_row": import_rows,
    "checked_tokens": import_rows, "TOKEN_LABELS": import_rows, "REGION_LABELS": import_rows,
    "checked_regions": import_regions, "resolve_image_path": import_images, "decode_image": import_images,
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_importer_keeps_each_public_name_defined_once(name):
    assert getattr(importer, name) is getattr(PUBLIC[name], name)


def test_read_jsonl_numbers_lines_and_reports_bad_ones():
    stream = io.BytesIO(b'{"id": "a"}\n\n[1, 2]\n{broken\n\xff\n{"id": "b"}\n')
    got = list(import_rows.read_jsonl(stream))
    assert [line for line, _ in got] == [1, 3, 4, 5, 6]
    assert got[0][1] == {"id": "a"} and got[4][1] == {"id": "b"}
    reasons = [obj.reason for _, obj in got[1:4]]
    assert reasons[0] == "expected a JSON object, got list"
    assert reasons[1].startswith("malformed JSON")
    assert reasons[2] == "not UTF-8 (byte 0)"


def test_checked_regions_clip_round_and_default_source():
    regions = import_regions.checked_regions([{"box": [-5, 2.345, 30, 99]}], width=20, height=50)
    assert regions == [{"box": [0.0, 2.35, 20.0, 50.0], "mask": None, "confidence": None, "source": "file",
                       "added_by": None}]
    with pytest.raises(import_report.RowProblem, match="region 0"):
        import_regions.checked_regions([{"box": [30, 0, 40, 10]}], width=20, height=50)


def test_checked_tokens_must_match_the_caption():
    caption = "a red cube"
    tokens = import_rows.checked_tokens([{"text": "red", "start": 2, "end": 5}], caption)
    assert tokens == [{"text": "red", "start": 2, "end": 5, "semantic": True}]
    with pytest.raises(import_report.RowProblem, match="does not match caption"):
        import_rows.checked_tokens([{"text": "red", "start": 1, "end": 4}], caption)


def test_token_uncertainty_by_hand():
    # exp(-10·|0.1 - 0.1|) = 1 and exp(-10·|0.2 - 0.1|) = e^-1; non-numbers are left out
    assert uncertainty.token_uncertainty([0.1, 0.2, None]) == pytest.approx((1 + math.exp(-1)) / 2)
    assert uncertainty.token_uncertainty([None]) is None
    # CLIP4DM's negative threshold, on its own scale: on it 1, 1e-4 above it exp(-2)
    assert uncertainty.token_uncertainty([-5e-5, 5e-5], -5e-5) == pytest.approx((1 + math.exp(-2)) / 2)
    rule = ("relative", 1.0)  # the token rule, which neither metric follows
    assert uncertainty.prediction_uncertainty("clip4dm", [-5e-5], [5e-5], None, *rule) \
        == pytest.approx((1 + math.exp(-2)) / 2)
    assert uncertainty.prediction_uncertainty("x", [0.1], [], None, *rule) == 1.0  # a metric nobody knows: beta


def test_stored_predictions_are_judged_by_the_rule_their_rows_record():
    """A score row's uncertainty is measured under the rule the row says its metric decided by."""
    from capscope.annotation.importer.predictions import recorded_token_rule

    recorded = {"verdict": {"infometic": {"token_rule": "paper"}}, "token_rule": "relative"}
    assert recorded_token_rule(recorded, "infometic") == "paper"
    assert recorded_token_rule(recorded, "infoclip") == "relative"  # the row's rule
    assert recorded_token_rule({"verdict": "odd", "token_rule": "paper"}, "infometic") == "paper"
    assert recorded_token_rule(None, "infometic") == recorded_token_rule({"token_rule": "bogus"}, "x") == "relative"
