"""The servers under test: loopback check, ``--spawn``ed servers, CPU meters, preflight.

Safety rule: the bench sends traffic only to loopback (127.0.0.0/8, ::1, ``localhost``)
unless the operator passes ``--allow-remote``; no name other than ``localhost`` is
resolved, so not even a DNS lookup leaves the machine by default.

Server CPU seconds come from ``/proc/<pid>/stat`` (utime + stime of the process and its
live descendants, so ``--workers N`` is covered) when the PID is known (``--target-pid``,
``--baseline-pid``, or a spawned server), else from the Prometheus counter
``process_cpu_seconds_total`` scraped from the target's ``/metrics`` (vLLM and ours both
export it), else it is unknown.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from reference_engine.selfcheck import describe_exit
from reference_engine.testing import free_port, wait_healthy

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_REPO = Path(__file__).resolve().parents[1]


class TargetError(RuntimeError):
    """A target cannot be used; the message says why and what to do."""


def check_url(url: str, allow_remote: bool = False) -> str:
    """Normalise a target URL (no trailing slash) after checking it is loopback.

    Raises:
        TargetError: not an http(s) URL with a host, or a non-loopback host without
            ``allow_remote``.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(f"{url!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:8000")
    host = parts.hostname
    if not allow_remote:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host.lower() == "localhost"
        if not loopback:
            raise TargetError(f"{url}: {host} is not a loopback address (127.0.0.0/8, ::1, localhost); "
                              "pass --allow-remote to load-test another machine you are responsible for")
    return url.rstrip("/")


class ProcCpu:
    """CPU seconds of a local process tree from /proc (Linux)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.source = f"/proc/{pid}"
        if self.read() is None:
            raise TargetError(f"no readable process {pid} in /proc (is the PID right, and is this Linux?)")

    @staticmethod
    def _stat(pid: int) -> tuple[int, float] | None:
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = raw[raw.rindex(")") + 2:].split()  # the name may contain spaces and parentheses
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK  # ppid, utime + stime

    def read(self) -> float | None:
        """CPU seconds of the process and its live descendants, or None if it is gone."""
        own = self._stat(self.pid)
        if own is None:
            return None
        children: dict[int, list[tuple[int, float]]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.pid:
                st = self._stat(int(entry))
                if st is not None:
                    children.setdefault(st[0], []).append((int(entry), st[1]))
        total, todo = own[1], [self.pid]
        while todo:
            for child, cpu in children.get(todo.pop(), []):
                total += cpu
                todo.append(child)
        return total


class ThreadCpu:
    """CPU time of a local process tree per thread, in nanoseconds, from
    ``/proc/<pid>/task/<tid>/schedstat`` (the scheduler's exact run time; ``/proc/<pid>/stat``
    counts in clock ticks of 10 ms, too coarse for one request of half a millisecond).

    `sample` returns ``{tid: ns}`` over the process and its descendants (``children`` files);
    `delta` of two samples counts new threads whole and ignores threads gone in between
    (worker threads exit only when idle, so they take no work with them).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.source = f"/proc/{pid}/task/*/schedstat"
        if not self.sample():
            raise TargetError(f"no readable process {pid} in /proc (is the PID right, and is this Linux?)")

    def sample(self) -> dict[tuple[int, int], int]:
        """``{(pid, tid): run time ns}`` of every live thread of the tree."""
        out: dict[tuple[int, int], int] = {}
        todo = [self.pid]
        while todo:
            pid = todo.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                        out[(pid, int(tid))] = int(f.read().split(None, 1)[0])
                    with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                        todo += [int(c) for c in f.read().split()]
                except (OSError, ValueError, IndexError):
                    continue
        return out

    @staticmethod
    def delta(before: dict, after: dict) -> float:
        """CPU seconds spent between two samples."""
        return sum(ns - before.get(key, 0) for key, ns in after.items()) / 1e9


class MetricsCpu:
    """CPU seconds from the target's ``/metrics`` (``process_cpu_seconds_total``, summed
    over label sets)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.source = f"{url}/metrics"
        if self.read() is None:
            raise TargetError(f"{url}/metrics has no process_cpu_seconds_total")

    def read(self) -> float | None:
        """Current value, or None when the scrape fails."""
        try:
            r = httpx.get(self.url + "/metrics", timeout=10, trust_env=False)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        values = []
        for line in r.text.splitlines():
            if line.startswith("process_cpu_seconds_total"):
                try:
                    values.append(float(line.rsplit(None, 1)[1]))
                except (IndexError, ValueError):
                    continue
        return sum(values) if values else None


@dataclass
class Target:
    """One server under test. ``name`` is the column title (``target``, ``baseline``, …)."""

    name: str
    url: str
    pid: int | None = None
    spawn_flags: list[str] | None = None
    cpu: Any = None
    info: dict = field(default_factory=dict)

    def attach_cpu(self) -> None:
        """Pick the CPU meter: /proc for a known PID, else /metrics, else none."""
        if self.pid is not None:
            self.cpu = ProcCpu(self.pid)
            return
        try:
            self.cpu = MetricsCpu(self.url)
        except TargetError:
            self.cpu = None

    def cpu_seconds(self) -> float | None:
        return self.cpu.read() if self.cpu is not None else None

    def describe(self) -> dict:
        return {"name": self.name, "url": self.url, "pid": self.pid,
                "spawned": None if self.spawn_flags is None else shlex.join(self.spawn_flags),
                "cpu_source": self.cpu.source if self.cpu is not None else None, **self.info}


class SpawnedServer:
    """``render-service serve`` in a subprocess on a free loopback port.

    Args:
        args: serve arguments (model, flags) without host and port.
        root: the source tree whose ``render_service`` runs (put first on ``PYTHONPATH``);
            default this checkout. ``bench regress`` points it at a baseline's tree; ``""``
            runs the installed ``render_service`` (no ``PYTHONPATH`` at all).
        log_level: ``--uvicorn-log-level``; None leaves serve's default (``info``: access log on).
    """

    def __init__(self, args: list[str], root: Path | str | None = None, log_level: str | None = "warning") -> None:
        self.args = args
        self.root = _REPO if root is None else root
        self.log_level = log_level
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    def start(self) -> None:
        # a tree from before start-up moved into render_service/serve/ (a `bench regress` baseline)
        # has its command line at render_service/cli.py
        old_layout = self.root != "" and (Path(self.root) / "render_service" / "cli.py").is_file()
        cli = "render_service.cli" if old_layout else "render_service.serve.cli"
        cmd = [sys.executable, "-m", cli, "serve", *self.args, "--host", "127.0.0.1",
               "--port", str(self.port)]
        if self.log_level is not None:
            cmd += ["--uvicorn-log-level", self.log_level]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if self.root != "":
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root), os.environ.get("PYTHONPATH")]))
        # `python -m` puts the working directory first on sys.path: run where the code under test is
        cwd = tempfile.gettempdir() if self.root == "" else str(self.root)
        self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait for ``/health``. Raises TargetError (with the server's last output) if it
        exits or is not up in time."""
        if wait_healthy(self.proc, self.url, timeout, interval=0.2):
            return
        if self.proc.poll() is not None:
            raise TargetError(f"spawned server {describe_exit(self.proc.returncode)}: {self.output()[-1500:]}")
        self.stop()
        raise TargetError(f"spawned server on port {self.port} was not healthy after {timeout:.0f} s: {self.output()[-1500:]}")

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def death_notice(self) -> str | None:
        """How the server ended if it died on its own (``… was killed by SIGSEGV (signal 11)``), else None."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"spawned server {self.url} {describe_exit(self.proc.returncode)}; last output: {self.output()[-800:]}"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.proc is not None:
            stop_process(self.proc)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM ``proc`` if it runs, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ModuleProcess:
    """``python -m ARGS --port P`` on a free loopback port with ``root`` first on PYTHONPATH
    (``""``: the installed packages), up once ``/health`` answers.

    Raises:
        TargetError: it exited or was not healthy within ``timeout`` seconds (with its output).
    """

    def __init__(self, name: str, root: Path | str, args: list[str], timeout: float = 180.0) -> None:
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if root != "":
            env["PYTHONPATH"] = str(root)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", *args, "--port", str(self.port)], env=env,
                                     cwd=str(root) or tempfile.gettempdir(), stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if not wait_healthy(self.proc, self.url, timeout, interval=0.2):
            self.stop()
            self.log.seek(0)
            raise TargetError(f"{name} did not start: {self.log.read().decode('utf-8', 'replace')[-800:]}")

    def stop(self) -> None:
        stop_process(self.proc)


def spawn_args(flags: str, model: str | None, max_model_len: int, parsers: bool) -> list[str]:
    """``serve`` arguments for ``--spawn FLAGS``: FLAGS plus what the run needs and FLAGS
    does not already say: the bench's ``--tokenizer`` directory as the model, a context
    length that fits the workloads, and the Qwen3 reasoning + hermes tool parsers for the
    derender workloads."""
    args = shlex.split(flags)
    has = lambda *names: any(a == n or a.startswith(n + "=") for a in args for n in names)  # noqa: E731
    head, rest = (args[:1], args[1:]) if args and not args[0].startswith("-") else ([], args)
    if model is not None and not head and not has("--model"):
        head = [model]
    extra = [] if has("--max-model-len") else ["--max-model-len", str(max_model_len)]
    if parsers and not has("--reasoning-parser", "--tool-call-parser"):
        extra += ["--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", "--enable-auto-tool-choice"]
    return head + extra + rest


def spawned_model(flags: str) -> str | None:
    """The model a ``--spawn FLAGS`` string names (positional or ``--model``), if any."""
    args = shlex.split(flags)
    if args and not args[0].startswith("-"):
        return args[0]
    for i, a in enumerate(args):
        if a == "--model" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--model="):
            return a.split("=", 1)[1]
    return None


def get_json(url: str, path: str) -> Any:
    """GET ``url+path`` as JSON, or None on any failure."""
    try:
        r = httpx.get(url + path, timeout=10, trust_env=False)
        return orjson.loads(r.content) if r.status_code == 200 else None
    except (httpx.HTTPError, orjson.JSONDecodeError):
        return None


def post_json(url: str, path: str, body: dict, timeout: float = 60.0) -> Any:
    """POST JSON to ``url+path``; the parsed 200 answer, or None on any failure."""
    try:
        r = httpx.post(url + path, content=orjson.dumps(body), headers={"content-type": "application/json"},
                       timeout=timeout, trust_env=False)
        return orjson.loads(r.content) if r.status_code == 200 else None
    except (httpx.HTTPError, orjson.JSONDecodeError):
        return None


TOKENIZE_SAMPLE = "Hello, world! def f(x):\n    return x * 42  # naïve café 東京 <think>"


def check_reachable(target: Target) -> None:
    """Raise TargetError unless ``target`` answers HTTP at all (any status)."""
    try:
        httpx.get(target.url + "/health", timeout=10, trust_env=False)
    except httpx.HTTPError as exc:
        raise TargetError(f"{target.name} {target.url} cannot be reached: {type(exc).__name__}: {exc}") from None


def preflight(target: Target, tokenizer) -> list[str]:
    """Note what the (reachable) target serves in ``target.info``: models, context length,
    version, and whether its ``/tokenize`` agrees with the bench's tokenizer.

    Returns warnings (tokenizer mismatch).
    """
    models = get_json(target.url, "/v1/models")
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        target.info["served_models"] = [m.get("id") for m in data if isinstance(m, dict)]
        target.info["max_model_len"] = data[0].get("max_model_len")
    version = get_json(target.url, "/version")
    target.info["version"] = version.get("version") if isinstance(version, dict) else None
    warnings = []
    tok = post_json(target.url, "/tokenize", {"prompt": TOKENIZE_SAMPLE, "add_special_tokens": False})
    if isinstance(tok, dict) and isinstance(tok.get("tokens"), list):
        same = tok["tokens"] == tokenizer.encode(TOKENIZE_SAMPLE)
        target.info["tokenizer_matches"] = same
        if not same:
            warnings.append(f"{target.name}: its tokenizer differs from the bench's ({tokenizer.source}); "
                            "prompt lengths and output token ids will not mean what the bench says (use --tokenizer)")
    else:
        target.info["tokenizer_matches"] = None
    return warnings
