"""Which kind of error a wrong word is: object, attribute, count, action,
relation or other.

With a trained spaCy pipeline (part-of-speech tags and a parse) the word's tag
decides: a number or a counting word is a count; an adjective, or a noun used as
a modifier (`compound`, "a *wooden* table" aside, "a *brick* wall"), an
attribute; a verb an action; a preposition or a spatial adverb a relation; a
noun or proper noun an object; anything else other. Without one
(`spacy.blank`), the documented word lists below decide, and a semantic word in
none of them counts as an object (in captions, most such words are nouns).
The summary says which source decided (`type_source`).
"""
from __future__ import annotations

TYPES = ("object", "attribute", "count", "action", "relation", "other")

COUNT_WORDS = frozenset("""
one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen
eighteen nineteen twenty thirty forty fifty hundred dozen dozens several many few couple pair pairs both
multiple numerous single lone group groups bunch handful no none
""".split())
ATTRIBUTE_WORDS = frozenset("""
red orange yellow green blue purple pink brown black white gray grey silver gold golden beige tan teal cyan
magenta violet maroon navy dark light bright pale colorful colourful striped spotted checkered plaid
big small large little tiny huge giant tall short long wide narrow thick thin fat skinny round square
triangular rectangular circular oval flat curved straight old young new modern ancient vintage wooden
metal metallic plastic glass stone brick leather wet dry dirty clean empty full open closed busy crowded
hot cold warm sunny cloudy snowy rainy foggy shiny smooth rough soft hard fluffy furry hairy bald
happy sad smiling angry sleepy cute pretty beautiful ugly shirtless naked blurry
""".split())
RELATION_WORDS = frozenset("""
on in under over above below beneath behind beside besides near next nearby between among across along
around through into onto inside outside atop top bottom front back left right side middle center centre
against toward towards away from off up down with without by at beyond alongside underneath upon
""".split())
ACTION_WORDS = frozenset("""
sit sits sat stand stands stood walk walks walked run runs ran ride rides rode hold holds held eat eats ate
drink drinks play plays played fly flies flew jump jumps jumped look looks looked watch watches carry
carries carried throw throws threw catch catches caught lie lies lay lay swim swims drive drives drove
wear wears wore talk talks smile smiles cut cuts cook cooks read reads wait waits hang hangs hung lean
leans leaning park parks parked pull pulls push pushes kick kicks hit hits swing swings skate skates
surf surfs ski skis climb climbs pose poses posed graze grazes sleep sleeps slept rest rests
""".split())
TAG_TYPES = {"NOUN": "object", "PROPN": "object", "ADJ": "attribute", "NUM": "count", "VERB": "action",
             "ADP": "relation"}


def type_source(nlp) -> str:
    """What decides a word's type with this pipeline."""
    if nlp.has_pipe("tagger") or nlp.has_pipe("morphologizer"):
        return "part of speech and dependency (spaCy)"
    return "word lists (no trained spaCy pipeline)"


def type_from_words(word: str) -> str:
    """A semantic word's type from the word lists alone."""
    w = word.lower()
    if w in COUNT_WORDS or w.replace(".", "", 1).isdigit():
        return "count"
    if w in ATTRIBUTE_WORDS:
        return "attribute"
    if w in RELATION_WORDS:
        return "relation"
    if w in ACTION_WORDS or (w.endswith("ing") and len(w) > 5):
        return "action"
    return "object"


def type_from_tags(word: str, pos: str, dep: str) -> str:
    """A word's type from its part of speech and dependency label."""
    w = word.lower()
    if pos == "NUM" or w in COUNT_WORDS:
        return "count"
    if pos in ("NOUN", "PROPN") and dep in ("amod", "compound") and w in ATTRIBUTE_WORDS:
        return "attribute"
    if pos == "ADV" and w in RELATION_WORDS:
        return "relation"
    if pos == "AUX":
        return "other"
    return TAG_TYPES.get(pos, "other")


def caption_types(caption: str, tokens: list[dict], nlp) -> list[str | None]:
    """One type per row token (None for a token no tag or word decides: not semantic)."""
    if not (nlp.has_pipe("tagger") or nlp.has_pipe("morphologizer")):
        return [type_from_words(t["text"]) if t.get("semantic") else None for t in tokens]
    by_start = {tok.idx: tok for tok in nlp(caption)}
    out = []
    for token in tokens:
        tok = by_start.get(token["start"])
        if not token.get("semantic"):
            out.append(None)
        elif tok is None:
            out.append(type_from_words(token["text"]))
        else:
            out.append(type_from_tags(token["text"], tok.pos_, tok.dep_))
    return out
