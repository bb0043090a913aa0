"""Text tokenizers: one interface over the Rust `tokenizers` library and faster backends.

`TextTokenizer` is what render and derender use. Its `encode` must equal what
`transformers` gives for the same tokenizer (`apply_chat_template(..., tokenize=True)`
encodes the rendered prompt with ``add_special_tokens=False``).
"""

from __future__ import annotations

from .text_tokenizer import TextTokenizer

__all__ = ["TextTokenizer"]
