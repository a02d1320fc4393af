"""The n-gram scores every captioning paper reports (BLEU-4, METEOR, ROUGE-L,
CIDEr, SPICE), through pycocoevalcap, the COCO caption evaluation code: its
PTB tokenizer, METEOR and SPICE run in Java, and SPICE fetches Stanford CoreNLP
on its first run. A scorer that cannot run is named with its reason, never
left out silently."""
from __future__ import annotations

import contextlib
import io
import logging

log = logging.getLogger(__name__)

SCORERS = ("BLEU-4", "METEOR", "ROUGE-L", "CIDEr", "SPICE")


def _scorers() -> dict:
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.spice.spice import Spice

    return {"BLEU-4": lambda: Bleu(4), "METEOR": Meteor, "ROUGE-L": Rouge, "CIDEr": Cider, "SPICE": Spice}


def ngram_scores(captions: dict[str, str], references: dict[str, list[str]]) -> dict:
    """{"scores": {name: float}, "unavailable": {name: why}, "n_captions": int}
    over the captions that have references."""
    ids = [i for i in captions if references.get(i)]
    out = {"scores": {}, "unavailable": {}, "n_captions": len(ids)}
    if not ids:
        out["unavailable"] = {name: "no caption has references" for name in SCORERS}
        return out
    try:
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

        scorers = _scorers()
        with _quiet():
            tokenizer = PTBTokenizer()
            gts = tokenizer.tokenize({i: [{"caption": r} for r in references[i]] for i in ids})
            res = tokenizer.tokenize({i: [{"caption": captions[i]}] for i in ids})
    except ImportError:
        out["unavailable"] = {name: 'pycocoevalcap is not installed (pip install "capscope[captioning]")'
                              for name in SCORERS}
        return out
    except (OSError, RuntimeError, ValueError) as err:  # no Java: the tokenizer is a Java program
        out["unavailable"] = {name: f"the PTB tokenizer (Java) could not run: {_why(err)}" for name in SCORERS}
        return out
    for name, make in scorers.items():
        try:
            with _quiet():
                value, _ = make().compute_score(gts, res)
            out["scores"][name] = float(value[-1] if isinstance(value, list) else value)
        except Exception as err:  # a Java scorer fails in many ways (no Java, no network for SPICE's models)
            out["unavailable"][name] = _why(err)
            log.warning("%s could not run: %s", name, out["unavailable"][name])
    return out


def _why(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}".rstrip(": ")


@contextlib.contextmanager
def _quiet():
    """pycocoevalcap prints progress to stdout; a --json caller's stdout stays clean."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield
