"""The access log line: the same text as uvicorn's, from a cheaper formatter (http/access_log.py)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time

import httpx
import pytest
from uvicorn.logging import AccessFormatter as UvicornAccessFormatter

from conftest import free_port
from render_service.http.access_log import DEFAULT_FORMAT, AccessFormatter


def _record(status: int, path: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.access", level, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                             ("127.0.0.1:50123", "POST", path, "1.1", status), None)


@pytest.mark.parametrize("use_colors", [False, True])
@pytest.mark.parametrize("path", ["/v1/chat/completions/render", "/v1/x?a=1&b=%20", "/é/ü", ""])
def test_every_status_line_equals_uvicorns(path, use_colors):
    ours, theirs = AccessFormatter(fmt=DEFAULT_FORMAT, use_colors=use_colors), \
        UvicornAccessFormatter(fmt=DEFAULT_FORMAT, use_colors=use_colors)
    for status in range(100, 600):
        assert ours.format(_record(status, path)) == theirs.format(_record(status, path)), status
    warning = _record(200, path, logging.WARNING)
    assert ours.format(warning) == theirs.format(warning)


def test_a_custom_format_goes_through_uvicorns_formatter():
    fmt = "%(client_addr)s|%(request_line)s|%(status_code)s"
    ours, theirs = AccessFormatter(fmt=fmt, use_colors=False), UvicornAccessFormatter(fmt=fmt, use_colors=False)
    assert ours.format(_record(404, "/x")) == theirs.format(_record(404, "/x")) == "127.0.0.1:50123|POST /x HTTP/1.1|404 Not Found"


def test_serve_writes_uvicorns_access_line(tmp_path):
    port, out = free_port(), (tmp_path / "stdout").open("w+b")
    proc = subprocess.Popen([sys.executable, "-m", "render_service.serve.cli", "serve", "--port", str(port)],
                            stdout=out, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        with httpx.Client(base_url=url) as client:
            assert client.post("/v1/completions/render", json={"prompt": "hi"}).status_code == 200
            assert client.post("/v1/completions/render?x=1", content=b"{").status_code == 400
    finally:
        proc.terminate()
        proc.wait(30)
    log = (tmp_path / "stdout").read_text()
    client_addr = r"127\.0\.0\.1:\d+"
    assert re.search(rf'^INFO:     {client_addr} - "POST /v1/completions/render HTTP/1\.1" 200 OK$', log, re.M), log
    assert re.search(rf'^INFO:     {client_addr} - "POST /v1/completions/render\?x=1 HTTP/1\.1" 400 Bad Request$',
                     log, re.M), log


def _log_access_line(logger: logging.Logger) -> None:
    logger.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:50123", "POST", "/v1/x", "1.1", 200)


def test_cheapened_access_records_equal_standard_ones():
    """`cheapen` (uvicorn's access logger when serving) makes records with every attribute a
    standard record has, of the same values (the caller's file, line and function included),
    but the clock's; an exception record is made the standard way."""
    from render_service.http.access_log import AccessLogger, cheapen

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    standard, cheap = logging.Logger("uvicorn.access.a"), logging.Logger("uvicorn.access.b")
    cheapen(cheap)
    assert type(cheap) is AccessLogger and type(standard) is logging.Logger
    for logger in (standard, cheap):
        logger.addHandler(Keep())
        for _ in range(2):  # the second cheap record comes from the kept caller
            _log_access_line(logger)
    clock = {"created", "msecs", "relativeCreated"}
    want = {k: v for k, v in vars(standard.handlers[0].records[0]).items() if k not in clock | {"name"}}
    for record in cheap.handlers[0].records:
        assert type(record) is not logging.LogRecord  # the cheap way was taken
        got = {k: v for k, v in vars(record).items() if k not in clock | {"name"}}
        assert got == want
        assert abs(record.created - standard.handlers[0].records[0].created) < 60
    try:
        raise ValueError("x")
    except ValueError:
        cheap.exception("failed")
    assert type(cheap.handlers[0].records[-1]) is logging.LogRecord and cheap.handlers[0].records[-1].exc_info
