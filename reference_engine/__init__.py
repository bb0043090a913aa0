"""Reference tokens-only engine: a test and demo tool, not a production engine.

It speaks the vLLM 0.33 tokens-only generate protocol (wire brief §1.2, §1.8, §1.9) so the
driver, derender and parser tests can run against a real process on loopback:

* ``llama_backend`` runs a GGUF with llama.cpp (default SmolLM2-135M-Instruct, ~17 ms/token
  on one CPU core), one model per process, requests serialised;
* ``scripted`` replays token lists from a JSON file (format in its docstring), no model;
* ``kv`` implements the prefill→decode KV handoff (§6.1) as an HTTP pull with leases;
* ``generation`` is the per-request loop (stop rules, abort checks), ``checks`` what this
  engine accepts (wire models: `render_service.wire.generate`), ``app`` the starlette routes, ``cli`` the flags.

Start one with ``render-service engine --role prefill|decode|both --port P`` or
``python -m reference_engine ...``.
"""

from .app import EngineConfig, create_app

__all__ = ["EngineConfig", "create_app"]
