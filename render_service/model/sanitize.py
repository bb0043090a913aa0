"""Opt-in: control-token text inside messages stays text (``--content-special-tokens text``).

By default a user who types ``<|im_end|>`` gets the real control token, exactly as
`transformers` `apply_chat_template(tokenize=True)` does (the parity oracle), which lets
untrusted content close its own turn and forge a system turn (case 04). In ``text`` mode
only the control tokens the template itself writes are encoded as tokens; the same text
inside messages, tools, documents or template kwargs encodes as plain text.

The rule is transformers 5's ``sanitize_control_tokens=True`` (read for behaviour, not
copied): control tokens are the special added tokens plus added tokens that appear in the
template's literal text; user strings get private-use markers around each control token;
after rendering, marked pieces are encoded with added-token matching off.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from typing import Any

import tokenizers

from .templates import ChatTemplate

_START, _END = "\U000f0000", "\U000f0001"


class ControlTokenSanitizer:
    """Marks control tokens in user data and encodes a marked render.

    Args:
        hf: the model's Rust tokenizer.
        template: the chat template (its literal text decides which non-special added
            tokens count as control tokens).
    """

    def __init__(self, hf: tokenizers.Tokenizer, template: ChatTemplate) -> None:
        self.hf = hf
        literal = template.literal_text
        added = hf.get_added_tokens_decoder().values()
        control = {t.content for t in added if t.special or (t.content in literal and not t.content.isspace())}
        longest_first = sorted(control, key=len, reverse=True)
        self._control_re = re.compile("|".join(map(re.escape, longest_first)) or "(?!)")
        all_added = sorted({t.content for t in added}, key=len, reverse=True)
        inner = "|".join(map(re.escape, all_added)) or "(?!)"
        self._markers_re = re.compile(f"{_START}({inner}){_END}|[{_START}{_END}]")

    @cached_property
    def _plain(self) -> tokenizers.Tokenizer:
        """A copy that matches no added token at all. transformers' own rule splits only
        *special* ones, then refuses (ValueError) a user who types Qwen3's non-special
        ``<think>``; we encode it as the text it is instead."""
        spec = json.loads(self.hf.to_str())
        for token in spec.get("added_tokens", []):
            token["special"] = True
        plain = tokenizers.Tokenizer.from_str(json.dumps(spec))
        plain.encode_special_tokens = True
        return plain

    def mark(self, obj: Any) -> Any:
        """A copy of ``obj`` (str, or lists/dicts of them) with control tokens wrapped in markers."""
        if isinstance(obj, str):
            obj = obj.replace(_START, "").replace(_END, "")
            return self._control_re.sub(f"{_START}\\g<0>{_END}", obj)
        if isinstance(obj, dict):
            return {k: self.mark(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.mark(v) for v in obj]
        return obj

    def encode(self, rendered: str) -> list[int]:
        """Token ids of a render made from marked data.

        Raises:
            ValueError: the tokenizer produces a control token from its plain text, so it
            cannot be sanitised (the caller turns this into a 400).
        """
        pieces = self._markers_re.split(rendered)
        newline = self.hf.encode("\n", add_special_tokens=False).ids
        ids = self.hf.encode(pieces[0], add_special_tokens=False).ids
        for i, piece in enumerate(pieces[1:], start=1):
            if not piece:
                continue
            as_text = i % 2 == 1
            encoder = self._plain if as_text else self.hf
            piece_ids = encoder.encode("\n" + piece, add_special_tokens=False).ids
            if piece_ids[: len(newline)] == newline:
                piece_ids = piece_ids[len(newline):]
            else:
                piece_ids = encoder.encode(piece, add_special_tokens=False).ids
            if as_text and self.hf.token_to_id(piece) in piece_ids:
                raise ValueError(f"cannot sanitise {piece!r}: the tokenizer produces it from plain text")
            ids += piece_ids
        return ids
