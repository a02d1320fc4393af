"""Phrases for HICE-S (sec. 3.2.2): short "subject predicate object" texts, each
knowing the indices of the caption tokens it is made of.

With a trained spaCy pipeline (a dependency parser), triplets come from the
parse: subject-verb-object, noun-preposition-object and a noun with its
modifiers (the attribute triplets of a scene graph, written "red circle").
Without one (`spacy.blank('en')`, the offline default), a rule-based chunker
works on the tokens alone:
- an entity is a run of semantic tokens ("small red circle", "dog running");
- two neighbouring entities joined by anything other than a coordinator or a
  sentence break ("on the", "next to a", a bare article after a verb) form a
  relation triplet "dog on grass"; articles and other determiners are dropped;
- an entity in no relation is a phrase on its own.
"""
from __future__ import annotations

from .text import Phrase, Token, load_spacy

COORDINATORS = {"and", "or", "but", "while", "whereas", "nor", "&", ",", ";", ":", ".", "!", "?"}
SENTENCE_BREAKS = {".", "!", "?", ";"}
DETERMINERS = {
    "a", "an", "the", "this", "that", "these", "those", "some", "its", "his", "her", "their", "our",
    "my", "your", "another", "each", "every", "any",
}


def phrases(caption: str, tokens: list[Token], nlp=None) -> list[Phrase]:
    """The caption's phrases: from the dependency parse when the pipeline has a
    parser, else from the rule-based chunker. Never empty for a caption with a
    token: the whole caption is the fallback phrase."""
    nlp = nlp or load_spacy()
    found = dependency_phrases(nlp(caption), tokens) if nlp.has_pipe("parser") else chunk_phrases(tokens)
    if not found and tokens:
        found = [Phrase(caption.strip(), tuple(range(len(tokens))))]
    return found


# ---------------------------------------------------------------- rule-based

def entity_runs(tokens: list[Token]) -> list[list[int]]:
    """Maximal runs of neighbouring semantic tokens."""
    runs: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token.semantic and runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        elif token.semantic:
            runs.append([i])
    return runs


def chunk_phrases(tokens: list[Token]) -> list[Phrase]:
    runs = entity_runs(tokens)
    related: set[int] = set()
    found: list[Phrase] = []
    for k in range(len(runs) - 1):
        left, right = runs[k], runs[k + 1]
        gap = list(range(left[-1] + 1, right[0]))
        words = {tokens[i].text.lower() for i in gap}
        if words & COORDINATORS or words & SENTENCE_BREAKS:
            continue
        link = [i for i in gap if tokens[i].text.lower() not in DETERMINERS]
        found.append(_phrase(tokens, left + link + right))
        related.update((k, k + 1))
    for k, run in enumerate(runs):
        if k not in related:
            found.append(_phrase(tokens, run))
    found.sort(key=lambda p: p.tokens[0])
    return found


def _phrase(tokens: list[Token], indices: list[int]) -> Phrase:
    indices = sorted(set(indices))
    return Phrase(" ".join(tokens[i].text for i in indices), tuple(indices))


# ---------------------------------------------------------------- dependency parse

NOUNS = {"NOUN", "PROPN", "PRON"}
MODIFIER_DEPS = {"amod", "compound", "nummod", "nmod", "poss"}


def dependency_phrases(doc, tokens: list[Token]) -> list[Phrase]:
    """Triplets from a parsed spaCy Doc, mapped onto `tokens` by character offsets."""
    index = _token_index(doc, tokens)
    triplets: list[list] = []
    in_relation: set[int] = set()
    for tok in doc:
        if tok.pos_ == "VERB" or tok.pos_ == "AUX":
            subjects = [c for c in tok.children if c.dep_ in ("nsubj", "nsubjpass")]
            objects = [c for c in tok.children if c.dep_ in ("dobj", "obj", "attr", "acomp")]
            objects += [p for c in tok.children if c.dep_ == "prep" for p in c.children if p.dep_ == "pobj"]
            for s in subjects:
                for o in objects:
                    triplets.append(_entity(s) + [tok] + _preps_between(tok, o) + _entity(o))
                    in_relation.update((s.i, o.i))
        if tok.pos_ in NOUNS and tok.dep_ != "pobj":
            for prep in (c for c in tok.children if c.dep_ == "prep"):
                for obj in (p for p in prep.children if p.dep_ == "pobj"):
                    triplets.append(_entity(tok) + [prep] + _entity(obj))
                    in_relation.update((tok.i, obj.i))
        if tok.dep_ == "acl" and tok.head.pos_ in NOUNS:  # "a man riding a horse"
            for obj in (c for c in tok.children if c.dep_ in ("dobj", "obj")):
                triplets.append(_entity(tok.head) + [tok] + _entity(obj))
                in_relation.update((tok.head.i, obj.i))
    for tok in doc:
        if tok.pos_ in ("NOUN", "PROPN") and tok.i not in in_relation:
            triplets.append(_entity(tok))
    found = []
    for parts in triplets:
        indices = sorted({index[t.i] for t in parts if index.get(t.i) is not None})
        if indices:
            found.append(_phrase(tokens, indices))
    unique = {p.tokens: p for p in found}
    return sorted(unique.values(), key=lambda p: p.tokens[0])


def _entity(tok) -> list:
    """A noun with its adjective, compound and number modifiers (no determiners)."""
    mods = [c for c in tok.children if c.dep_ in MODIFIER_DEPS]
    return sorted(mods + [tok], key=lambda t: t.i)


def _preps_between(verb, obj) -> list:
    return [obj.head] if obj.head is not verb and obj.head.dep_ == "prep" else []


def _token_index(doc, tokens: list[Token]) -> dict[int, int | None]:
    by_start = {t.start: i for i, t in enumerate(tokens)}
    return {tok.i: by_start.get(tok.idx) for tok in doc}
