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


def test_access_lines_written_directly_equal_the_standard_ways():
    """`cheapen` (uvicorn's access logger when serving): under uvicorn's default set-up the
    line goes straight to the handler's stream, with the text the record would have given;
    a filter, a second handler, propagation or colours take the standard way (a record)."""
    import io

    from render_service.http.access_log import ACCESS_MESSAGE, AccessLogger, cheapen

    calls = [("127.0.0.1:50123", "POST", "/v1/chat/completions/render", "1.1", 200),
             ("10.0.0.7:1", "GET", "/v1/x?a=1&b=%20", "1.0", 404), ("[::1]:9", "POST", "/é", "1.1", 599)]

    def written(cheap: bool, colours: bool = False, extra=None) -> tuple[str, int]:
        logger = logging.Logger("uvicorn.access")
        handler = logging.StreamHandler(io.StringIO())
        handler.setFormatter(AccessFormatter(fmt=DEFAULT_FORMAT, use_colors=colours))
        logger.addHandler(handler)
        logger.propagate = False
        records = []
        real_handle = logger.handle
        logger.handle = lambda record: (records.append(record), real_handle(record))  # counts records made
        if extra is not None:
            extra(logger)
        if cheap:
            cheapen(logger)
            assert type(logger) is AccessLogger
        for args in calls:
            logger.info(ACCESS_MESSAGE, *args)
        return handler.stream.getvalue(), len(records)

    text, records = written(cheap=False)
    assert text.count("\n") == 3 and '"POST /é HTTP/1.1" 599 ' in text
    assert written(cheap=True) == (text, 0)  # the same text, and no record was made
    assert written(cheap=True, colours=True) == written(cheap=False, colours=True)
    assert written(cheap=True, colours=True)[1] == 3
    for extra in (lambda lg: lg.addFilter(lambda r: True), lambda lg: setattr(lg, "propagate", True)):
        assert written(cheap=True, extra=extra) == (text, 3)
