"""Turn-to-turn continuity: does turn N+1's prompt extend what the engine holds after turn N?

After turn N an engine holds the KV of ``prompt_N + output_N`` (the output as the model
generated it, reasoning included). Turn N+1's prompt is re-rendered from the messages by
the chat template, and it starts with that held sequence only when the template writes
the past turns exactly as they were generated and tokenized. When it does not, a KV cache
reused past the first token where the two differ makes the engine attend to text the
prompt no longer holds: **wrong output, not just slower** (the reason this module exists).

`check` returns the longest common prefix, in tokens, of the held sequence and the new
prompt, and — when the prompt does not extend the held sequence — why it stops there.
The reason is decided by diffing the two *texts* (both decoded with special tokens) at
the first character where they differ, in this order:

``retokenised``
    The texts agree past the diverging token: the same characters were split into other
    tokens (a BPE merge across the end of the answer and the template's next text).
``reasoning_dropped``
    The held text has a reasoning block (``<think>…</think>`` and its trailing whitespace)
    at that point and the new prompt has none where it starts: the template drops past
    reasoning (Qwen3 drops it for every assistant turn before the last user query,
    including the empty ``<think>\\n\\n</think>`` of a non-thinking turn). A block both
    have but write differently falls to the reasons below (edited or re-rendered).
``tool_arguments_reserialised``
    Both texts hold a JSON value starting before that point that parses to the same data
    but is written differently: the template re-serialised tool-call arguments
    (``{"a":1}`` → ``{"a": 1}``; Llama 3.x writes ``arguments | tojson``).
``system_changed``
    The point lies inside the system message of the new prompt.
``message_edited``
    The point lies inside what was turn N's prompt: an earlier message is not what it was.
``answer_rerendered``
    The point lies inside turn N's output, for none of the reasons above: the template
    writes the answer differently from the tokens the model generated (stripped
    whitespace, a normalised tool-call block) or the client changed the answer.
``prompt_shorter``
    Not a divergence: the new prompt is a prefix of the held sequence (a retry of the same
    turn). Everything but the prompt's last token may be reused.

Pure: token ids and a ``decode`` callable in, a `Continuity` value out; no HTTP, no state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Sequence

REASONS = (
    "retokenised", "reasoning_dropped", "tool_arguments_reserialised", "system_changed", "message_edited",
    "answer_rerendered", "prompt_shorter",
)

# Reasoning block markers as models write them (parsers.reasoning holds the full per-family table;
# these are the families whose templates drop or rewrite past reasoning).
REASONING_MARKERS: tuple[tuple[str, str], ...] = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"))

# How far back from the divergence a JSON value may start (a tool call's arguments object).
_JSON_LOOKBACK_CHARS = 4096

Decode = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class HeldSequence:
    """What an engine holds after turn N: the prompt it was given and the ids it generated.

    ``output_token_ids`` include the final stop token when the model produced one (the
    engine sampled it; whether its KV was computed is the engine's business).
    """

    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]

    @property
    def token_ids(self) -> list[int]:
        """``prompt_token_ids + output_token_ids``."""
        return [*self.prompt_token_ids, *self.output_token_ids]


@dataclass(frozen=True)
class Continuity:
    """The continuity figure of one turn.

    ``held_tokens``: length of the held sequence; ``prompt_tokens``: length of the new
    prompt; ``common_prefix_tokens``: their longest common prefix, in tokens (KV for
    positions ``[0, common_prefix_tokens)`` is valid for the new prompt, never beyond);
    ``reason``: one of `REASONS`, or None when the prompt extends the held sequence.
    ``diverged_at_char``: offset in the new prompt's decoded text where the texts first
    differ (None when the prompt extends the held sequence or is a prefix of it).
    """

    held_tokens: int
    prompt_tokens: int
    common_prefix_tokens: int
    reason: str | None
    diverged_at_char: int | None = None

    @property
    def extends(self) -> bool:
        """True when the new prompt starts with the whole held sequence."""
        return self.common_prefix_tokens == self.held_tokens

    @property
    def fraction(self) -> float:
        """``common_prefix_tokens / held_tokens`` (1.0 for an empty held sequence)."""
        return self.common_prefix_tokens / self.held_tokens if self.held_tokens else 1.0

    def as_dict(self) -> dict:
        """The render response's ``continuity`` field (README, "Agent loops")."""
        return {
            "held_tokens": self.held_tokens,
            "prompt_tokens": self.prompt_tokens,
            "common_prefix_tokens": self.common_prefix_tokens,
            "extends": self.extends,
            "reason": self.reason,
            "diverged_at_char": self.diverged_at_char,
        }


def common_prefix(a: Sequence, b: Sequence) -> int:
    """Length of the longest common prefix of two sequences (token ids or strings)."""
    n = min(len(a), len(b))
    i = 0
    # Compare in blocks first: prompts share long prefixes, and slices compare in C.
    step = 256
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def check(
    held: HeldSequence,
    prompt_token_ids: Sequence[int],
    decode: Decode,
    *,
    system_end_char: int | None = None,
    reasoning_markers: tuple[tuple[str, str], ...] = REASONING_MARKERS,
) -> Continuity:
    """Compare turn N+1's prompt with the sequence the engine holds after turn N.

    Args:
        held: turn N's prompt and output ids.
        prompt_token_ids: turn N+1's prompt.
        decode: ids → text with special tokens kept (``tokenizer.decode(ids,
            skip_special_tokens=False)``).
        system_end_char: where the system message ends in the decoded new prompt (see
            `system_end`); None when there is no system message.
        reasoning_markers: (start, end) pairs of reasoning blocks.

    Returns:
        The `Continuity` figure; ``reason`` as in the module docstring.
    """
    held_ids = list(held.token_ids)
    prompt = list(prompt_token_ids)
    k = common_prefix(held_ids, prompt)
    base = Continuity(len(held_ids), len(prompt), k, None)
    if k == len(held_ids):
        return base
    if k == len(prompt):
        return Continuity(len(held_ids), len(prompt), k, "prompt_shorter")

    held_text, new_text = decode(held_ids), decode(prompt)
    at_token = len(decode(held_ids[:k]))
    at = common_prefix(held_text, new_text)
    reason = _reason(
        held_text, new_text, at, at_token,
        held_token_end=len(decode(held_ids[: k + 1])),
        prompt_end=len(decode(list(held.prompt_token_ids))),
        system_end_char=system_end_char, markers=reasoning_markers,
    )
    return Continuity(len(held_ids), len(prompt), k, reason, at)


def _reason(held: str, new: str, at: int, at_token: int, *, held_token_end: int, prompt_end: int,
            system_end_char: int | None, markers: tuple[tuple[str, str], ...]) -> str:
    if at > at_token and at >= held_token_end:
        return "retokenised"
    block = _reasoning_block_at(held, at, markers)
    if block is not None and not new.startswith(block, _block_start(held, at, block)):
        return "reasoning_dropped"
    if _json_reserialised(held, new, at):
        return "tool_arguments_reserialised"
    if system_end_char is not None and at < system_end_char:
        return "system_changed"
    if at < prompt_end:
        return "message_edited"
    return "answer_rerendered"


def _reasoning_block_at(text: str, at: int, markers: tuple[tuple[str, str], ...]) -> str | None:
    """The start marker of the reasoning block of ``text`` that ``at`` lies in — from its
    start marker to the end of the whitespace after its end marker (an unclosed block runs
    to the end) — or None."""
    for start, end in markers:
        s = text.find(start)
        while s != -1 and s <= at:
            e = text.find(end, s + len(start))
            stop = len(text) if e == -1 else e + len(end)
            while stop < len(text) and text[stop] in " \t\r\n":
                stop += 1
            if at < stop or e == -1:
                return start
            s = text.find(start, stop)
    return None


def _block_start(text: str, at: int, marker: str) -> int:
    """Where the block holding ``at`` starts (the last ``marker`` at or before it)."""
    return text.rfind(marker, 0, at + len(marker))


def _json_reserialised(held: str, new: str, at: int) -> bool:
    """True when a JSON value starts at the same offset before ``at`` in both texts, covers
    ``at`` in both, and decodes to equal data from differently written text."""
    decoder = json.JSONDecoder()
    lo = max(0, at - _JSON_LOOKBACK_CHARS)
    j = held.rfind("{", lo, at + 1)
    while j != -1:
        try:
            a, a_end = decoder.raw_decode(held, j)
            b, b_end = decoder.raw_decode(new, j)
        except ValueError:
            pass
        else:
            if a_end > at and b_end > at and a == b and held[j:a_end] != new[j:b_end]:
                return True
        j = held.rfind("{", lo, j)
    return False


def system_end(render_first: Callable[[], str], prompt_text: str) -> int:
    """Offset in ``prompt_text`` where the system message ends: the common prefix of the
    prompt and the render of the first message alone (``render_first()``)."""
    return common_prefix(render_first(), prompt_text)
