"""Caption side of the pipeline: spaCy tokens with character offsets and a
semantic flag, and CLIP BPE pieces, each mapped back to the token it belongs to.

Piece ids follow the released InfoMetIC code exactly: `[<sot>] + bpe(caption) +
[<eot>]`, cut to `max_len` (32) with the last id forced to `<eot>`, so at most
`max_len - 2` pieces are seen by the model.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass, asdict
from functools import lru_cache

from capscope.common.jsonl import shown
from capscope.common.limits import MAX_CAPTION_CHARS, MAX_REFERENCES

log = logging.getLogger(__name__)

SOT_ID = 49406
EOT_ID = 49407
SEMANTIC_POS = {"NOUN", "PROPN", "VERB", "ADJ", "ADV", "NUM"}


@dataclass(frozen=True)
class Token:
    text: str
    start: int
    end: int
    semantic: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Piece:
    id: int
    text: str
    token: int | None  # index into the caption's tokens


@dataclass(frozen=True)
class Phrase:
    text: str
    tokens: tuple[int, ...]


# ---------------------------------------------------------------- spaCy

@lru_cache(maxsize=4)
def load_spacy(name: str = "en_core_web_sm"):
    """A trained pipeline when installed, else `spacy.blank('en')` (no POS tags:
    semantic = not a stop word, not punctuation; numbers count as semantic)."""
    import spacy

    try:
        return spacy.load(name, disable=["ner", "lemmatizer"])
    except OSError:
        log.warning(
            "spaCy pipeline %r is not installed (python -m spacy download %s); "
            "FALLBACK: blank English tokenizer, semantic words = non-stop, non-punctuation words",
            name, name,
        )
        return spacy.blank("en")


def _is_semantic(tok, has_tags: bool) -> bool:
    if has_tags and tok.pos_:
        return tok.pos_ in SEMANTIC_POS
    if tok.like_num:
        return True
    return not (tok.is_stop or tok.is_punct or tok.is_space or not tok.text.strip())


@lru_cache(maxsize=8)
def _tags_words(nlp) -> bool:
    """Whether `nlp` tags parts of speech. Asked once per pipeline: the two
    `has_pipe` calls took a quarter of a caption's tokenizing (capscope never
    adds a pipe to a pipeline it has loaded)."""
    return nlp.has_pipe("tagger") or nlp.has_pipe("morphologizer")


def tokenize(caption: str, nlp=None) -> list[Token]:
    nlp = nlp or load_spacy()
    doc = nlp(caption)
    has_tags = _tags_words(nlp)
    return [
        Token(t.text, t.idx, t.idx + len(t.text), _is_semantic(t, has_tags))
        for t in doc
        if not t.is_space
    ]


def check_caption(caption) -> str:
    """The reason a caption cannot be scored, or '' when it can."""
    if not isinstance(caption, str) or not caption.strip():
        return "empty caption"
    if len(caption) > MAX_CAPTION_CHARS:
        return f"caption has {len(caption)} characters (limit {MAX_CAPTION_CHARS})"
    return ""


def checked_tokens(given, caption: str) -> list[Token]:
    """A row's own tokens, each `{"text", "start", "end", "semantic"?}` and
    matching `caption[start:end]`; ValueError says what is wrong (one row's error)."""
    if not isinstance(given, list):
        raise ValueError("'tokens' must be a list")
    tokens = []
    for i, token in enumerate(given):
        if not isinstance(token, dict):
            raise ValueError(f"token {i} must be an object")
        start, end, text = token.get("start"), token.get("end"), token.get("text")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) or not isinstance(text, str):
            raise ValueError(f"token {i} needs integer 'start', 'end' and a string 'text'")
        if not 0 <= start < end <= len(caption) or caption[start:end] != text:
            raise ValueError(f"token {i} {shown(text)} does not match caption[{start}:{end}]")
        semantic = token.get("semantic", True)
        if not isinstance(semantic, bool):
            raise ValueError(f"token {i}: 'semantic' must be true or false")
        tokens.append(Token(text, start, end, semantic))
    return tokens


def check_references(references) -> str:
    """The reason a caption's references cannot be used, or '' when they can (None: no references)."""
    if references is None:
        return ""
    if not isinstance(references, list) or not all(isinstance(r, str) and r.strip() for r in references):
        return "references must be a list of non-empty strings"
    if len(references) > MAX_REFERENCES or any(len(r) > MAX_CAPTION_CHARS for r in references):
        return f"at most {MAX_REFERENCES} references of at most {MAX_CAPTION_CHARS} characters"
    return ""


# ---------------------------------------------------------------- BPE pieces

def _clean_lower(text: str) -> str:
    """OpenAI's SimpleTokenizer cleaning (ftfy, html unescape, whitespace), lower-cased."""
    import ftfy

    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return " ".join(text.split()).lower()


def _piece_text(tokenizer, piece_id: int) -> str:
    word = tokenizer.decoder[piece_id]
    text = bytearray(tokenizer.byte_decoder[c] for c in word).decode("utf-8", errors="replace")
    return text.replace("</w>", "")


def bpe_pieces(caption: str, tokens: list[Token], tokenizer) -> list[Piece]:
    """Every BPE piece of the caption, in order, with the index of its token.

    The regex of OpenAI's tokenizer is run on the caption itself so each piece
    keeps a character span; the ids are then checked against the tokenizer's
    own `encode` and, should cleaning have changed the text, those ids win and
    the pieces lose their token link (logged)."""
    ids_ref = tokenizer.encode(caption)
    lowered = caption.lower()
    pieces: list[Piece] = []
    if len(lowered) == len(caption):
        for match in tokenizer.pat.finditer(lowered):
            word = "".join(tokenizer.byte_encoder[b] for b in match.group(0).encode("utf-8"))
            start, end = match.span()
            token = _token_at(tokens, start, end)
            for bpe_token in tokenizer.bpe(word).split(" "):
                pid = tokenizer.encoder[bpe_token]
                pieces.append(Piece(pid, _piece_text(tokenizer, pid), token))
    if [p.id for p in pieces] != ids_ref:
        log.info("BPE pieces of %r could not be aligned to tokens; reported unlinked", caption[:60])
        pieces = [Piece(pid, _piece_text(tokenizer, pid), None) for pid in ids_ref]
    return pieces


def _token_at(tokens: list[Token], start: int, end: int) -> int | None:
    best, best_overlap = None, 0
    for i, tok in enumerate(tokens):
        overlap = min(end, tok.end) - max(start, tok.start)
        if overlap > best_overlap:
            best, best_overlap = i, overlap
    return best


def model_ids(pieces: list[Piece], max_len: int = 32) -> tuple[list[int], list[int], int]:
    """(ids padded to max_len, text mask, number of pieces kept) as the released code builds them."""
    ids = [SOT_ID] + [p.id for p in pieces] + [EOT_ID]
    if len(ids) > max_len:
        ids = ids[:max_len]
        ids[-1] = EOT_ID
    kept = len(ids) - 2
    mask = [0] + [1] * kept + [0] * (max_len - kept - 1)
    ids = ids + [0] * (max_len - len(ids))
    return ids, mask, kept
