"""Exact segment cache: split a prompt at added tokens, cache each text segment's ids.

Why it is exact. Hugging Face ``tokenizers`` encodes a string in this order
(``tokenizers/src/tokenizer/added_vocabulary.rs``, ``extract_and_normalize``):

1. find the *non-normalized* added tokens in the raw text with one leftmost-longest
   Aho-Corasick scan; a ``single_word`` match is dropped when a ``\\w`` character touches
   it, ``lstrip``/``rstrip`` widen the match over neighbouring whitespace;
2. normalize each remaining piece on its own, then find the *normalized* added tokens in it;
3. pre-tokenize and run the model on each remaining piece on its own.

So the pieces between added-token matches are encoded independently, and
``encode(whole) == concat(encode(piece) or [token id])``, provided that cutting a piece
out of its context cannot change how the piece itself is scanned. `SegmentSplitter`
only cuts where that holds:

- it reproduces step 1's scan with a regex over *all* non-normalized tokens (a trie
  alternation, longest branch first = leftmost-longest), so no cut lands where a longer
  or earlier match would have won;
- it cuts only at matches of *plain* tokens (no ``single_word``/``lstrip``/``rstrip``):
  flagged tokens stay inside a segment and are handled by the backend, in context;
- if any ``single_word`` token exists, a plain token cuts only when its first and last
  characters are surely not ``\\w`` (so "start of segment" and "after this token" look
  the same to the word-boundary test); if any ``rstrip`` token exists, only when it does
  not start with whitespace (so no widened match can reach into it);
- normalized tokens (step 2) cut only when the normalizer does nothing and no token has
  a flag; otherwise they stay inside segments;
- nothing is cut when the pre-tokenizer looks at a piece's position in the whole text
  (``Metaspace`` with ``prepend_scheme: "first"``) or truncation/padding is configured.

`TextTokenizer` also checks whole-vs-segmented equality on a corpus at load (belt and braces).
"""

from __future__ import annotations

import json
import re
import sys
import threading
import unicodedata
from collections import OrderedDict
from typing import Any, Callable

import tokenizers

__all__ = ["SegmentSplitter", "SegmentCache", "pipeline_spec", "split_blockers"]


def _trie_regex(words: list[str]) -> str:
    """Regex matching any of ``words``, leftmost-longest (a trie: longer branches tried first)."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        alts = []
        for ch in sorted(k for k in node if k):
            piece, sub = re.escape(ch), node[ch]
            while len(sub) == 1 and "" not in sub:  # fold single-child chains
                (c2, sub), = sub.items()
                piece += re.escape(c2)
            alts.append(piece + emit(sub))
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100 + 2 * max((len(w) for w in words), default=0)))
    return emit(trie)


_NOT_WORD_CATEGORIES = {"Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "Zs", "Zl", "Zp", "Cc"}


def _surely_not_word(ch: str) -> bool:
    # Rust regex `\w` = Alphabetic + M + Nd + Pc + Join_Control. Alphabetic reaches into So
    # (circled letters), so only categories that can never be `\w` count.
    return unicodedata.category(ch) in _NOT_WORD_CATEGORIES


def _surely_not_space(ch: str) -> bool:
    return not ch.isspace() and unicodedata.category(ch) not in {"Zs", "Zl", "Zp", "Cc", "Cf"}


def _walk(component: Any):
    if isinstance(component, dict):
        yield component
        for value in component.values():
            yield from _walk(value)
    elif isinstance(component, list):
        for value in component:
            yield from _walk(value)


def pipeline_spec(hf: tokenizers.Tokenizer) -> dict:
    """The parts of ``tokenizer.json`` the splitter looks at, without serialising the vocabulary."""

    def part(component: Any) -> Any:
        return None if component is None else json.loads(component.__getstate__())

    return {"normalizer": part(hf.normalizer), "pre_tokenizer": part(hf.pre_tokenizer),
            "truncation": hf.truncation, "padding": hf.padding}


def split_blockers(spec: dict) -> list[str]:
    """Reasons (from `pipeline_spec`) why no segment may be cut, or []."""
    reasons = []
    for part in _walk(spec.get("pre_tokenizer")):
        if part.get("type") == "Metaspace" and part.get("prepend_scheme", "always") == "first":
            reasons.append("Metaspace pre-tokenizer with prepend_scheme 'first' depends on the piece's position")
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        reasons.append("truncation/padding is configured in tokenizer.json")
    return reasons


def _normalizer_is_noop(spec: dict) -> bool:
    norm = spec.get("normalizer")
    return norm is None or (norm.get("type") == "Sequence" and not norm.get("normalizers"))


class SegmentSplitter:
    """Cuts text at added tokens whose neighbours encode independently of them.

    Args:
        hf: the reference tokenizer (its added tokens, flags, normalizer and
            pre-tokenizer are read once).

    ``split(text)`` returns a list whose items are either ``str`` (a non-empty segment to
    encode on its own) or ``int`` (the id of an added token matched there).
    """

    def __init__(self, hf: tokenizers.Tokenizer) -> None:
        spec = pipeline_spec(hf)
        added = [(i, t) for i, t in sorted(hf.get_added_tokens_decoder().items()) if t.content]
        self.blockers = split_blockers(spec)
        flagged = any(t.single_word or t.lstrip or t.rstrip for _, t in added)
        any_single_word = any(t.single_word for _, t in added if not t.normalized)
        any_rstrip = any(t.rstrip for _, t in added if not t.normalized)

        def plain_cut(t: tokenizers.AddedToken) -> bool:
            if t.single_word or t.lstrip or t.rstrip:
                return False
            if any_single_word and not (_surely_not_word(t.content[0]) and _surely_not_word(t.content[-1])):
                return False
            return not (any_rstrip and not _surely_not_space(t.content[0]))

        raw = [(i, t) for i, t in added if not t.normalized]
        self._raw_re = re.compile(_trie_regex([t.content for _, t in raw])) if raw else None
        # content -> id where a match cuts; matches of other contents stay inside segments
        self._raw_cuts = {t.content: i for i, t in raw if plain_cut(t)}
        norm = [(i, t) for i, t in added if t.normalized]
        self._norm_re = None
        self._norm_cuts: dict[str, int] = {}
        if norm and _normalizer_is_noop(spec) and not flagged:
            self._norm_re = re.compile(_trie_regex([t.content for _, t in norm]))
            self._norm_cuts = {t.content: i for i, t in norm}
        if self.blockers:
            self._raw_re = self._norm_re = None

    @property
    def cut_token_ids(self) -> frozenset[int]:
        """Ids of the added tokens that segments are cut at."""
        return frozenset(self._raw_cuts.values()) | frozenset(self._norm_cuts.values())

    def split(self, text: str) -> list[str | int]:
        """Segments and cut-token ids of ``text`` in order (see class doc)."""
        out: list[str | int] = []
        if self._raw_re is None:
            return [text] if text else out
        cuts, start = self._raw_cuts, 0
        for m in self._raw_re.finditer(text):
            tid = cuts.get(m.group())
            if tid is None:
                continue
            if m.start() > start:
                self._split_normalized(text[start:m.start()], out)
            out.append(tid)
            start = m.end()
        if start < len(text):
            self._split_normalized(text[start:] if start else text, out)
        return out

    def _split_normalized(self, piece: str, out: list[str | int]) -> None:
        if self._norm_re is None:
            out.append(piece)
            return
        start = 0
        for m in self._norm_re.finditer(piece):
            if m.start() > start:
                out.append(piece[start:m.start()])
            out.append(self._norm_cuts[m.group()])
            start = m.end()
        if start < len(piece):
            out.append(piece[start:] if start else piece)


class SegmentCache:
    """LRU map from segment text to its token ids, bounded by an estimate of resident bytes.

    Size of an entry = ``sys.getsizeof(text)`` + 36 bytes per id (list slot + int object)
    + 100 bytes of bookkeeping. Segments larger than ``max_bytes // 8`` are not stored.
    Thread-safe; the encoder runs outside the lock.

    Args:
        max_bytes: budget; 0 disables storing (every look-up is a miss).
    """

    _ENTRY_OVERHEAD = 100
    _BYTES_PER_ID = 36

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self._entries: OrderedDict[str, list[int]] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.misses = self.hit_chars = self.miss_chars = self.evictions = 0

    def encode_segments(self, parts: list[str | int], encode_batch: Callable[[list[str]], list[list[int]]]) -> list[int]:
        """Ids of ``parts`` (segments and literal ids), encoding only the segments not cached.

        ``encode_batch`` gets the missing segments in one call (no post-processing).
        """
        chunks: list = []  # id lists, literal ids (>= 0), or ~index of a missing segment (< 0)
        missing: list[str] = []
        hits = hit_chars = miss_chars = 0
        with self._lock:
            get, touch = self._entries.get, self._entries.move_to_end
            for p in parts:
                if p.__class__ is int:
                    chunks.append(p)
                    continue
                ids = get(p)
                if ids is None:
                    chunks.append(~len(missing))
                    missing.append(p)
                    miss_chars += len(p)
                else:
                    touch(p)
                    chunks.append(ids)
                    hits += 1
                    hit_chars += len(p)
            self.hits += hits
            self.hit_chars += hit_chars
            self.misses += len(missing)
            self.miss_chars += miss_chars
        fresh = encode_batch(missing) if missing else []
        if fresh:
            self._store(missing, fresh)
        out: list[int] = []
        for c in chunks:
            if c.__class__ is list:
                out += c
            elif c >= 0:
                out.append(c)
            else:
                out += fresh[~c]
        return out

    def _store(self, texts: list[str], ids_list: list[list[int]]) -> None:
        limit = self.max_bytes // 8
        with self._lock:
            for text, ids in zip(texts, ids_list):
                size = sys.getsizeof(text) + self._BYTES_PER_ID * len(ids) + self._ENTRY_OVERHEAD
                if size > limit or text in self._entries:
                    continue
                self._entries[text] = ids
                self._sizes[text] = size
                self.bytes += size
            while self.bytes > self.max_bytes and self._entries:
                old, _ = self._entries.popitem(last=False)
                self.bytes -= self._sizes.pop(old)
                self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (counters are kept)."""
        with self._lock:
            self._entries.clear()
            self._sizes.clear()
            self.bytes = 0

    def stats(self) -> dict[str, int]:
        """Counters since creation: ``hits``, ``misses``, ``hit_chars``, ``miss_chars`` (segment
        text length), ``evictions``; and current ``entries``, ``bytes``, ``max_bytes``."""
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "hit_chars": self.hit_chars,
                "miss_chars": self.miss_chars,
                "evictions": self.evictions,
                "entries": len(self._entries),
                "bytes": self.bytes,
                "max_bytes": self.max_bytes,
            }
