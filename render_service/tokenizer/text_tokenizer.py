"""`TextTokenizer`: the tokenizer interface render and derender call."""

from __future__ import annotations

from functools import cached_property

import tokenizers


class TextTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` with the calls render and derender need.

    Args:
        hf: the reference Rust tokenizer (from ``tokenizer.json`` or rebuilt from a GGUF).
        add_bos_token / add_eos_token: only for tokenizers whose post-processor does not
            already add them (Llama-style ``tokenizer_config.json`` flags).
    """

    def __init__(self, hf: tokenizers.Tokenizer) -> None:
        self.hf = hf
        self._special_ids = frozenset(
            i for i, tok in hf.get_added_tokens_decoder().items() if tok.special
        )

    @cached_property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included (``len(tokenizer)`` in transformers)."""
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` runs the post-processor (BOS/EOS)."""
        return self.hf.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``, as ``tokenizer.decode`` in transformers."""
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, id: int) -> str | None:
        """Raw vocabulary piece of ``id`` (e.g. ``"Ġworld"``), or None when out of range."""
        return self.hf.id_to_token(id)

    def token_to_id(self, token: str) -> int | None:
        """Id of a vocabulary piece or added token, or None."""
        return self.hf.token_to_id(token)

    def is_special(self, id: int) -> bool:
        """True for added tokens flagged special (they vanish under skip_special_tokens)."""
        return id in self._special_ids
