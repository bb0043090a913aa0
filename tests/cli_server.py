"""`render-service serve ARGV` as a real subprocess on a free loopback port, for tests that need
the whole command line (TLS, traces, the router replay)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import httpx

from conftest import free_port


@contextlib.contextmanager
def serve(*argv: str, scheme: str = "http", timeout: float = 120, **client_options):
    """Yields ``(client, process)`` once ``/health`` answers 200; ``client_options`` go to the
    `httpx.Client` (TLS: ``verify``; the API key: ``headers``). Stops the server afterwards.

    Raises:
        AssertionError: the server exited (its stderr in the message) or did not come up in time.
    """
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "render_service.serve.cli", "serve", *argv, "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = httpx.Client(base_url=f"{scheme}://127.0.0.1:{port}", timeout=timeout, **client_options)
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert proc.poll() is None, proc.stderr.read()
            with contextlib.suppress(httpx.TransportError):
                if client.get("/health").status_code == 200:
                    break
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        yield client, proc
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)
