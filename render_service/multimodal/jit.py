"""numba compilation for the pixel kernels, tolerant of where it runs.

``compile_kernel(fn)`` is ``numba.njit(nogil=True, cache=True)(fn)``: compiled once, loaded
from numba's on-disk cache in later processes, and free of the GIL while it runs. Where no
cache directory is writable (a read-only image), numba refuses ``cache=True``; the kernel is
then compiled per process instead of failing the import. Without numba it returns None and
callers use their NumPy path.
"""

from __future__ import annotations

from typing import Any, Callable

try:
    import numba
except ImportError:   # pragma: no cover - numba is a dependency; the NumPy paths stay exact without it
    numba = None


def compile_kernel(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """The numba-compiled ``fn`` (cached on disk when possible), or None without numba."""
    if numba is None:
        return None
    try:
        return numba.njit(nogil=True, cache=True)(fn)
    except RuntimeError:   # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(fn)
