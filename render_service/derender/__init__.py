"""Derender: a tokens-only engine's output token ids → OpenAI chat/completions responses.

Module map (each one job, all sans-IO; request bodies are in ``render_service/wire/``):

- ``detokenize.py`` incremental detokenizer: ids → text, never a stray U+FFFD (sans-IO)
- ``plan.py``     per-request decisions: decode flags, stop rules, parser choice, logprob cut
- ``stops.py``    stop strings over streamed text with minimal hold-back
- ``choice.py``   one choice: ids → detokenizer → stops → parser → gates → `Delta`
- ``logprobs.py`` engine id logprobs → OpenAI token strings/bytes
- ``assemble.py`` `Delta` → OpenAI JSON (message, chunk delta, envelopes)
- ``state.py``    the versioned, HMAC-sealed, bounded ``stream_state``
- ``live.py``, ``known.py``  streams kept live; request fields validated once
- ``service.py``  `Derenderer`: body checks, non-streaming chat/completions, codec, live streams

Every door's stream (stateless, pipe, driver) is one `render_service.doors.session.StreamSession`;
the HTTP adapters are in ``render_service/http/derender_routes.py``; user docs in
``docs/derender.md``.
"""

from .service import Derenderer

__all__ = ["Derenderer"]
