"""The hardening limits of client bodies, in one place (README "Limits and overload").

Every request model of every front door (chat, completions, Responses, Anthropic Messages)
and of derender declares its fields with the types below, so render, derender and the
driver refuse the same bodies with the same 400, before any work is done. vLLM 0.33 sets
none of these bounds; each is a deliberate difference listed in the README.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, TypeAdapter, ValidationError

MAX_COUNT = 2**31 - 1
"""Largest token count, index or token id a client may send: past it a value is an error,
not a number to add up and serialise (2**64 - 1 in ``usage`` overflowed the JSON writer)."""

MAX_NESTING = 32
"""Deepest JSON nesting of pass-through objects (``kv_transfer_params``, ``vllm_xargs``,
``metrics``, tool schemas …); the JSON writer stops at 255 levels, which made a 300-deep
``metrics`` a 500 and a 500-deep ``kv_transfer_params`` a "Recursion limit reached"."""

MAX_STOP_STRINGS = 64
"""Most stop strings one request may give (OpenAI allows 4; vLLM sets no limit)."""
MAX_STOP_CHARS = 1000
"""Longest stop string, in characters; also bounds the held-back text of a stream."""

MAX_BATCH_PROMPTS = 1024
"""Default most prompts in one completions request (text or token-id prompts). Each becomes its own
`GenerateRequest` (about 1 KB of answer beyond its ids), so 300,000 one-word prompts made a
194 MB answer and held a CPU-pool thread for seconds."""
MAX_BATCH_PROMPT_LENGTH = 4 * 1024 * 1024
"""Default most prompt characters (text prompts) plus token ids (token prompts) in one completions
request, all prompts together: about half a second of tokenizing on one core, so one
request cannot hold the pool for long while others wait."""
MAX_REQUEST_ID_CHARS = 512
"""Longest ``request_id`` (body) or ``X-Request-Id`` (header) a client may send: it is copied
into the engine request, every answer and every log line, so a 1 MiB one was echoed back
whole (issue 25). Refused with a 400 rather than cut, because a cut id no longer matches the
client's own records; vLLM 0.33 sets no bound. Ours are 36-45 characters."""

MAX_ENGINE_REQUEST_ID_CHARS = 2 * MAX_REQUEST_ID_CHARS
"""Longest ``request_id`` of an engine request or answer (``GenerateRequest``,
``GenerateResponse``): a client's id (at most `MAX_REQUEST_ID_CHARS`) with vLLM's prefixes
(``chatcmpl-``, ``generate-tokens-``) and suffixes (``-0-<8 hex>``, a router's own) fits
with room to spare; a derender echoed a 1 MiB one whole into every chunk."""

MAX_MESSAGES = 8192
"""Most chat ``messages``, Responses ``input`` items or Anthropic ``messages`` in one request
(each is rendered through the template before the prompt's length can be judged)."""


def check_nesting(value: Any, limit: int = MAX_NESTING) -> Any:
    """``value`` unchanged if its lists/objects nest at most ``limit`` deep (iterative: no
    recursion however deep the value).

    Raises:
        ValueError: nested deeper (pydantic reports it as a 400 naming the field).
    """
    if not isinstance(value, (list, dict)):  # most values checked are null: no list to build
        return value
    level = [value]
    for _ in range(limit + 1):
        level = [v for x in level if isinstance(x, (list, dict)) for v in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return value
    raise ValueError(f"nested deeper than {limit} levels (the limit for objects passed through)")


def check_stop_limits(stops: list[str] | tuple[str, ...]) -> None:
    """Raise ValueError (message fit for a 400) past `MAX_STOP_STRINGS` / `MAX_STOP_CHARS`."""
    if len(stops) > MAX_STOP_STRINGS:
        raise ValueError(f"At most {MAX_STOP_STRINGS} stop strings are allowed; got {len(stops)}.")
    longest = max((len(s) for s in stops), default=0)
    if longest > MAX_STOP_CHARS:
        raise ValueError(f"Stop strings may be at most {MAX_STOP_CHARS} characters long; got one of {longest}.")


def check_stops(value: str | list[str] | None) -> str | list[str] | None:
    """``value`` unchanged if its stop string(s) are within the limits (a pydantic validator)."""
    check_stop_limits([value] if isinstance(value, str) else (value or []))
    return value


def _logit_bias(value: dict[str, float] | None) -> dict[str, float] | None:
    """Keys as vLLM 0.33 reads them (``int(key)``; its render refuses keys ``int`` cannot
    read) and in the token-id range (its engine refuses ids outside the vocabulary, which
    render checks once the tokenizer is known: `logit_bias_ids`). Values are clamped to
    [-100, 100] when ``sampling_params`` is written, as vLLM does."""
    bad = [key for key in value or {} if _token_id(key) is None]
    if bad:
        raise ValueError(f"logit_bias keys must be token ids from 0 to {MAX_COUNT}; got {bad[:5]!r}")
    return value


_NUMBER = TypeAdapter(float)


def _numbers_first(value: Any) -> Any:
    """``value`` unchanged; for an object, ValueError at its first value pydantic's ``float``
    refuses. Run before pydantic checks every value: a dict has no fail-fast mode, and
    1,000,000 bad values made as many errors (2.8 s on the event loop)."""
    if isinstance(value, dict):
        for key, number in value.items():
            if type(number) not in (int, float):
                try:
                    _NUMBER.validate_python(number)
                except ValidationError:
                    raise ValueError(f"logit_bias[{key!r:.40}] must be a number") from None
    return value


def _token_id(key: str) -> int | None:
    try:
        token_id = int(key)
    except ValueError:  # includes ints past Python's 4300-digit conversion limit
        return None
    return token_id if 0 <= token_id <= MAX_COUNT else None


def logit_bias_ids(logit_bias: dict[str, float] | None) -> list[int]:
    """The token ids of a validated ``logit_bias`` (for the vocabulary check)."""
    return [int(key) for key in logit_bias or {}]


def check_batch(prompts: list, max_prompts: int = MAX_BATCH_PROMPTS,
                max_length: int = MAX_BATCH_PROMPT_LENGTH) -> None:
    """Raise ValueError past ``max_prompts`` prompts or ``max_length`` characters + token ids
    in all (``prompts``: text prompts or token-id lists; the serve flags
    ``--max-batch-prompts`` / ``--max-batch-prompt-length`` set the bounds)."""
    if len(prompts) > max_prompts:
        raise ValueError(f"At most {max_prompts} prompts are allowed in one request; got {len(prompts)} "
                         f"(--max-batch-prompts).")
    total = sum(len(p) for p in prompts)
    if total > max_length:
        raise ValueError(f"The prompts of one request may hold at most {max_length} characters and token ids "
                         f"in all; got {total} (--max-batch-prompt-length).")


def fail_fast_list(item: Any, **constraints: Any) -> Any:
    """A list type of ``item`` whose validation stops at its first bad entry (``constraints``:
    pydantic's ``Field`` list constraints, e.g. ``min_length``).

    Every list a client sends is one of these: pydantic otherwise checks every entry and
    builds one error per bad one, on the event loop, so 1,000,000 bad token ids held it
    for 1.5 s of validation and 3.7 s of error dicts (issue 25). One error names the field
    and the first bad index just as well."""
    return Annotated[list[item], Field(fail_fast=True, **constraints)]


RequestId = Annotated[str, Field(max_length=MAX_REQUEST_ID_CHARS)]
"""A client's ``request_id``: at most `MAX_REQUEST_ID_CHARS` characters."""

EngineRequestId = Annotated[str, Field(max_length=MAX_ENGINE_REQUEST_ID_CHARS)]
"""An engine request's or answer's ``request_id``: at most `MAX_ENGINE_REQUEST_ID_CHARS`."""

PassThrough = Annotated[dict[str, Any], AfterValidator(check_nesting)]
"""An object render or derender carries on without reading all of it (``kv_transfer_params``,
``vllm_xargs``, JSON schemas, template kwargs, ``metadata``): at most `MAX_NESTING` deep."""

StopStrings = Annotated[str | fail_fast_list(str) | None, AfterValidator(check_stops)]
"""``stop`` / ``stop_sequences``: at most `MAX_STOP_STRINGS` of at most `MAX_STOP_CHARS`."""

LogitBias = Annotated[dict[str, float] | None, BeforeValidator(_numbers_first), AfterValidator(_logit_bias)]
"""``logit_bias``: token-id keys (see `_logit_bias`)."""


def bounded_list(item: Any, limit: int = MAX_MESSAGES) -> Any:
    """A fail-fast list type of ``item`` with at most ``limit`` entries (pydantic's 400 names the bound)."""
    return fail_fast_list(item, max_length=limit)
