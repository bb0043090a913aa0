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
import os
import threading
import time

from uvicorn.config import LOGGING_CONFIG
from uvicorn.logging import AccessFormatter as UvicornAccessFormatter

DEFAULT_FORMAT = LOGGING_CONFIG["formatters"]["access"]["fmt"]
_PHRASES = {s.value: f"{s.value} {s.phrase}" for s in http.HTTPStatus}


class AccessFormatter(UvicornAccessFormatter):
    """uvicorn's access formatter with a fast path for its default, uncoloured line."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        if self.use_colors or self._fmt != DEFAULT_FORMAT or record.levelno != logging.INFO:
            return super().formatMessage(record)
        client_addr, method, full_path, http_version, status_code = record.args  # type: ignore[misc]
        status = _PHRASES.get(int(status_code)) or f"{status_code} "
        return f'INFO:     {client_addr} - "{method} {full_path} HTTP/{http_version}" {status}'


def logging_config() -> dict:
    """uvicorn's default logging configuration with `AccessFormatter` for the access line
    (``uvicorn.run(log_config=...)``)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["access"]["()"] = f"{__name__}.AccessFormatter"
    return config


class AccessLogger(logging.Logger):
    """The class uvicorn's access logger takes when serving (`cheapen`): the same records for
    less CPU. A standard record looks its caller up the stack and splits the caller's path
    (``findCaller``, ``LogRecord.__init__``: 60% of an access line's CPU); access lines all come
    from the same line of uvicorn, so the caller found first is kept, and a record of it is
    made from values computed once per process. Records with an exception, stack info or
    ``extra`` are made the standard way."""

    _caller: tuple | None = None  # set on the instance by its first record

    def findCaller(self, stack_info: bool = False, stacklevel: int = 1):
        if stack_info:
            return super().findCaller(stack_info, stacklevel + 1)  # + this frame
        if self._caller is None:
            self._caller = super().findCaller(False, stacklevel + 1)
        return self._caller

    def makeRecord(self, name, level, fn, lno, msg, args, exc_info, func=None, extra=None, sinfo=None):
        if exc_info or extra or sinfo:
            return super().makeRecord(name, level, fn, lno, msg, args, exc_info, func, extra, sinfo)
        return _AccessRecord(name, level, fn, lno, msg, args, func)


class _AccessRecord(logging.LogRecord):
    """A `logging.LogRecord` with the same attributes, its per-process and per-caller values cached."""

    _process: tuple[int, str | None] | None = None
    _paths: dict[str, tuple[str, str]] = {}

    def __init__(self, name, level, pathname, lineno, msg, args, func) -> None:  # noqa: super() is skipped on purpose
        ct = time.time()
        self.name, self.msg, self.args = name, msg, args
        self.levelname, self.levelno = logging.getLevelName(level), level
        self.pathname, self.lineno, self.funcName = pathname, lineno, func
        split = self._paths.get(pathname)
        if split is None:
            filename = os.path.basename(pathname)
            split = self._paths[pathname] = (filename, os.path.splitext(filename)[0])
        self.filename, self.module = split
        self.exc_info = self.exc_text = self.stack_info = None
        self.created = ct
        self.msecs = int((ct - int(ct)) * 1000) + 0.0
        self.relativeCreated = (ct - logging._startTime) * 1000
        self.thread = threading.get_ident() if logging.logThreads else None
        self.threadName = threading.current_thread().name if logging.logThreads else None
        process = _AccessRecord._process
        if process is None:  # os.getpid() is a system call: once per process (a fork forgets it)
            process = _AccessRecord._process = (os.getpid(), logging.LogRecord("", 0, "", 0, "", (), None).processName)
        self.process = process[0] if logging.logProcesses else None
        self.processName = process[1]


def _forget_process() -> None:
    _AccessRecord._process = None


os.register_at_fork(after_in_child=_forget_process)


def cheapen(logger: logging.Logger) -> None:
    """Make ``logger``'s records the `AccessLogger` way (uvicorn's access logger, once per process)."""
    if type(logger) is logging.Logger:
        logger.__class__ = AccessLogger
