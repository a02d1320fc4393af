"""Every limit on user input, once: the scorer, the REST API, the importer,
the UI and the file readers all read them here, so a caption or an image that
one of them accepts is one that the others accept too."""
from __future__ import annotations

import math
import numbers

MAX_CAPTION_CHARS = 5000          # a caption (about 800 words, read in windows), and each of its references
MAX_REFERENCES = 50               # references given with one caption
MAX_IMAGE_PIXELS = 40_000_000     # width x height of one image
MAX_IMAGE_BYTES = 50 * 2**20      # one image file on disk
MAX_REGIONS = 100                 # regions given with one image
MAX_ADDED_REGIONS = 10            # regions one annotator may add to one image (the others keep room for theirs)
MAX_LINE_BYTES = 8 * 2**20        # one line of a JSONL file
MAX_ID_CHARS = 200                # a row's id
MAX_JSON_DEPTH = 64               # nesting of JSON arrays and objects in any file a user gives
MAX_SUMMARY_BYTES = 64 * 2**20    # a summary.json the server reads (GET /api/diagnose)
MAX_NAME_CHARS = 200              # a dataset's name as stored (it is data, not a path)
MAX_FILE_NAME_CHARS = 100         # a file or folder name made from a user's text (`paths.safe_name`)


def finite_number(value) -> bool:
    """A real number, not a bool, neither NaN nor infinite, and one a float
    holds: JSON reads an integer of 400 digits, which float() and
    math.isfinite refuse with OverflowError."""
    if type(value) is float:  # JSON's numbers first, before the slower ABC check
        return math.isfinite(value)
    if not isinstance(value, numbers.Real) or isinstance(value, bool):  # numpy's bool is no numbers.Real
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
