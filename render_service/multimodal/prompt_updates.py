"""Token-level prompt updates as vLLM 0.33 applies them after replacing placeholders.

Most families need none: each placeholder token becomes its item's tokens and the range is
where they were written. A family whose replacement can merge with the tokens around it
(Gemma 3 writes ``\\n\\n`` around each image, and ``\\n`` + ``\\n\\n`` is one token) rewrites
the ids afterwards (`replace_token_matches`) and finds each item's tokens again in a
view of the ids where the merged tokens are split back (`find_placeholders`).

Source: vLLM 0.33 ``multimodal/processing/processor.py`` (``iter_token_matches``,
``replace_token_matches``, ``_iter_placeholders``) and ``model_executor/models/gemma3_mm.py``.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import bad_request

__all__ = ["check_non_overlapping", "find_placeholders", "replace_token_matches"]


def replace_token_matches(token_ids: list[int], match_ids: Sequence[int], new_ids: Sequence[int]) -> list[int]:
    """Each non-overlapping occurrence of ``match_ids`` (scanning left to right) replaced by ``new_ids``."""
    match = list(match_ids)
    n = len(match)
    if n == 0:
        return list(token_ids)
    out: list[int] = []
    i, last = 0, len(token_ids) - n
    while i <= last:
        if token_ids[i] == match[0] and token_ids[i:i + n] == match:
            out.extend(new_ids)
            i += n
        else:
            out.append(token_ids[i])
            i += 1
    out.extend(token_ids[i:])
    return out


def find_placeholders(token_ids: list[int], items: dict[str, list[list[int]]],
                      split: dict[int, Sequence[int]] | None = None) -> dict[str, list[dict]]:
    """``{modality: [{offset, length}]}``: where each item's tokens are found, in item order.

    The scan goes left to right; at each position the next unfound item of each modality is
    tried (modalities in ``items`` order), a match is taken whole and the scan resumes after
    it. ``split`` maps a token to the tokens it stands for (a merged newline); the scan runs
    over the split view and an offset is the index of the original token the match starts in,
    while the length stays the item's token count (so ranges can overlap, as in vLLM).
    """
    split = split or {}
    view: list[int] = []
    origin: list[int] = []
    for index, tok in enumerate(token_ids):
        parts = split.get(tok, (tok,))
        view.extend(parts)
        origin.extend([index] * len(parts))
    found: dict[str, list[dict]] = {m: [] for m in items}
    next_item = {m: 0 for m in items}
    pos, end = 0, len(view)
    while pos < end and any(next_item[m] < len(items[m]) for m in items):
        for modality, seqs in items.items():
            k = next_item[modality]
            if k >= len(seqs):
                continue
            seq = seqs[k]
            if seq and view[pos] == seq[0] and view[pos:pos + len(seq)] == seq:
                found[modality].append({"offset": origin[pos], "length": len(seq)})
                next_item[modality] = k + 1
                pos += len(seq)
                break
        else:
            pos += 1
    return found


def check_non_overlapping(placeholders: dict[str, list[dict]]) -> None:
    """400 with vLLM's message when two ranges overlap (vLLM validates its answer the same way)."""
    ranges = sorted((p["offset"], p["offset"] + p["length"]) for group in placeholders.values() for p in group)
    for (_, end), (start, _) in zip(ranges, ranges[1:]):
        if start < end:
            raise bad_request("mm_placeholders must be globally non-overlapping and sorted", "messages")
