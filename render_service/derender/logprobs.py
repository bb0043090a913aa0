"""Engine logprobs (token ids) → OpenAI logprobs (token strings and bytes), wire brief §3.5.

Each id is decoded on its own with specials kept; a SentencePiece leading ``▁`` is
restored as a space. A token that ends inside a UTF-8 character decodes to U+FFFD on its
own; it is repaired by decoding it after 1..4 preceding *sampled* ids (carried across
chunks as ``context``) and keeping what lies beyond the context's clean (U+FFFD-free) text,
so the token that completes a character shows the whole character. ``bytes`` are the
token's raw bytes when the tokenizer's pieces map to bytes (so a client can join partial
characters), else the UTF-8 of the string.
"""

from __future__ import annotations

from .detokenize import REPLACEMENT, token_bytes
from ..tokenizer import TextTokenizer
from ..wire.generate import GenLogprobs

CONTEXT = 4


class LogprobDecoder:
    """Token strings for logprobs; ``context`` is the last ≤4 sampled ids (plain data)."""

    def __init__(self, tokenizer: TextTokenizer, context: list[int] | None = None) -> None:
        self._tok = tokenizer
        self._bytes = token_bytes(tokenizer)
        self.context = list(context or [])[-CONTEXT:]

    def token(self, token_id: int) -> str:
        """The display string of ``token_id`` at the current position."""
        decode = self._tok.decode
        text = decode([token_id], skip_special_tokens=False)
        piece = self._tok.id_to_token(token_id) or ""
        if piece.startswith("\u2581") and not text.startswith(" "):
            text = " " + text
        if text.endswith(REPLACEMENT):
            for k in range(1, len(self.context) + 1):
                ctx = self.context[-k:]
                full = decode(ctx + [token_id], skip_special_tokens=False)
                pre = decode(ctx, skip_special_tokens=False).rstrip(REPLACEMENT)  # the context's clean part
                if full.startswith(pre) and not full.endswith(REPLACEMENT):
                    return full[len(pre):]
        return text

    def raw(self, token_id: int, text: str) -> list[int]:
        b = self._bytes.of(token_id)
        return list(b if b is not None else text.encode())

    def advance(self, token_id: int) -> None:
        self.context = (self.context + [token_id])[-CONTEXT:]


def chat_logprobs(dec: LogprobDecoder, lp: GenLogprobs | None, top: int | None) -> dict | None:
    """OpenAI chat ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}], "refusal": None}``.
    ``top`` = candidates kept per position in engine order (None = all)."""
    if lp is None:
        return None
    content = []
    for pos in lp.content:
        cands = pos.top_logprobs or []
        if top is not None:
            cands = cands[:top]
        tops = []
        for c in cands:
            s = dec.token(c.token_id)
            tops.append({"token": s, "logprob": c.logprob, "bytes": dec.raw(c.token_id, s)})
        s = dec.token(pos.token_id)
        content.append({"token": s, "logprob": pos.logprob, "bytes": dec.raw(pos.token_id, s), "top_logprobs": tops})
        dec.advance(pos.token_id)
    return {"content": content, "refusal": None}


def completion_logprobs(dec: LogprobDecoder, lp: GenLogprobs | None, top: int | None, text_offset: int) -> tuple[dict | None, int]:
    """OpenAI completions ``logprobs`` (parallel ``tokens``, ``token_logprobs``,
    ``top_logprobs`` (dict or None), ``text_offset``); returns it and the next offset."""
    if lp is None:
        return None, text_offset
    out: dict = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    for pos in lp.content:
        cands = pos.top_logprobs
        if cands is not None and top is not None:
            cands = cands[:top]
        s = dec.token(pos.token_id)
        out["tokens"].append(s)
        out["token_logprobs"].append(pos.logprob)
        out["top_logprobs"].append({dec.token(c.token_id): c.logprob for c in cands} if cands else None)
        out["text_offset"].append(text_offset)
        text_offset += len(s)
        dec.advance(pos.token_id)
    return out, text_offset


def logprob_ids(lp: GenLogprobs | None) -> list[int]:
    """Every id mentioned in ``lp`` (for the vocabulary check)."""
    if lp is None:
        return []
    ids = []
    for pos in lp.content:
        ids.append(pos.token_id)
        ids.extend(c.token_id for c in pos.top_logprobs or [])
    return ids
