"""The n-gram scores every captioning paper reports (BLEU-4, METEOR, ROUGE-L,
CIDEr, SPICE), through pycocoevalcap, the COCO caption evaluation code: its
PTB tokenizer, METEOR and SPICE run in Java, and SPICE fetches Stanford CoreNLP
on its first run. A scorer that cannot run is named with its reason, never
left out silently."""
from __future__ import annotations

import contextlib
import io
import logging

from capscope.common.errors import with_type

from .diagnosis import NgramScores

log = logging.getLogger(__name__)

SCORERS = ("BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE")


def _scorers() -> dict:
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.spice.spice import Spice

    return {"BLEU-4": lambda: Bleu(4), "METEOR": Meteor, "ROUGE-L": Rouge, "CIDEr": Cider, "SPICE": Spice}


def ngram_scores(models: dict[str, tuple[dict[str, str], dict[str, list[str]]]]) -> dict[str, NgramScores]:
    """Per model, from (captions by id, references by id): its scores by
    name and, by name, why a scorer could not run, over the captions that
    have references. Each scorer starts once for every model (METEOR's Java
    start takes seconds)."""
    out, tokenized = {}, {}
    for name, (captions, references) in models.items():
        ids = [i for i in captions if references.get(i)]
        out[name] = NgramScores(scores={}, unavailable={}, n_captions=len(ids))
        if ids:
            tokenized[name] = (ids, captions, references)
        else:
            out[name].unavailable.update((scorer, "no caption has references") for scorer in SCORERS)
    if not tokenized:
        return out
    try:
        tokenized = _tokenized(tokenized)
        scorers = _scorers()
    except ImportError:
        return _none_ran(out, tokenized, 'pycocoevalcap is not installed (pip install "capscope[captioning]")')
    except (OSError, RuntimeError, ValueError) as err:  # no Java: the tokenizer is a Java program
        return _none_ran(out, tokenized, f"the PTB tokenizer (Java) could not run: {_why(err)}")
    for scorer_name, make in scorers.items():
        try:
            with _quiet():
                scorer = make()
        except Exception as err:  # a Java scorer fails in many ways (no Java, no network for SPICE's models)
            scorer, failed = None, _why(err)
        for name, (gts, res) in tokenized.items():
            try:
                if scorer is None:
                    raise RuntimeError(failed)
                with _quiet():
                    value, _ = scorer.compute_score(gts, res)
                out[name].scores[scorer_name] = float(value[-1] if isinstance(value, list) else value)
            except Exception as err:
                out[name].unavailable[scorer_name] = _why(err) if scorer is not None else failed
                log.warning("%s could not run for %s: %s", scorer_name, name, out[name].unavailable[scorer_name])
    return out


def _tokenized(models: dict) -> dict:
    """name -> (references, captions), as PTBTokenizer gives them."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tokenizer = PTBTokenizer()
    out = {}
    with _quiet():
        for name, (ids, captions, references) in models.items():
            out[name] = (tokenizer.tokenize({i: [{"caption": r} for r in references[i]] for i in ids}),
                         tokenizer.tokenize({i: [{"caption": captions[i]}] for i in ids}))
    return out


def _none_ran(out: dict[str, NgramScores], models: dict, why: str) -> dict[str, NgramScores]:
    for name in models:
        out[name].unavailable.update((scorer, why) for scorer in SCORERS)
    return out


def _why(err: Exception) -> str:
    return with_type(err, 160)


@contextlib.contextmanager
def _quiet():
    """pycocoevalcap prints progress to stdout; a --json caller's stdout stays clean."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield
