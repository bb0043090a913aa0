"""The wire: one vocabulary of request and response models for every hop, and SSE.

- ``openai.py``   client requests render takes: OpenAI chat / completions (+ vLLM extensions)
- ``generate.py`` the tokens-only generate protocol: `GenerateRequest`, `SamplingParams`,
                  `GenerateResponse`, the ``generate-tokens-`` id prefix, ``output_kind``
- ``derender.py`` derender request bodies (vLLM 0.33 shapes) and the pipe header
- ``sse.py``      the sans-IO SSE codec: `SSEReader` and the `event`/`DONE` writer
- ``limits.py``   the hardening limits as field types (stop strings, ``logit_bias``, nesting, list lengths)
- ``validate.py`` a body -> its model or one 400; `check_types` for the plain-dict parts

Models only: no HTTP, no model files. Field names and defaults follow vLLM 0.33
(``../shared/design/vllm-0.33-schemas/``).
"""
