"""`capscope bench`'s click figures: the NoC protocol with clicks and with a box, in process, on
the demo world's shapes (the fallback), and the first click on a new image with and without its
embedding made ahead."""
import numpy as np

from capscope.bench.speed.click_timings import click_latency, noc, prompt_quality
from capscope.metrics.click_segmenters import ClassicClickSegmenter


def test_a_box_around_a_demo_shape_finds_it_in_one_prompt_with_the_fallback():
    figures = prompt_quality(scenes=3, seed=11)
    assert figures["fallback"] and figures["shapes"] >= 4
    assert figures["box_alone_reaches_85"] >= 0.9 and figures["box_noc85"] <= 1.5
    assert 1 <= figures["clicks_noc85"] <= figures["clicks_noc90"] <= 3


class Blind(ClassicClickSegmenter):
    def predict(self, embedding, points, box=None):
        return np.zeros((embedding.height, embedding.width), dtype=bool), None


def test_noc_counts_the_box_as_a_prompt_and_caps_a_segmenter_that_never_finds_it():
    from PIL import Image

    target = np.zeros((40, 50), dtype=bool)
    target[10:30, 12:40] = True
    picture = Image.fromarray(np.where(target[..., None], 30, 220).astype(np.uint8).repeat(3, axis=2))
    blind = Blind()
    assert noc(blind, target, blind.embed(picture), box=True, goal=0.85, max_clicks=4) == 5
    classic = ClassicClickSegmenter()
    assert noc(classic, target, classic.embed(picture), box=True, goal=0.85) == 1
    assert noc(classic, target, classic.embed(picture), box=False, goal=0.85) == 1


def test_the_first_click_is_timed_with_and_without_the_embedding_made_ahead():
    row = click_latency(("classic",), clicks=3, naive_clicks=2)["classic"]
    first = row["first_click_ms"]
    assert first["embedded_ahead_p50"] > 0 and first["without_p50"] > 0 and row["weights"] == "none"
