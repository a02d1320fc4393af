"""Human-style judgements of demo-world captions, in the Flickr8k-Expert layout
that clipscore and PAC-S read (`flickr8k.json`, docs/human-judgements.md, "Demo world").

Per scene: graded captions with 0 to 3 wrong words (colour, shape or size
swapped so that the phrase fits no shape, as `demo_captions.pollute` does), each
rated by three simulated raters on Flickr8k-Expert's 1-4 scale. A rater sees a
latent quality (4 less one per wrong word, less a little for shapes left
unmentioned), adds their own harshness and some noise and rounds: ratings tie
as real ones do, and a few are missing (NaN). As in Flickr8k-Expert, every
rater's rating is its own judgement (three per caption), and references
(`ground_truth`) are true captions of the scene, never a candidate itself.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from capscope.demo.dataset import demo_scene
from capscope.demo.demo_captions import Caption, fix_articles, make_caption, pollution_options
from capscope.demo.scenes import Scene

JUDGEMENTS_FILE = "judgements/flickr8k.json"
MAX_WRONG = 3
N_REFERENCES = 5
# rater -> (harshness added to the latent quality, noise sigma)
RATERS = ((0.0, 0.45), (-0.35, 0.45), (-0.7, 0.6))
UNMENTIONED_PENALTY = 0.6   # at most, when only one of several shapes is named
MISSING_SHARE = 0.02
BINDING_SHARE = 0.5         # as demo_captions.pollute: the new word taken from another shape when one fits
_STREAM = 14                # keeps these draws apart from the scene's own generator


@dataclass(frozen=True)
class Graded:
    caption: Caption
    wrong: tuple[int, ...]   # indices into caption.words of the swapped words


def judgement_rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, index, _STREAM]))


def swap_wrong(graded: Graded, scene: Scene, rng: np.random.Generator) -> Graded | None:
    """One more size, colour or shape word swapped so that its phrase fits no
    shape of the scene; None when no word is left to swap."""
    options, binding = (
        [(w, v) for w, v in pool if w not in graded.wrong] for pool in pollution_options(graded.caption, scene)
    )
    if not options:
        return None
    pool = binding if binding and rng.random() < BINDING_SHARE else options
    w, value = pool[int(rng.integers(len(pool)))]
    word = graded.caption.words[w]
    words = list(graded.caption.words)
    words[w] = replace(word, text=value)
    phrases = list(graded.caption.phrases)
    phrases[word.phrase] = replace(phrases[word.phrase], **{word.role: value})
    caption = replace(graded.caption, words=fix_articles(words), phrases=tuple(phrases), wrong_word=w)
    return Graded(caption, (*graded.wrong, w))


def graded_caption(scene: Scene, n_wrong: int, rng: np.random.Generator, exclude=(), attempts: int = 30) -> Graded | None:
    """A true caption of the scene with `n_wrong` words made wrong, its text not
    in `exclude` (None when the scene's captions have too few words that can be)."""
    for _ in range(attempts):
        graded = Graded(make_caption(scene, rng), ())
        while graded is not None and len(graded.wrong) < n_wrong:
            graded = swap_wrong(graded, scene, rng)
        if graded is not None and graded.caption.text not in exclude:
            return graded
    return None


def latent_quality(graded: Graded, scene: Scene) -> float:
    """4 for a true caption naming every shape; one less per wrong word."""
    unmentioned = 1 - len(set(graded.caption.referents)) / len(scene.shapes)
    return 4.0 - len(graded.wrong) - UNMENTIONED_PENALTY * unmentioned


def rate(quality: float, rng: np.random.Generator) -> list[float]:
    """One rating per rater on the 1-4 scale; NaN where a rater gave none."""
    ratings = []
    for harshness, sigma in RATERS:
        value = float(np.clip(np.rint(quality + harshness + rng.normal(0.0, sigma)), 1, 4))
        ratings.append(math.nan if rng.random() < MISSING_SHARE else value)
    return ratings


def references(scene: Scene, rng: np.random.Generator, attempts: int = 40) -> list[str]:
    refs: list[str] = []
    for _ in range(attempts):
        text = make_caption(scene, rng).text
        if text not in refs:
            refs.append(text)
        if len(refs) == N_REFERENCES:
            break
    return refs


def scene_judgements(seed: int, index: int) -> dict:
    """The Flickr8k entry of scene `index` of the demo data set made with `seed`."""
    scene, _, _, _ = demo_scene(seed, index)
    rng = judgement_rng(seed, index)
    key = f"scene{index:05d}"
    image_path = f"images/{key}.png"
    refs = references(scene, rng)
    entry = {"image_id": key, "image_path": image_path, "ground_truth": refs, "human_judgement": []}
    for n_wrong in range(MAX_WRONG + 1):
        # as in clipscore's Flickr8k files, no candidate is one of its own references
        graded = graded_caption(scene, n_wrong, rng, exclude=refs)
        if graded is None:
            continue
        for rater, rating in enumerate(rate(latent_quality(graded, scene), rng)):
            entry["human_judgement"].append({
                "image_id": key, "image_path": image_path, "caption": graded.caption.text,
                "rating": rating, "rater": rater, "wrong_words": n_wrong,
            })
    return entry


def write_judgements(out: Path, n: int, seed: int, progress: bool = True) -> dict:
    """OUT/judgements/flickr8k.json over the first `n` scenes, with the scenes'
    images beside it in OUT/judgements/images/ (linked to OUT/images/ when there,
    else rendered), so that the folder is a data set of its own."""
    from tqdm import tqdm

    folder = Path(out) / Path(JUDGEMENTS_FILE).parent
    (folder / "images").mkdir(parents=True, exist_ok=True)
    data, counts = {}, {"images": 0, "captions": 0, "judgements": 0, "missing": 0}
    for index in tqdm(range(n), desc="demo judgements", disable=not progress, unit="scene"):
        entry = scene_judgements(seed, index)
        _place_image(Path(out), folder, entry["image_path"], seed, index)
        data[entry["image_id"]] = entry
        ratings = [j["rating"] for j in entry["human_judgement"]]
        counts["images"] += 1
        counts["captions"] += len(ratings) // len(RATERS)
        counts["judgements"] += len(ratings)
        counts["missing"] += sum(math.isnan(r) for r in ratings)
    # json writes NaN for a missing rating, as the released Flickr8k files hold it
    (folder / Path(JUDGEMENTS_FILE).name).write_text(json.dumps(data, indent=1) + "\n")
    return counts


def _place_image(out: Path, folder: Path, image_path: str, seed: int, index: int) -> None:
    target = folder / "images" / Path(image_path).name
    if target.exists():
        return
    source = out / image_path
    if not source.is_file():
        demo_scene(seed, index)[0].image().save(target)
        return
    try:
        os.link(source, target)
    except OSError:  # another file system, or no hard links
        shutil.copyfile(source, target)
