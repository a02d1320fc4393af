"""The region rule study on a few demo scenes: the relative rule holds at many
regions where the paper's fixed beta calls nearly every region left out."""
from capscope.studies.region_rule import run, scene_with_regions, table


def test_scenes_get_the_regions_asked_for_with_gold():
    item = scene_with_regions(9, 0, 25)
    assert len(item["regions"]) == len(item["gold"]) == 25 and 0 < sum(item["gold"]) < 25


def test_the_relative_rule_holds_at_many_regions_and_the_paper_rule_does_not():
    result = run(12, seed=9, counts=(4, 25))
    few, many = result["counts"]["4"], result["counts"]["25"]
    assert result["demo"] is True
    assert few["f1_relative"] == few["f1_paper"] > few["f1_trivial"]  # the same cut at four regions
    assert many["f1_relative"] > many["f1_paper"] + 0.3 and many["f1_relative"] > many["f1_trivial"]
    assert many["auroc"] > 0.9
    assert "| 25 |" in table(result)
