"""Start reference engines as real processes on loopback (for this repo's tests and demos).

    with EngineProcess("--scripted", path, role="decode") as eng:
        httpx.post(eng.url + "/inference/v1/generate", json=...)

The child is ``python -m reference_engine`` with this checkout on ``PYTHONPATH``; it is
terminated (then killed) on exit. `kill()` simulates a crashed engine. An engine that dies on
its own (a signal, an exit) is reported with how it ended and its last output — at start-up,
through `check_alive()`, and when the ``with`` block ends — instead of leaving the caller
with a bare "connection refused".
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .selfcheck import describe_exit

_REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``url + "/health"`` until it answers 200 (True); False once ``proc`` has exited
    or ``timeout`` seconds have passed (``proc.poll()`` tells which)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2.0, trust_env=False).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(interval)
    return False


class EngineProcess:
    """One engine subprocess. ``args`` are extra CLI flags (``--scripted F``, ``--model M``, …).

    Raises:
        RuntimeError: from ``__enter__`` if the process exits or ``/health`` does not answer
            within ``startup_timeout`` seconds (the message carries its stderr).
    """

    def __init__(self, *args: str, role: str = "both", startup_timeout: float = 60.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "reference_engine", "--role", role, "--port", str(self.port), *args]
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self._ended_by_us = False

    def __enter__(self) -> "EngineProcess":
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])))
        self._log = tempfile.TemporaryFile()  # not a pipe: a chatty child must never block on it
        self.proc = subprocess.Popen(self.args, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        if wait_healthy(self.proc, self.url, self.startup_timeout):
            return self
        if self.proc.poll() is not None:
            raise RuntimeError(f"engine {describe_exit(self.proc.returncode)} at start-up: {self.output()[-2000:]}")
        self.kill()
        raise RuntimeError(f"engine on port {self.port} did not become healthy in {self.startup_timeout}s")

    def __exit__(self, *exc) -> None:
        died = self.proc is not None and not self._ended_by_us and self.proc.poll() is not None
        self.stop()
        if died:  # raised from inside the block too: this names the cause of whatever failed there
            raise RuntimeError(self.death_notice())

    def check_alive(self) -> None:
        """Raise RuntimeError naming how the engine ended (signal or exit code) if it is gone."""
        if self.proc is not None and not self._ended_by_us and self.proc.poll() is not None:
            raise RuntimeError(self.death_notice())

    def death_notice(self) -> str:
        """``engine on port P was killed by SIGSEGV (signal 11); last output: …``."""
        return (f"engine on port {self.port} {describe_exit(self.proc.returncode)} while in use; "
                f"last output: {self.output()[-1500:]}")

    def output(self) -> str:
        """Everything the process printed so far."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        self._ended_by_us = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL and reap (a crashed engine)."""
        self._ended_by_us = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
