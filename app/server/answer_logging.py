"""uvicorn's log as the server keeps it."""
from __future__ import annotations

import logging


class CutShortAnswers(logging.Filter):
    """uvicorn's "Exception in ASGI application" for an answer whose body came out
    shorter than the Content-Length it announced (h11's LocalProtocolError: seen
    while a browser fetched a freshly uploaded 19.6 MB photo from Gradio's file
    route) becomes one WARNING line without a traceback: the server is fine, the
    browser asks again, and a traceback per such transfer buried the errors that
    matter. Every other record passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if err is not None and type(err).__name__ == "LocalProtocolError" and "Content-Length" in str(err):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = "an answer was cut short while it was sent (%s); the client may ask again", \
                (str(err),)
            record.exc_info = record.exc_text = None
        return True


def quiet_cut_short_answers(logger_name: str = "uvicorn.error") -> None:
    """Put `CutShortAnswers` on uvicorn's error logger (once per process)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, CutShortAnswers) for f in logger.filters):
        logger.addFilter(CutShortAnswers())
