"""Request-supplied chat templates (``--trust-request-chat-template``) under hard limits.

A chat template is a program. The Jinja sandbox stops it from reaching the interpreter,
not from spending it: ``{{ (9**(9**8)) % 7 }}`` held the process for 65 s, nested
``range(100000)`` loops never ended and kept running after the client left (issue 14 §1).
So a template that arrives with a request is compiled and rendered only in a worker
process, never in the server:

- a wall-clock budget per render (`TemplateLimits.timeout_s`); past it the worker is
  killed and replaced, which Python code cannot ignore;
- the same kill when the client leaves (`render_service.http.cancel`);
- an address-space limit in the worker (a ``MemoryError`` there is a 400, not a dead server);
- an output cap in characters;
- the sandbox's own arithmetic and repetition limits (`render_service.model.templates`),
  so most bombs fail at once instead of burning the budget.

The model's own template (trusted, chosen by the operator) still renders in-process.
`RequestTemplate` has `ChatTemplate`'s interface, so render code does not care which it has.
Workers start lazily (a server that never sees a request template starts none), from a
fresh interpreter that imports only Jinja and this package's template module.
"""

from __future__ import annotations

import contextvars
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any

import orjson

from ..errors import OpenAIError, bad_request

CLIENT_GONE: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("client_gone", default=None)
"""Set by the HTTP layer to an event that fires when the client disconnects."""


@dataclass(frozen=True)
class TemplateLimits:
    """Bounds on one request-template render.

    Attributes:
        timeout_s: wall-clock budget of one compile or render, in seconds.
        max_output_chars: longest rendered prompt, in characters.
        memory_bytes: address-space limit of a worker process.
        workers: worker processes per server process (renders beyond wait for one).
    """

    timeout_s: float = 2.0
    max_output_chars: int = 16 * 1024 * 1024
    memory_bytes: int = 2 << 30
    workers: int = 2


class TemplateRefused(OpenAIError):
    """400: the request's template broke a limit or failed."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message, param="chat_template")


# -- the worker process ------------------------------------------------------------------
# A child `python -m render_service.model.template_sandbox` reading requests on stdin and
# answering on stdout, framed by multiprocessing.connection and encoded as JSON (never
# pickle: the child runs the attacker's template, so its answers are data, not objects).

def _worker_main(memory_bytes: int, max_output_chars: int) -> None:  # pragma: no cover - runs in a child
    import os
    import resource
    import sys
    from multiprocessing.connection import Connection

    requests, replies = Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False)
    sys.stdout = sys.stderr  # nothing but replies on fd 1
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ValueError, OSError):
        pass
    from .templates import compile_template

    while True:
        try:
            op, source, args, kwargs = orjson.loads(requests.recv_bytes())
        except EOFError:
            return
        try:
            template = compile_template(source)
            if op == "inspect":
                result: Any = {k: getattr(template, k) for k in _INFO_FIELDS}
            else:
                result = template.render(*args, **kwargs)
                if len(result) > max_output_chars:
                    raise ValueError(f"the rendered prompt exceeds {max_output_chars} characters")
            reply = ["ok", result]
        except OpenAIError as exc:
            reply = ["openai", [exc.status, exc.message, exc.param]]
        except ValueError as exc:  # TemplateError and compile errors
            reply = ["openai", [400, f"Chat template error: {exc}", getattr(exc, "param", "chat_template")]]
        except MemoryError:
            reply = ["error", "the template used more memory than allowed"]
        except RecursionError:
            reply = ["error", "the template nests too deeply"]
        except Exception as exc:  # anything a template can raise is the template's fault
            reply = ["error", f"{type(exc).__name__}: {exc}"]
        try:
            data = orjson.dumps(reply)
        except (MemoryError, TypeError):
            data = orjson.dumps(["error", "the template's output cannot be returned"])
        replies.send_bytes(data)


_INFO_FIELDS = ("source", "literal_text", "content_format", "arguments_form", "null_content")


class _Worker:
    def __init__(self, limits: TemplateLimits) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(limits.memory_bytes), str(limits.max_output_chars)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self.requests = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.replies = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.process.stdin.close()
        self.process.stdout.close()

    def kill(self) -> None:
        self.process.kill()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:  # reaped later by the interpreter; its pipes close below
            pass
        self.requests.close()
        self.replies.close()


class TemplateSandbox:
    """A small pool of killable worker processes that compile and render request templates.

    Args:
        limits: the bounds of one render.
    """

    def __init__(self, limits: TemplateLimits = TemplateLimits()) -> None:
        self.limits = limits
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._started = 0
        self.killed = 0  # workers killed for a budget overrun or a client that left

    def call(self, op: str, source: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``op`` (``"inspect"`` or ``"render"``) for ``source`` in a worker. Blocking.

        Raises:
            TemplateRefused: the template failed, broke a limit, or ran out of time.
            OpenAIError: 499 when the client left while it ran; 503 when no worker came free
                within twice the render budget.
        """
        worker = self._acquire()
        gone = CLIENT_GONE.get()
        try:
            worker.requests.send_bytes(orjson.dumps([op, source, args, kwargs]))
            deadline = time.monotonic() + self.limits.timeout_s
            while not worker.replies.poll(0.05):
                if gone is not None and gone.is_set():
                    self._replace(worker)
                    worker = None
                    raise OpenAIError(499, "The client closed the connection while its template rendered.")
                if time.monotonic() > deadline:
                    self._replace(worker)
                    worker = None
                    raise TemplateRefused(f"The chat template did not finish within {self.limits.timeout_s:g} s.")
            status, result = orjson.loads(worker.replies.recv_bytes())
        except (EOFError, OSError, orjson.JSONDecodeError, ValueError):  # the worker died (memory limit hit hard)
            if worker is not None:
                self._replace(worker)
                worker = None
            raise TemplateRefused("The chat template crashed its render worker.") from None
        finally:
            if worker is not None:
                self._idle.put(worker)
        if status == "openai":
            raise OpenAIError(result[0], result[1], param=result[2])
        if status != "ok":
            raise TemplateRefused(f"Chat template error: {result}")
        return result

    def template(self, source: str) -> "RequestTemplate":
        """A `RequestTemplate` for ``source`` (compiled in a worker; the result is cached)."""
        return _request_template(self, source)

    def close(self) -> None:
        """Stop the idle workers (busy ones finish their render; the pool starts new ones on demand)."""
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                self._started -= 1
            worker.kill()

    def _acquire(self) -> _Worker:
        """An idle worker, a new one while fewer than ``limits.workers`` exist, else wait.

        The wait is bounded by the render budget: a pool that stays busy that long answers
        503 instead of holding the request (and its thread) forever.
        """
        with self._lock:
            start = self._idle.empty() and self._started < self.limits.workers
            if start:
                self._started += 1
        if start:
            try:
                return _Worker(self.limits)
            except BaseException:
                with self._lock:
                    self._started -= 1
                raise
        try:
            return self._idle.get(timeout=self.limits.timeout_s * 2)
        except queue.Empty:
            raise OpenAIError(503, "Every chat-template worker is busy; retry shortly.") from None

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self.killed += 1
        try:
            fresh = _Worker(self.limits)
        except OSError:  # no process to be had now: free the slot, the next request starts one
            with self._lock:
                self._started -= 1
            return
        self._idle.put(fresh)


class RequestTemplate:
    """`ChatTemplate`'s interface for a request template: its facts were found by a worker,
    and `render` runs in one."""

    def __init__(self, sandbox: TemplateSandbox, info: dict) -> None:
        self._sandbox = sandbox
        for key in _INFO_FIELDS:
            setattr(self, key, info[key])

    def render(self, messages: list[dict], **kwargs: Any) -> str:
        """As `ChatTemplate.render`, in a worker under `TemplateLimits`.

        Raises:
            TemplateRefused: see `TemplateSandbox.call`.
        """
        return self._sandbox.call("render", self.source, messages, **kwargs)


@lru_cache(maxsize=16)
def _request_template(sandbox: TemplateSandbox, source: str) -> RequestTemplate:
    return RequestTemplate(sandbox, sandbox.call("inspect", source))


_SHARED: TemplateSandbox | None = None
_SHARED_LOCK = threading.Lock()


def shared_sandbox() -> TemplateSandbox:
    """This process's sandbox (created on first use)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = TemplateSandbox()
        return _SHARED


def request_template(source: str) -> RequestTemplate:
    """The request's ``chat_template`` as a `RequestTemplate` (compiled in a worker).

    Raises:
        TemplateRefused: it does not compile, or compiling broke a limit.
    """
    if not isinstance(source, str):
        raise bad_request("chat_template must be a string.", "chat_template")
    return shared_sandbox().template(source)


if __name__ == "__main__":  # pragma: no cover - the worker process
    _worker_main(int(sys.argv[1]), int(sys.argv[2]))
