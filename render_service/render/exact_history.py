"""Token-exact history: turn N+1's prompt = the exact tokens of turn N + the new messages.

A chat template re-renders the whole conversation on every turn, and the result starts
with what the engine holds after turn N only when the template writes past turns exactly
as the model generated them (see `render_service.continuity`). Token-exact history makes
every prompt extend the previous one token for token, which is what RL frameworks (the
trained-on tokens are the sampled ones) and agents that want stable prefix caches need:

    prompt_{N+1} = prompt_N + output_N + encode(close + rendered new messages)

- ``prompt_N``, ``output_N``: the ids the caller (or the driver) held after turn N.
- *new messages*: those after the last assistant message of the request, rendered by the
  template after a stub exchange (``user``, ``assistant``) so that everything the template
  writes for them — role headers, tool-result grouping, the generation prompt — is its
  own text; the stub is cut off right after the assistant's text.
- *close*: what the template writes after an assistant message's text that the output
  did not already end with (``<|im_end|>\\n`` minus the ``<|im_end|>`` the model sampled;
  the whole closing text when the output was cut by ``length``).

Where this differs from the template alone (documented in the README, "Token-exact history"):
past reasoning stays (Qwen3's template drops it), tool-call arguments and answers stay as
generated (templates may re-serialise or strip them), and the tokens at each join are the
ones sampled, not a re-tokenisation of the text. Any edit of an earlier message by the
client is ignored — the held tokens are the history.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..continuity import HeldSequence

# Stub exchange the new messages are rendered after. Plain words: no template treats them specially.
STUB_USER = "stub question"
STUB_ANSWER = "stub answer"

Render = Callable[[list[dict], bool], str]
"""``render(messages, add_generation_prompt) -> prompt text`` (the request's template, tools and kwargs)."""


class HistoryError(ValueError):
    """The request cannot be rendered token-exactly (message says why; a 400 for the client)."""


def new_messages(messages: Sequence[dict]) -> list[dict]:
    """The messages after the last assistant message.

    Raises:
        HistoryError: there is no assistant message, or nothing follows the last one.
    """
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is None:
        raise HistoryError("token-exact history needs the previous assistant turn in `messages`.")
    tail = list(messages[last + 1 :])
    if not tail:
        raise HistoryError("token-exact history needs at least one message after the last assistant turn.")
    return tail


def tail_text(render: Render, added: list[dict], add_generation_prompt: bool) -> str:
    """What the template writes after an assistant message's text when ``added`` follows:
    the closing text of the assistant turn, then ``added`` (and the generation prompt when
    asked). Rendered after a stub exchange that is cut off.

    Raises:
        HistoryError: the template does not write the assistant's content verbatim.
    """
    stub = [{"role": "user", "content": STUB_USER}, {"role": "assistant", "content": STUB_ANSWER}]
    full = render(stub + added, add_generation_prompt)
    at = full.find(STUB_ANSWER, full.find(STUB_USER) + len(STUB_USER))
    if at < 0:
        raise HistoryError("this chat template does not write the assistant's content verbatim; "
                           "token-exact history is not available for it.")
    return full[at + len(STUB_ANSWER) :]


def remaining_close(output_text: str, close: str) -> str:
    """The part of ``close`` (`tail_text`) the output did not already write: the longest
    head of ``close`` that the output ends with is dropped (``"<|im_end|>\\n…"`` after an
    output ending in ``<|im_end|>`` → ``"\\n…"``; all of it after an output cut by length)."""
    for j in range(len(close), 0, -1):
        if output_text.endswith(close[:j]):
            return close[j:]
    return close


def exact_prompt(
    held: HeldSequence,
    messages: Sequence[dict],
    render: Render,
    encode: Callable[[str], list[int]],
    decode: Callable[[Sequence[int]], str],
    add_generation_prompt: bool = True,
) -> tuple[list[int], str]:
    """Turn N+1's prompt ids, token-exact, and the text of the part appended to the held ids.

    Args:
        held: turn N's prompt and output ids.
        messages: turn N+1's messages (already prepared for the template).
        render: see `Render`.
        encode: text → ids without special-token additions (BOS is already in ``held``).
        decode: ids → text with special tokens.

    Raises:
        HistoryError: see `new_messages` and `tail_text`.
    """
    tail = tail_text(render, new_messages(messages), add_generation_prompt)
    appended = remaining_close(decode(list(held.output_token_ids)), tail)
    return [*held.token_ids, *encode(appended)], appended
