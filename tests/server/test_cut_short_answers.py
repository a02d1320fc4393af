"""A transfer cut short (issue 71: uploading an 18 MB JPEG in Inspect left an
uvicorn traceback, h11's "Too little data for declared Content-Length", in the
server log) is one WARNING line; any other error keeps its traceback."""
import logging
import sys

import h11

from capscope.server.answer_logging import quiet_cut_short_answers


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def logged(err: BaseException) -> logging.LogRecord:
    logger, kept = logging.getLogger("uvicorn.error"), Kept()
    logger.addHandler(kept)
    try:
        try:
            raise err
        except BaseException:
            logger.error("Exception in ASGI application\n", exc_info=sys.exc_info())
    finally:
        logger.removeHandler(kept)
    assert len(kept.records) == 1
    return kept.records[0]


def test_a_body_shorter_than_its_content_length_is_one_warning_line():
    quiet_cut_short_answers()
    quiet_cut_short_answers()  # once per process, however many apps are made
    assert sum(type(f).__name__ == "CutShortAnswers" for f in logging.getLogger("uvicorn.error").filters) == 1
    record = logged(h11.LocalProtocolError("Too little data for declared Content-Length"))
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "\n" not in record.getMessage() and "cut short" in record.getMessage()


def test_other_errors_keep_their_traceback():
    quiet_cut_short_answers()
    record = logged(ValueError("something else went wrong"))
    assert record.levelno == logging.ERROR and record.exc_info is not None
