"""Every limit on user input, once: the scorer, the REST API, the importer,
the UI and the file readers all read them here, so a caption or an image that
one of them accepts is one that the others accept too."""
from __future__ import annotations

MAX_CAPTION_CHARS = 5000          # a caption (about 800 words, read in windows), and each of its references
MAX_REFERENCES = 50               # references given with one caption
MAX_IMAGE_PIXELS = 40_000_000     # width x height of one image
MAX_IMAGE_BYTES = 50 * 2**20      # one image file on disk
MAX_REGIONS = 100                 # regions given with one image
MAX_LINE_BYTES = 8 * 2**20        # one line of a JSONL file
MAX_ID_CHARS = 200                # a row's id
