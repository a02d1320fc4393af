"""Loaders for the public human-judgement benchmarks that `capscope correlate`
compares metrics with. Each turns one public layout (docs/human-judgements.md) into
plain rows, built the way the reference code of the papers builds them:

- rating benchmarks (Flickr8k-Expert, Flickr8k-CF, Composite, THumB 1.0): one
  `Rated` row per human judgement;
- pairwise benchmarks (PASCAL-50S, FOIL, nocaps-FOIL): one `Pair` per caption pair;
- token benchmarks (HAT, CapTokenEval files): CapTokenEval items (dicts).

A row that cannot be used (image or caption missing, bad rating) is skipped and
named in `Loaded.problems`; loading goes on. A file that is not the layout at
all raises ValueError with one line.
"""
from __future__ import annotations

from pathlib import Path

from capscope.bench.human_pairs import load_foil, load_nocaps_foil, load_pascal
from capscope.bench.human_ratings import flickr_loader, load_composite, load_thumb
from capscope.bench.human_rows import Loaded
from capscope.bench.human_tokens import load_captokeneval, load_hat

BENCHMARKS = ("flickr8k-expert", "flickr8k-cf", "composite", "pascal-50s", "foil", "nocaps-foil", "thumb", "hat",
              "captokeneval")


def load(benchmark: str, data: Path, *, seed: int = 0) -> Loaded:
    """Rows of `benchmark` read from `data` (its folder, or its main file)."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}: choose one of {', '.join(BENCHMARKS)}")
    data = Path(data).expanduser()
    if not data.exists():
        raise ValueError(f"{benchmark}: {data} does not exist. {missing_data_hint(benchmark)}")
    return _LOADERS[benchmark](data.resolve(), seed)


def missing_data_hint(benchmark: str) -> str:
    """One line: what to download and where to put it."""
    if benchmark not in _HINTS:
        raise ValueError(f"unknown benchmark {benchmark!r}: choose one of {', '.join(BENCHMARKS)}")
    return _HINTS[benchmark]


_PACS_FLICKR = ("the Flickr8k folder linked from github.com/aimagelab/pacscore "
                "(https://drive.google.com/drive/folders/1oQY8zVCmf0ZGUfsJQ_OnqP2_kw1jGIXp), or build it with "
                "flickr8k_example/download.py of github.com/jmhessel/clipscore")
_HINTS = {
    "flickr8k-expert": f"Flickr8k-Expert: get flickr8k.json and the images from {_PACS_FLICKR}; "
                       "put flickr8k.json beside an images/ folder and pass --data FOLDER",
    "flickr8k-cf": f"Flickr8k-CF: get crowdflower_flickr8k.json and the images from {_PACS_FLICKR}; "
                   "put crowdflower_flickr8k.json beside an images/ folder and pass --data FOLDER",
    "composite": "Composite: get it from https://imagesdg.wordpress.com/image-to-scene-description-graph/ "
                 "(or the Hugging Face copy yuwd/Composite), as a CSV with columns mt, refs, score, imgid "
                 "or a composite.json in the Flickr8k layout, beside an images/ folder; pass --data FOLDER",
    "pascal-50s": "PASCAL-50S: get pyCIDErConsensus.zip (pair_pascal.mat, consensus_pascal.mat) from "
                  "https://vrama91.github.io/cider/ and the VOC2010 JPEGImages; put the two .mat files "
                  "beside an images/ folder and pass --data FOLDER",
    "foil": "FOIL: get foilv1.0_test_2017.json from https://foilunitn.github.io/, the COCO val2014 images "
            "(and captions_val2014.json for references) from https://cocodataset.org; put them in one "
            "folder with the images in images/ and pass --data FOLDER",
    "nocaps-foil": "nocaps-FOIL: get data/nocaps-val-foil.json from https://github.com/DavidMChan/aloha and the "
                   "nocaps validation images it names (their URLs are in "
                   "https://nocaps.s3.amazonaws.com/nocaps_val_4500_captions.json); put the images in images/ "
                   "beside the file and pass --data FOLDER",
    "thumb": "THumB 1.0: get mscoco/mscoco_THumB-1.0.jsonl and mscoco/mscoco_references.json from "
             "https://github.com/jungokasai/THumB and the Karpathy test images it links; put the images "
             "in images/ beside the two files and pass --data FOLDER",
    "hat": "HAT: get data/hat-trainval.json from https://github.com/DavidMChan/aloha and the COCO val2014 "
           "images from https://cocodataset.org; put the images in images/ beside the file and pass --data FOLDER",
    "captokeneval": "CapTokenEval: pass --data FILE.jsonl written by `capscope export --format captokeneval` "
                    "or `capscope demo-data`; images resolve relative to the file's folder",
}


_LOADERS = {
    "flickr8k-expert": flickr_loader("flickr8k-expert", "flickr8k.json", "c"),
    "flickr8k-cf": flickr_loader("flickr8k-cf", "crowdflower_flickr8k.json", "b"),
    "composite": load_composite,
    "pascal-50s": load_pascal,
    "foil": load_foil,
    "nocaps-foil": load_nocaps_foil,
    "thumb": load_thumb,
    "hat": load_hat,
    "captokeneval": load_captokeneval,
}
