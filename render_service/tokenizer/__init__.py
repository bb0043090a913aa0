"""Text tokenizers: one interface over the Rust `tokenizers` library and faster backends.

`TextTokenizer` is what render and derender use. Its `encode` must equal what
`transformers` gives for the same tokenizer (`apply_chat_template(..., tokenize=True)`
encodes the rendered prompt with ``add_special_tokens=False``).

The model loader calls ``TextTokenizer.from_hf(hf, backend="auto"|"hf"|"fast", name=...)``.
Modules: `backends` (HF reference, `fastokens`), `selfcheck` (load-time equality proof),
`segments` (exact segment splitter, segment LRU cache, prefix cache for agent loops), `ids_json`
(id lists that carry their JSON encoding), `corpus` (strings that tell encoders apart).
"""

from __future__ import annotations

from .text_tokenizer import BACKEND_CHOICES, DEFAULT_SEGMENT_CACHE_BYTES, TextTokenizer

__all__ = ["BACKEND_CHOICES", "DEFAULT_SEGMENT_CACHE_BYTES", "TextTokenizer"]
