"""Incremental detokenization: token ids arrive a few at a time, text leaves as soon as it is final.

Theory of operation
-------------------
The state is a short window of ids plus ``read``, the number of window ids whose text has
already been emitted. ``push`` appends the new ids and emits
``decode(window)[len(decode(window[:read])):]``: decoding against a little left context
keeps tokenizer rules that depend on neighbours (SentencePiece/Metaspace drops the leading
space of the *first* token only) from changing the text. After emitting, the window is cut
back to a few ids of context, so the state never grows with the output (vLLM's bounded
prefix/read-offset variant, wire brief §4.1; HF ``tokenizers`` ``DecodeStream`` works alike).

Two rules make it exact where the length-based variants of peer systems are not
(shared case 32):

* **Unfinished UTF-8 is held, a real U+FFFD is not.** Whether the pending ids end inside a
  multi-byte character is decided from the token *bytes* (byte-level BPE pieces mapped
  through the GPT-2 byte table, ``<0xNN>`` byte-fallback pieces, plain UTF-8 otherwise),
  never from a trailing U+FFFD in the decoded text, so a complete U+FFFD the model wrote
  is emitted at once and a half character never is. Tokenizers whose pieces cannot be
  mapped to bytes fall back to "hold while the text ends in U+FFFD".
* **The context cut lands on a character boundary**: the kept window never starts with a
  UTF-8 continuation byte, so byte-fallback decoders (which turn an invalid run into one
  U+FFFD per byte) see the same runs as a full decode.

Concatenated output == ``decode(prompt_tail + ids)[len(decode(prompt_tail)):]`` which, with
no prompt tail, is ``tokenizer.decode(ids, skip_special_tokens=…)``. One known exception:
under a ByteFallback decoder an *invalid* byte run becomes U+FFFD for every byte of the run
(valid ones too), which an incremental decoder cannot know in advance; we emit such a run
per character instead. Valid UTF-8 is exact.
"""

from __future__ import annotations

import re
import weakref
from typing import Any

import orjson

from ..tokenizer import TextTokenizer

REPLACEMENT = "\ufffd"
CONTEXT_IDS = 4      # ids of left context kept after each emit (vLLM keeps 5 token strings)
PROMPT_TAIL_IDS = 7  # prompt ids that seed the window (vLLM: 5 + 2 for specials, §4.3)

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` table used by ByteLevel pre-tokenizers."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


UNICODE_TO_BYTE = _gpt2_unicode_to_byte()


class TokenBytes:
    """Raw UTF-8 bytes of single tokens, read from the tokenizer's decoder configuration.

    ``of(id)`` gives the bytes the token contributes to the decoded text (an added token:
    its content; a ByteLevel piece: the GPT-2 byte table; ``<0xNN>`` under a ByteFallback
    decoder: that byte; otherwise the piece with the Metaspace ``▁`` as a space), or None
    when this tokenizer's pieces cannot be mapped (unknown decoder) or the id is unknown.
    One instance per tokenizer, shared (see `token_bytes`); the cache is bounded by the vocab.
    """

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tok = tokenizer
        decoder = tokenizer.hf.decoder
        spec = orjson.loads(decoder.__getstate__()) if decoder is not None else {}
        kinds = _decoder_kinds(spec)
        self.byte_level = "ByteLevel" in kinds
        self.byte_fallback = "ByteFallback" in kinds
        self.known = self.byte_level or self.byte_fallback or bool(kinds & {"Metaspace", "Replace", "Fuse", "Strip"})
        # a lone ByteLevel decoder maps each piece to its bytes and decodes their concatenation:
        # the text of ids whose bytes are all ASCII is their pieces' ASCII joined (`ascii_text`)
        self.plain_byte_level = kinds == {"ByteLevel"}
        self._added = {i: t.content for i, t in tokenizer.hf.get_added_tokens_decoder().items()}
        self._cache: dict[int, bytes | None] = {}
        self._ascii: dict[int, str | None] = {}

    def of(self, token_id: int) -> bytes | None:
        """Bytes of ``token_id`` (see class doc)."""
        try:
            return self._cache[token_id]
        except KeyError:
            pass
        value = self._compute(token_id)
        self._cache[token_id] = value
        return value

    def ascii_text(self, token_id: int) -> str | None:
        """The text of ``token_id`` when the tokenizer's decoder is a lone ByteLevel and the
        token is no added token and its bytes are all ASCII (then ``decode`` of such ids is
        their texts joined, whatever ``skip_special_tokens``), else None."""
        try:
            return self._ascii[token_id]
        except KeyError:
            pass
        value = None
        if self.plain_byte_level and token_id not in self._added:
            b = self.of(token_id)
            if b is not None and b.isascii():
                value = b.decode("ascii")
        self._ascii[token_id] = value
        return value

    def _compute(self, token_id: int) -> bytes | None:
        if token_id in self._added:
            return self._added[token_id].encode()
        piece = self._tok.id_to_token(token_id)
        if piece is None or not self.known:
            return None
        if self.byte_level:
            try:
                return bytes(UNICODE_TO_BYTE[c] for c in piece)
            except KeyError:
                return piece.encode()
        if self.byte_fallback:
            m = _BYTE_PIECE.fullmatch(piece)
            if m:
                return bytes([int(m.group(1), 16)])
        return piece.replace("\u2581", " ").encode()


def _decoder_kinds(spec: Any) -> set[str]:
    """All decoder ``type`` names in a (possibly nested ``Sequence``) decoder JSON."""
    kinds: set[str] = set()
    if isinstance(spec, dict):
        if isinstance(spec.get("type"), str):
            kinds.add(spec["type"])
        for d in spec.get("decoders") or []:
            kinds |= _decoder_kinds(d)
    return kinds


_TOKEN_BYTES: "weakref.WeakKeyDictionary[TextTokenizer, TokenBytes]" = weakref.WeakKeyDictionary()


def token_bytes(tokenizer: TextTokenizer) -> TokenBytes:
    """The shared `TokenBytes` of ``tokenizer`` (built once; reading the decoder JSON is cheap)."""
    tb = _TOKEN_BYTES.get(tokenizer)
    if tb is None:
        tb = _TOKEN_BYTES[tokenizer] = TokenBytes(tokenizer)
    return tb


def _utf8_incomplete(tail: bytes) -> bool:
    """True when ``tail`` ends inside a multi-byte UTF-8 sequence that more bytes could finish."""
    for back in range(1, min(4, len(tail)) + 1):
        b = tail[-back]
        if b & 0xC0 == 0x80:          # continuation byte: keep looking for the lead
            continue
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return need > back
    return False


class IncrementalDetokenizer:
    """Token ids in, final text out; sans-IO, state is ``{"ids": [int], "read": int}``.

    Args:
        tokenizer: the model's `TextTokenizer`.
        skip_special_tokens: as ``tokenizer.decode``; False whenever a parser needs markers.
        prompt_tail: the last prompt ids (any number; the last 7 are used) so the first
            output token decodes in context (Metaspace leading space, wire brief §4.3).

    The window holds at most ``CONTEXT_IDS`` ids (plus up to 3 more to reach a character
    boundary) plus the ids pushed but not yet emitted (an unfinished character: ≤ 3 bytes).
    """

    def __init__(self, tokenizer: TextTokenizer, skip_special_tokens: bool, prompt_tail: list[int] | None = None) -> None:
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._bytes = token_bytes(tokenizer)
        tail = list(prompt_tail[-PROMPT_TAIL_IDS:]) if prompt_tail else []
        while tail and self._starts_inside_char(tail[0]):
            del tail[0]
        self.ids: list[int] = tail
        self.read = len(tail)

    # -- state -----------------------------------------------------------------------
    def export_state(self) -> dict:
        """Plain JSON-able state: ``{"ids": window ids, "read": ids already emitted}``."""
        return {"ids": list(self.ids), "read": self.read}

    @classmethod
    def restore(cls, tokenizer: TextTokenizer, skip_special_tokens: bool, state: dict) -> "IncrementalDetokenizer":
        """Rebuild from `export_state` output.

        Raises:
            ValueError: malformed state (wrong types, ``read`` outside the window, ids
            outside the vocabulary).
        """
        ids, read = state.get("ids"), state.get("read")
        if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < tokenizer.vocab_size for i in ids):
            raise ValueError("detokenizer state: ids must be in-vocabulary token ids")
        if type(read) is not int or not 0 <= read <= len(ids):
            raise ValueError("detokenizer state: read offset outside the window")
        self = cls(tokenizer, skip_special_tokens, None)
        self.ids, self.read = list(ids), read
        return self

    # -- work ------------------------------------------------------------------------
    def push(self, ids: list[int]) -> str:
        """Append ``ids``; return the text that became final (may be ``""``)."""
        if not ids:
            return ""
        self.ids.extend(ids)
        if self._pending_incomplete():
            return ""
        return self._emit()

    def flush(self) -> str:
        """End of output: emit what is pending even if it ends inside a character (as
        ``decode`` would, with U+FFFD)."""
        return self._emit() if self.read < len(self.ids) else ""

    def _emit(self) -> str:
        texts = [self._bytes.ascii_text(i) for i in self.ids] if self._bytes.plain_byte_level else None
        if texts is not None and all(texts):  # ASCII pieces, no added token: what decode gives (TokenBytes.ascii_text)
            text = "".join(texts[self.read:])
        else:
            decode = self._tok.decode
            prefix = decode(self.ids[: self.read], skip_special_tokens=self._skip) if self.read else ""
            full = decode(self.ids, skip_special_tokens=self._skip)
            # Also when a decoder rule rewrote the context (``full`` does not start with
            # ``prefix``): emitting past ``len(prefix)`` never repeats text.
            text = full[len(prefix):]
        cut = self._boundary(self.ids, max(0, len(self.ids) - CONTEXT_IDS))
        del self.ids[:cut]
        self.read = len(self.ids)
        return text

    def _pending_incomplete(self) -> bool:
        """Do the unemitted ids end inside a UTF-8 character?"""
        if not self._bytes.known:
            pending = self._tok.decode(self.ids[self.read:], skip_special_tokens=self._skip)
            return pending.endswith(REPLACEMENT)
        last = self.ids[-1]
        if not (self._skip and self._tok.is_special(last)):
            b = self._bytes.of(last)
            if b and b[-1] < 0x80:  # ends in ASCII (most tokens): nothing unfinished, as _utf8_incomplete finds
                return False
        tail = b""
        for i in range(len(self.ids) - 1, self.read - 1, -1):
            tid = self.ids[i]
            if self._skip and self._tok.is_special(tid):
                continue
            b = self._bytes.of(tid) or b""
            tail = b + tail
            if len(tail) >= 4:
                break
        return _utf8_incomplete(tail)

    def _boundary(self, ids: list[int], start: int) -> int:
        """Move a cut point left (at most 3 ids) until the kept window starts a character."""
        if not self._bytes.known:
            return start
        cut = start
        while cut > 0 and start - cut < 3 and cut < len(ids) and self._starts_inside_char(ids[cut]):
            cut -= 1
        return cut

    def _starts_inside_char(self, token_id: int) -> bool:
        b = self._bytes.of(token_id)
        return bool(b) and b[0] & 0xC0 == 0x80
