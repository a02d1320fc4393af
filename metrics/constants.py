"""The metrics' shared settings, in a module that imports nothing: the
registry, the metric classes, the scorer and the commands all read them here,
so none of them needs another to know a default."""

BETA = 0.1                 # InfoMetIC sec. 3.3: a word is correct, a region mentioned, above this share
TOKEN_RULES = ("paper", "relative")
# Every command, the app and Scorer judge words by the length-aware rule unless told otherwise: with
# more than ten semantic words even a uniform attention share is under the paper's beta, so the paper's
# rule flags every word of a long caption or a full window (wrong-word F1 0.10-0.28 against 0.85-0.91 on
# long demo captions: docs/records/long-captions.md).
DEFAULT_TOKEN_RULE = "relative"
HICE_THRESHOLD = 0.2       # HICE-S's phrase/region cosine cut (hice.py says why)
CLIP4DM_EPSILON = -5e-5    # CLIP4DM main.py --epsilon: a word whose attribution is below it is misaligned
CLIP4DM_LAYERS = 3         # CLIP4DM main.py --start_layer_text -3: relevance from the last three text blocks

# --long-captions: how a caption longer than a model reads is read (windows.py does the reading)
LONG_CAPTIONS = ("windows", "cut", "all-windows")
# windows: word-level metrics read every window; CLIP-S and PAC-S read what fits (their papers' way).
# cut: every metric reads what fits its model, as the released codes do.
# all-windows: CLIP-S and PAC-S too read every window and give the mean of their scores.
DEFAULT_LONG_CAPTIONS = "windows"

# --runtime: what runs the CLIP text towers (runtime.py): ONNX Runtime on the CPU in fp32, or PyTorch eager
RUNTIMES = ("auto", "eager", "onnx")

# capscope serve --segmenter: what turns an annotator's clicks into a mask (click_segmenters.py)
CLICK_SEGMENTERS = ("auto", "classic", "sam", "sam2", "sam2-tiny", "mobilesam")

# --precision: the CLIP towers in float32, or under bfloat16 / float16 autocast (encoder.AUTOCAST_DTYPES)
PRECISIONS = ("fp32", "bf16", "fp16")


def check_precision(precision: str) -> str:
    """`precision` when it is one of PRECISIONS; ValueError naming them when not."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return precision
