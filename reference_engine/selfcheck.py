"""Start-up self-check of the llama.cpp backend: a short real prefill + decode, in a child process.

llama-cpp-python builds llama.cpp from source with the build machine's native instructions, and
machines here differ (AVX-512, AMX, none). A build that cannot run on this CPU does not fail at
import or load: it dies by a signal on the first prompt of more than one token. The case seen
here: on a CPU that reports AMX, llama.cpp moves the weights into its AMX "extra" buffer, whose
matmul faults at ``ldtilecfg`` (SIGSEGV) in a VM that does not enable the tile state.

So before the engine opens its port it runs exactly that — load the model, evaluate a
multi-token prompt, decode two tokens — in a child process, first with llama.cpp's extra buffer
types (its default: AMX, repacked weights), and, if that child dies by a signal, again with the
weights in plain CPU buffers. The engine serves with the first layout that survived, and refuses
to start with one line naming the signal when neither does. An engine never crashes on its first
request instead, and keeps llama.cpp's fast path wherever the CPU really runs it.

Child: ``python -m reference_engine.selfcheck MODEL_PATH N_THREADS extra|plain`` prints ``ok``.
A result is remembered (`choose_buffers_once`) under the cache directory, keyed by the llama.cpp
libraries, the model file and this CPU, so engines started again on the same machine skip the
~1.5 s child; any change of build, model or CPU runs it again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

PROMPT = b"The quick brown fox jumps over the lazy dog, and the self-check counts to ten."
DECODE_TOKENS = 2
TIMEOUT_S = 120.0
LAYOUTS = ("extra", "plain")
"""Weight layouts tried in order: llama.cpp's extra buffer types (``use_extra_bufts``), then none."""
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16")


class BackendCheckError(RuntimeError):
    """The llama.cpp backend cannot run on this machine; the message is one line saying why."""


def describe_exit(returncode: int) -> str:
    """``was killed by SIGSEGV (signal 11)`` for a negative Popen return code, else ``exited with code N``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by {name} (signal {-returncode})"
    return f"exited with code {returncode}"


def cpu_summary() -> str:
    """This CPU's model name and the instruction-set flags llama.cpp builds care about (Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU flags unknown"
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    present = [f for f in _CPU_FLAGS if f in flags] or ["no AVX2"]
    return f"{fields.get('model name', 'unknown CPU')}; {' '.join(present)}"


def _child_argv(model_path: str, n_threads: int, layout: str) -> list[str]:
    return [sys.executable, "-m", "reference_engine.selfcheck", model_path, str(n_threads), layout]


def choose_buffers(model_path: str, n_threads: int, *,
                   command: Callable[[str], list[str]] | None = None, timeout: float = TIMEOUT_S) -> tuple[str, str]:
    """Run the self-check child per layout in `LAYOUTS` order; return the first that survived.

    Args:
        model_path: the GGUF the engine is about to serve.
        n_threads: llama.cpp threads, as the engine will use them.
        command: layout → the child's argv (default: this module as a script); tests pass another.
        timeout: seconds before a child is killed and the check fails.
    Returns:
        ``(layout, note)``: ``"extra"`` or ``"plain"``, and why (empty when the first layout ran).
    Raises:
        BackendCheckError: no layout survived, the child failed without a signal (a model llama.cpp
            cannot load fails the same way in every layout), or it did not finish in time.
    """
    what = f"a {len(PROMPT.split())}-word prefill + {DECODE_TOKENS}-token decode of {Path(model_path).name}"
    deaths = []
    for layout in LAYOUTS:
        argv = command(layout) if command else _child_argv(model_path, n_threads, layout)
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BackendCheckError(f"llama.cpp self-check ({what}) did not finish in {timeout:.0f} s") from None
        if done.returncode == 0 and done.stdout.strip().endswith(b"ok"):
            note = "; ".join(f"with {d}" for d in deaths)
            return layout, (f"weights in {layout} CPU buffers: llama.cpp {note} on this CPU ({cpu_summary()})"
                            if deaths else "")
        if done.returncode >= 0:
            last = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise BackendCheckError(f"llama.cpp self-check ({what}) {describe_exit(done.returncode)}: {last[0][:300]}")
        deaths.append(f"{layout} buffers {describe_exit(done.returncode)}")
    raise BackendCheckError(
        f"llama.cpp {', and with '.join(deaths)} in the start-up self-check ({what}) on this CPU ({cpu_summary()}): "
        "the installed llama-cpp-python cannot run here. Rebuild it for portable x86-64: "
        "CMAKE_ARGS='-DGGML_NATIVE=OFF' pip install --force-reinstall --no-cache-dir llama-cpp-python")


def cache_dir() -> Path:
    """``$RENDER_SERVICE_CACHE_DIR``, else ``$XDG_CACHE_HOME/render-service``, else ``~/.cache/render-service``."""
    explicit = os.environ.get("RENDER_SERVICE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "render-service"


def _stamp(model_path: str) -> Path | None:
    """The file holding the chosen layout for this build, model and CPU; None if unknowable."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    key = hashlib.sha256(cpu_summary().encode())
    for root in spec.submodule_search_locations:
        for lib in sorted(Path(root).rglob("*.so*")):
            st = lib.stat()
            key.update(f"{lib}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    st = os.stat(model_path)
    key.update(f"{os.path.abspath(model_path)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return cache_dir() / f"llama-selfcheck-{key.hexdigest()[:24]}.txt"


def choose_buffers_once(model_path: str, n_threads: int) -> tuple[str, str]:
    """`choose_buffers`, remembered for this llama.cpp build, model file and CPU (a small file in
    `cache_dir`; an unwritable cache only means the check runs every time).

    Raises:
        BackendCheckError: as `choose_buffers` (a failure is never remembered).
    """
    stamp = _stamp(model_path)
    if stamp is not None:
        try:
            layout, _, note = stamp.read_text().partition("\n")
            if layout in LAYOUTS:
                return layout, note
        except OSError:
            pass
    layout, note = choose_buffers(model_path, n_threads)
    if stamp is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(f"{layout}\n{note}")
        except OSError:
            pass
    return layout, note


def _child(model_path: str, n_threads: int, layout: str) -> None:
    from .llama_load import load_llama

    llm = load_llama(model_path, n_ctx=128, n_threads=n_threads, extra_buffers=layout == "extra")
    tokens = llm.tokenize(PROMPT, add_bos=True)
    llm.eval(tokens)  # a multi-token batch: the path that faults on a build this CPU cannot run
    for _ in range(DECODE_TOKENS):
        llm.eval([llm.sample(temp=0.0)])
    print("ok", flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), sys.argv[3])
