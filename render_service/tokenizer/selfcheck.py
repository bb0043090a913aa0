"""Load-time proofs of equality: a candidate encoder against the reference, on a corpus."""

from __future__ import annotations

from typing import Callable

from .backends import Backend

__all__ = ["first_mismatch", "backend_mismatch"]


def first_mismatch(texts: list[str], want: list[list[int]], got: list[list[int]]) -> str | None:
    """A one-line description of the first text whose ids differ, or None when all agree."""
    for text, a, b in zip(texts, want, got):
        if a != b:
            at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return (f"{text[:60]!r} (len {len(text)}): token {at} is {b[at:at + 3]} instead of "
                    f"{a[at:at + 3]} ({len(b)} vs {len(a)} tokens)")
    if len(want) != len(got):
        return f"{len(got)} results for {len(want)} texts"
    return None


def backend_mismatch(reference: Backend, candidate: Backend, corpus: list[str], n_post: int = 40) -> str | None:
    """Why ``candidate`` is not proven equal to ``reference`` on ``corpus``, or None.

    Compares plain encodings of every string, and post-processed encodings
    (``add_special_tokens=True``) of the first ``n_post``.
    """
    diff = first_mismatch(corpus, reference.encode_batch(corpus), candidate.encode_batch(corpus))
    if diff is None:
        post = corpus[:n_post]
        encode: Callable[[Backend], list[list[int]]] = lambda b: [b.encode(s, True) for s in post]  # noqa: E731
        diff = first_mismatch(post, encode(reference), encode(candidate))
    return None if diff is None else f"{candidate.name} differs from {reference.name} on {diff}"
