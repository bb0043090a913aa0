"""`load_llama`: a ``llama_cpp.Llama`` with the weight-buffer layout chosen for this CPU; its
own module so that the self-check's child process (selfcheck.py) and the backend
(llama_backend.py) both use it without importing each other."""

from __future__ import annotations

import threading

_LOAD_LOCK = threading.Lock()


def load_llama(model_path: str, n_ctx: int, n_threads: int, extra_buffers: bool = True):
    """A ``llama_cpp.Llama`` for ``model_path``.

    ``extra_buffers`` is llama.cpp's ``llama_model_params.use_extra_bufts``: at load, llama.cpp
    moves weights into "extra" CPU buffer types (AMX tiles, repacked layouts). On a CPU that
    reports AMX, a llama.cpp built with native flags (pip's default for llama-cpp-python) puts
    them in the AMX buffer, whose matmul faults at ``ldtilecfg`` where the hypervisor does not
    enable the tile state; ``False`` keeps them in plain CPU buffers, which every build runs.
    `selfcheck.choose_buffers` decides which one this machine gets. ``Llama()`` does not take
    the field as an argument, so the default params it starts from are adjusted for the call.

    Raises:
        RuntimeError: llama-cpp-python is not installed.
        ValueError: llama.cpp cannot load the file.
    """
    try:
        import llama_cpp
        from llama_cpp import llama_cpp as lib
    except ImportError:
        raise RuntimeError("llama-cpp-python is not installed: pip install 'render-service[engine]'") from None
    default_params = lib.llama_model_default_params

    def params_with_layout():
        params = default_params()
        if any(name == "use_extra_bufts" for name, *_ in type(params)._fields_):
            params.use_extra_bufts = extra_buffers
        return params

    with _LOAD_LOCK:
        lib.llama_model_default_params = params_with_layout
        try:
            return llama_cpp.Llama(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads,
                                   n_threads_batch=n_threads, logits_all=False, verbose=False)
        finally:
            lib.llama_model_default_params = default_params
