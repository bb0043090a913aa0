"""What a workload is: a sans-IO generator of HTTP calls, one generator per session.

A *session* is the unit the load model starts: one request (``render-long``,
``derender``, ``four-hop``), one growing conversation (``agent-loop``: one render per
turn) or one generation stream (``stream-derender``: one derender call per token). The
session generator yields `Call` values and is sent each call's parsed JSON response, so a
call can depend on the previous answer (``stream_state``) without the workload doing any
I/O. The load generator (`bench.loadgen`) owns HTTP, timing and error accounting.

Each successful call is recorded as ``(latency seconds, tag)`` where ``tag`` is the call's
own tag (e.g. ``{"turn": 3}``) merged with what its `Call.check` measured from the
response (e.g. ``{"prompt_tokens": 9000}``); `Workload.summarise` turns those into the
workload's own figures.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

from .. import corpus
from ..tokens import BenchTokenizer

RENDER_PATH = "/v1/chat/completions/render"
DERENDER_PATH = "/v1/chat/completions/derender"
CHAT_PATH = "/v1/chat/completions"


class InvalidResponse(Exception):
    """A 200 response whose body is not the shape the wire protocol promises."""


@dataclass
class Call:
    """One HTTP POST of a session.

    Attributes:
        path: URL path on the target, e.g. ``/v1/chat/completions/render``.
        body: JSON body (serialised by the load generator).
        tag: what identifies the call for grouping (``turn``, ``position``); recorded.
        check: validates the parsed 200 body and returns measures to record (or None);
            raises `InvalidResponse`. For ``sse`` calls it gets the list of parsed events.
        sse: the response is an OpenAI server-sent-event stream (``data: …`` lines,
            ``data: [DONE]`` at the end).
    """

    path: str
    body: dict
    tag: dict = field(default_factory=dict)
    check: Callable[[Any], dict | None] | None = None
    sse: bool = False


Session = Generator[Call, Any, None]


@dataclass
class Probe:
    """What `Workload.prepare` may use: the local tokenizer, the ``model`` to send, and a
    synchronous POST to the first target that returns parsed JSON or None on any failure."""

    tokenizer: BenchTokenizer
    model: str | None
    post: Callable[[str, dict], Any]
    warn: Callable[[str], None]


def require(ok: bool, message: str) -> None:
    """Raise `InvalidResponse(message)` unless ``ok``."""
    if not ok:
        raise InvalidResponse(message)


def check_render(resp: Any) -> dict:
    """A `GenerateRequest` (wire brief §1.3): non-empty ``token_ids``. Measures its length."""
    require(isinstance(resp, dict) and isinstance(resp.get("token_ids"), list) and resp["token_ids"],
            "render response without token_ids")
    return {"prompt_tokens": len(resp["token_ids"])}


def check_choice(resp: Any, what: str) -> dict:
    """``choices[0]`` of a chat completion (``what`` names it in the error); raises
    `InvalidResponse` unless it has a ``message`` object."""
    require(isinstance(resp, dict) and isinstance(resp.get("choices"), list) and resp["choices"]
            and isinstance(resp["choices"][0], dict) and isinstance(resp["choices"][0].get("message"), dict),
            f"{what} without choices[0].message")
    return resp["choices"][0]


def with_model(body: dict, model: str | None) -> dict:
    """``body`` with ``model`` set when the operator named one (null is accepted otherwise)."""
    return {"model": model, **body} if model is not None else body


class Workload:
    """Base class. Subclasses set the class attributes and implement `session`.

    Attributes:
        name: the CLI name.
        unit: what one session is, for reports (``request``, ``conversation``, ``stream``).
        target_kind: ``render`` (a render server) or ``openai`` (a driver's chat endpoint).
        needs_parsers: the server should run reasoning + tool parsers (``--spawn`` adds
            ``--reasoning-parser qwen3 --tool-call-parser hermes --enable-auto-tool-choice``).
    """

    name = ""
    unit = "request"
    target_kind = "render"
    needs_parsers = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Workload":
        """Build from parsed ``bench`` flags."""
        raise NotImplementedError

    def prepare(self, probe: Probe) -> None:
        """Build what sessions share (prompt pools, prompt ids) before the clock starts."""

    def session(self, index: int) -> Session:
        """The calls of session ``index``; the same index gives the same calls on every target."""
        raise NotImplementedError

    def params(self) -> dict:
        """The workload's parameters, for results.json."""
        return {}

    def context_tokens(self) -> int:
        """Longest prompt + output this workload sends, in tokens (for a spawned server)."""
        return 8192

    def default_duration(self, calls_per_s: float | None = None, sessions: int = 4) -> float:
        """Seconds per target per measurement when ``--duration`` is not given. ``calls_per_s``:
        what one session got in the warm-up on this box (None without a warm-up); ``sessions``:
        how many run at once in the measurement."""
        return 10.0

    def summarise(self, samples: list[tuple[float, dict]]) -> dict:
        """Workload-specific figures from successful ``(latency s, tag)`` samples."""
        return {}

    def rows(self, extra: dict) -> list[tuple[str, float | None, str]]:
        """Extra table rows from one run's `summarise` output: (label, value, format)."""
        return []


class ExactPrompts:
    """A pool of user-message texts of exactly ``n`` tokens (real code, one question),
    made unique per request by a fixed-width ticket number that keeps the count stable.

    Building a 9k-token text takes a few encodes (~0.1 s), so a small pool is built once
    in `prepare` and reused with a new ticket number per request: every request's text is
    different from its first token on, so no prefix, segment or response cache can help.
    Word-level caches inside tokenizers do see the same words again — as they would on
    any real traffic once warm (measured with fastokens on this corpus: a 9k-token text
    never seen costs ~0.2 ms, unseen slices made of words seen before ~0.09 ms, the same
    body again ~0.06 ms).
    """

    QUESTION = "\n```\nWhere in this code are errors swallowed instead of reported? Answer with file names and a fix."

    def __init__(self, tok: BenchTokenizer, n: int, seed: int, pool: int = 4) -> None:
        self.n, self.texts, self.tokens = n, [], n
        head = self._head(0) + "Context from the repository:\n```python\n"
        for j in range(pool):
            builders = (lambda k, off=corpus.offset_for(seed + j + 1000 * a): head + corpus.excerpt(off, k) + self.QUESTION
                        for a in range(8))
            text, got = tok.fit_exact(builders, n, 3 * n)
            self.texts.append(text[len(self._head(0)):])
            self.tokens = min(self.tokens, got)
        self.stable = tok.count(self.text(10**9 - 1)) == tok.count(self.text(0))

    @staticmethod
    def _head(index: int) -> str:
        return f"Ticket {index % 10**9:09d}. "

    def text(self, index: int) -> str:
        """The user text for request ``index``."""
        return self._head(index) + self.texts[index % len(self.texts)]
