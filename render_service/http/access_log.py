"""The access log line, as uvicorn writes it, for less CPU.

uvicorn's `AccessFormatter` copies every record and looks its status phrase up in
``http.HTTPStatus`` (with the record and the handler, 7% of a ~50-token render's CPU). This one
writes the same line — ``INFO:     127.0.0.1:51234 - "POST /v1/chat/completions/render HTTP/1.1" 200 OK``
— straight from the record's arguments when the format is uvicorn's default and colours are off
(a log file or a pipe); anything else (a terminal, a custom format) goes through uvicorn's own.
"""

from __future__ import annotations

import copy
import http
import logging

from uvicorn.config import LOGGING_CONFIG
from uvicorn.logging import AccessFormatter as UvicornAccessFormatter

DEFAULT_FORMAT = LOGGING_CONFIG["formatters"]["access"]["fmt"]
ACCESS_MESSAGE = '%s - "%s %s HTTP/%s" %d'
"""The message uvicorn's protocols log an access line with (its arguments: client address,
method, path with query, HTTP version, status code)."""
_PHRASES = {s.value: f"{s.value} {s.phrase}" for s in http.HTTPStatus}


class AccessFormatter(UvicornAccessFormatter):
    """uvicorn's access formatter with a fast path for its default, uncoloured line."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        if not self.plain or record.levelno != logging.INFO:
            return super().formatMessage(record)
        return self.line(*record.args)  # type: ignore[misc]

    @property
    def plain(self) -> bool:
        """The default format, uncoloured: the line `line` writes."""
        return not self.use_colors and self._fmt == DEFAULT_FORMAT

    @staticmethod
    def line(client_addr: str, method: str, full_path: str, http_version: str, status_code: int) -> str:
        """The default uncoloured access line of an INFO record with uvicorn's arguments."""
        status = _PHRASES.get(int(status_code)) or f"{status_code} "
        return f'INFO:     {client_addr} - "{method} {full_path} HTTP/{http_version}" {status}'


def logging_config() -> dict:
    """uvicorn's default logging configuration with `AccessFormatter` for the access line
    (``uvicorn.run(log_config=...)``)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["access"]["()"] = f"{__name__}.AccessFormatter"
    return config


class AccessLogger(logging.Logger):
    """The class uvicorn's access logger takes when serving (`cheapen`). When uvicorn's default
    logging set-up alone would write an access line (`_plain_handler`), the line is written
    to that handler's stream directly, without a `logging.LogRecord`: making the record (its
    caller looked up the stack, its path split) and passing it through the logger and the
    handler were most of an access line's CPU, ~5% of a ~50-token render. The text is the
    same (tests/test_access_log.py); any other set-up (a terminal's colours, a filter, a
    handler added, propagation) takes the standard way."""

    def info(self, msg, *args, **kwargs) -> None:
        handler = self._plain_handler(msg, kwargs)
        if handler is None:
            super().info(msg, *args, **kwargs)
            return
        # what Logger.handle and StreamHandler.emit would do with this record, without the record
        try:
            line = handler.formatter.line(*args) + handler.terminator  # type: ignore[union-attr]
            with handler.lock:  # type: ignore[union-attr]
                handler.stream.write(line)
                handler.flush()
        except Exception:
            super().info(msg, *args, **kwargs)  # the standard way reports it (Handler.handleError)

    def _plain_handler(self, msg, kwargs) -> logging.StreamHandler | None:
        """The one handler an access line goes to when it alone would write it, as uvicorn's
        default logging configuration sets it up (a StreamHandler with the plain
        `AccessFormatter`, no filters, no propagation); else None (the standard way)."""
        if (kwargs or msg != ACCESS_MESSAGE or self.filters or self.propagate or self.disabled
                or len(self.handlers) != 1 or not self.isEnabledFor(logging.INFO)):
            return None
        handler = self.handlers[0]
        if (type(handler) is not logging.StreamHandler or handler.filters or handler.level > logging.INFO
                or not isinstance(handler.formatter, AccessFormatter) or not handler.formatter.plain):
            return None
        return handler


def cheapen(logger: logging.Logger) -> None:
    """Make ``logger`` (uvicorn's access logger) an `AccessLogger`; idempotent."""
    if type(logger) is logging.Logger:
        logger.__class__ = AccessLogger
