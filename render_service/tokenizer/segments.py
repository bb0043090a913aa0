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

import bisect
import json
import re
import sys
import threading
import unicodedata
from collections import OrderedDict
from typing import Any, Callable

import tokenizers

from . import budget
from .ids_json import IdsJson, TokenIds

__all__ = ["SegmentSplitter", "SegmentCache", "PrefixCache", "pipeline_spec", "split_blockers"]


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
        self._cut_len = {i: len(c) for c, i in [*self._raw_cuts.items(), *self._norm_cuts.items()]}
        self._raw_cut_ids = frozenset(self._raw_cuts.values())
        # A match can change only within this many characters of where two texts start to differ.
        self.longest_token = max((len(t.content) for _, t in added), default=0)
        # No match of the raw scan spans this character, so a scan starting right after one
        # finds the same matches as a scan of the whole text (`split_tail`).
        self.separator = "\n" if not any("\n" in t.content for _, t in raw) else None

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

    def split_tail(self, text: str, window: int) -> tuple[int, list[str | int]]:
        """``(c, parts)``: ``c`` is the end of the first cut-token match in about the last
        ``window`` characters of ``text`` (beyond its last `separator` before them; the
        whole text without one), and ``parts`` is ``split(text[c:])``, exactly as a split of
        the whole text continues after that match. ``(len(text), [])`` when there is none."""
        start = 0
        if self.separator is not None and len(text) > window:
            start = text.rfind(self.separator, 0, len(text) - window) + 1
        parts = self.split(text[start:] if start else text)
        pos = start
        for k, part in enumerate(parts):
            if part.__class__ is str:
                pos += len(part)
                continue
            pos += self._cut_len[part]
            if part in self._raw_cut_ids:  # pieces after a raw cut are whole pieces of the full split
                return pos, parts[k + 1:]
        return len(text), []

    def cut_ends(self, start: int, parts: list[str | int], sizes: list[int]) -> list[tuple[int, int]]:
        """Where each cut token of ``parts`` (a split of the text from offset ``start``) ends:
        ``(character offset after it, parts' ids before that)``, given the ids count of each
        text part in order (``sizes``)."""
        out, pos, count, k = [], start, 0, 0
        for part in parts:
            if part.__class__ is str:
                pos += len(part)
                count += sizes[k]
                k += 1
            else:
                pos += self._cut_len[part]
                count += 1
                out.append((pos, count))
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


# Estimated bytes per id of a prompt's kept JSON (up to six digits and a comma).
_JSON_BYTES_PER_ID = 7


def common_prefix_length(a: str, b: str) -> int:
    """How many first characters ``a`` and ``b`` share (compared block by block, growing)."""
    n, i, step = min(len(a), len(b)), 0, 4096
    while i < n:
        j = min(n, i + step)
        if a[i:j] == b[i:j]:
            i, step = j, min(2 * step, 1 << 16)
            continue
        while j - i > 1:  # a[:i] == b[:i], a[:j] != b[:j]
            mid = (i + j) // 2
            i, j = (mid, j) if a[i:mid] == b[i:mid] else (i, mid)
        return i
    return n


class _Prompt:
    """A prompt seen before: its text, ids, and ``cuts``, ascending ``(offset after a cut
    token, ids before it)`` at which the text may be cut and its ids with it (None until
    first needed), and ``json``, the `IdsJson` of its ids (built when first needed).

    ``ids`` is a tuple (a cold prompt) or the `TokenIds` handed to the caller (an extended
    one, shared to save a copy of the whole list): `intact` says whether the caller changed it,
    and once the caller has released it the next prompt extending it takes the list over."""

    __slots__ = ("text", "ids", "cuts", "size", "key", "json", "claimed")

    def __init__(self, text: str, ids: tuple[int, ...] | TokenIds, cuts: list[tuple[int, int]] | None,
                 json: IdsJson) -> None:
        self.text, self.ids, self.cuts, self.key, self.json = text, ids, cuts, -1, json
        self.claimed = False  # its ids list was taken over by a prompt extending it (`PrefixCache._claim`)
        self.size = (sys.getsizeof(text) + (SegmentCache._BYTES_PER_ID + _JSON_BYTES_PER_ID) * len(ids)
                     + 64 * len(cuts or ()) + 400)

    def intact(self) -> bool:
        """False when the caller has changed the shared ids list since."""
        return self.ids.__class__ is tuple or self.ids.encoding is self.json


class PrefixCache:
    """Incremental tokenization: a prompt that starts like one seen before (turn k of an agent
    loop, after turn k-1) reuses that prompt's ids up to a shared cut token and encodes only
    the rest.

    Why it is exact. `SegmentSplitter` cuts only where ``encode(whole)`` is the
    concatenation of the pieces' encodings (see the module doc; checked at load). If two
    texts agree on their first ``L`` characters, every cut the scan finds ending at ``c <= L -
    longest_token`` is found in both (a match that could differ would have to reach past
    ``L``), so ``encode(new) = ids_old[:n(c)] + encode_pieces(new[c:])``: the old prompt's
    ids before the cut, then the new text from the cut, itself split at cuts and encoded piece
    by piece (which also gives the new prompt's own cuts). A cold prompt is encoded whole,
    and only when a later prompt extends it are its cuts found, in its last `WINDOW`
    characters (`SegmentSplitter.split_tail`), where the next turn needs them. A prompt that ends inside a token's reach of where
    the next one differs (Qwen3.5's trailing ``<think>\\n``, an edited earlier message, a
    new system prompt) simply reuses an earlier cut, or nothing.

    Bounded: an LRU of prompts by estimated resident bytes (text + 36 bytes per id); a
    prompt that extends a cached one replaces it, so an agent loop holds one entry, and
    prompts never extended (one-shot traffic) share only 1/`COLD_SHARE` of the budget, so
    they neither crowd out conversations nor grow the process by the whole budget; their ids
    are kept as tuples, which the garbage collector stops scanning. Prompts
    shorter than `MIN_CHARS` bypass it. Thread-safe; encoding runs outside the lock.

    Args:
        splitter: the checked `SegmentSplitter` of the tokenizer.
        max_bytes: budget (0: off, every prompt is encoded whole).
        encode: whole-text encoder (no post-processing).
        encode_batch: encoder of several texts at once (no post-processing).
    """

    MIN_CHARS = 2048
    WINDOW = 4096
    HEAD_CHARS = 1024  # only prompts that share their first HEAD_CHARS characters are compared
    PARTIAL_CANDIDATES = 3  # most recent of those that the new prompt does not wholly extend
    COLD_SHARE = 8  # prompts never extended (one-shot traffic) hold at most 1/COLD_SHARE of the budget

    def __init__(self, splitter: SegmentSplitter, max_bytes: int, encode: Callable[[str], list[int]],
                 encode_batch: Callable[[list[str]], list[list[int]]]) -> None:
        self.splitter, self.max_bytes = splitter, max(0, int(max_bytes))
        self._encode, self._encode_batch = encode, encode_batch
        self._entries: OrderedDict[int, _Prompt] = OrderedDict()
        self._heads: dict[str, list[int]] = {}  # first HEAD_CHARS characters -> keys, oldest first
        self._cold: OrderedDict[int, None] = OrderedDict()  # entries not (yet) extended, oldest first
        self.cold_bytes = 0
        self._lock = threading.Lock()
        self._next_key = 0
        self.bytes = self.hits = self.misses = self.evictions = self.reused_tokens = self.encoded_tokens = 0
        self.taken_over = 0  # released id lists that became the next prompt's (`_claim`)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (equal to ``encode(text)``), reusing a cached prompt's where it can.

        A prompt that extends a cached one comes back as a `TokenIds` carrying its JSON
        encoding, itself mostly the cached prompt's (`ids_json`); the caller may change it
        (the cache then stops using it) but gains nothing by copying it."""
        if self.max_bytes == 0 or len(text) < self.MIN_CHARS:
            ids = self._encode(text)
            with self._lock:
                self.encoded_tokens += len(ids)
            return ids
        found = self._find(text)
        if found is None:
            # Its cuts are found when a later prompt first extends it (`_cuts`); until then it may
            # be one-shot traffic: its ids as a tuple, which the garbage collector stops scanning.
            ids = self._encode(text)
            kept = tuple(ids)
            self._store(_Prompt(text, kept, None, IdsJson(b"[", kept)), None, False, 0, len(ids))
            return ids
        replaced, (start, reused), extends = found
        budget.check(len(text) - start)  # before anything changes (tokenizer.budget)
        parts = self.splitter.split(text[start:])
        tail, sizes = self._encode_parts(parts)
        kept = replaced.ids
        cuts = [c for c in self._cuts(replaced) if c[0] <= start]
        head = replaced.json.head(kept, reused)  # before `kept` may change below
        ids = self._claim(replaced) if extends else None
        if ids is not None:  # released by its caller: the list itself becomes this prompt's
            list.__delitem__(ids, slice(reused, None))
        else:
            ids = TokenIds()
            if reused * 2 >= len(kept):  # one copy of the list, then drop the few ids past the cut
                list.extend(ids, kept)
                list.__delitem__(ids, slice(reused, None))
            else:
                list.extend(ids, kept[:reused])
            if replaced.claimed:  # another request took that list while it was read here: start over
                return self._encode(text)
        list.extend(ids, tail)
        ids._json = IdsJson(head, tail)
        cuts += [(c, n + reused) for c, n in self.splitter.cut_ends(start, parts, sizes)]
        self._store(_Prompt(text, ids, cuts, ids.encoding), replaced, extends, reused, len(ids) - reused)
        return ids

    def _claim(self, prompt: _Prompt) -> TokenIds | None:
        """``prompt``'s ids list, taken out of the cache, when its caller has released it
        (`TokenIds.release`) unchanged; else None."""
        ids = prompt.ids
        if ids.__class__ is not TokenIds or not ids.released:
            return None
        with self._lock:
            if not (ids.released and prompt.intact() and self._entries.get(prompt.key) is prompt):
                return None
            ids.released = False
            self.taken_over += 1
            prompt.claimed = True  # before the list changes: a reader in flight sees it and starts over
            self._drop(prompt.key)  # nobody else may extend it from now on
        return ids

    def _cuts(self, prompt: _Prompt) -> list[tuple[int, int]]:
        """``prompt.cuts``, found in its last `WINDOW` characters the first time they are asked for."""
        if prompt.cuts is None:
            start, parts = self.splitter.split_tail(prompt.text, self.WINDOW)
            tail, sizes = self._encode_parts(parts)
            base = len(prompt.ids) - len(tail)
            cuts = [(c, n + base) for c, n in self.splitter.cut_ends(start, parts, sizes)]
            prompt.cuts = [(start, base), *cuts] if start < len(prompt.text) else cuts
        return prompt.cuts

    def _encode_parts(self, parts: list[str | int]) -> tuple[list[int], list[int]]:
        texts = [p for p in parts if p.__class__ is str]
        encoded = iter(self._encode_batch(texts) if texts else ())
        ids: list[int] = []
        sizes: list[int] = []
        for part in parts:
            if part.__class__ is str:
                piece = next(encoded)
                ids += piece
                sizes.append(len(piece))
            else:
                ids.append(part)
        return ids, sizes

    def _find(self, text: str) -> tuple[_Prompt, tuple[int, int], bool] | None:
        """The cached prompt to extend, its cut ``(offset, ids before)`` and whether ``text``
        starts with all of it; or None."""
        reach = self.splitter.longest_token
        with self._lock:
            keys = self._heads.get(text[:self.HEAD_CHARS], ())
            entries = [self._entries[k] for k in reversed(keys)]
            for entry in [e for e in entries if not e.intact()]:  # a caller changed its ids list
                self._drop(entry.key)
                self.evictions += 1
                entries.remove(entry)
        partial = []
        for entry in entries:
            if text.startswith(entry.text):
                cut = self._last_cut(entry, len(entry.text) - reach)
                if cut is not None:
                    return entry, cut, True
            elif len(partial) < self.PARTIAL_CANDIDATES:
                partial.append(entry)
        for entry in partial:
            cut = self._last_cut(entry, common_prefix_length(text, entry.text) - reach)
            if cut is not None:
                return entry, cut, False
        return None

    def _last_cut(self, entry: _Prompt, limit: int) -> tuple[int, int] | None:
        cuts = self._cuts(entry)
        k = bisect.bisect_right(cuts, (limit, float("inf")))
        return cuts[k - 1] if k else None

    def _store(self, prompt: _Prompt, replaced: _Prompt | None, extends: bool, reused: int, encoded: int) -> None:
        with self._lock:
            if replaced is None:
                self.misses += 1
            else:
                self.hits += 1
                if extends and self._entries.get(replaced.key) is replaced:
                    self._drop(replaced.key)  # the conversation moved on: keep the newer one
            self.reused_tokens += reused
            self.encoded_tokens += encoded
            cold_budget = self.max_bytes // self.COLD_SHARE
            if prompt.size > (cold_budget if replaced is None else self.max_bytes // 4):
                return
            prompt.key, self._next_key = self._next_key, self._next_key + 1
            self._entries[prompt.key] = prompt
            self._heads.setdefault(prompt.text[:self.HEAD_CHARS], []).append(prompt.key)
            self.bytes += prompt.size
            if replaced is None:
                self._cold[prompt.key] = None
                self.cold_bytes += prompt.size
            while self.cold_bytes > cold_budget and self._cold:
                self._drop(next(iter(self._cold)))
                self.evictions += 1
            while self.bytes > self.max_bytes and self._entries:
                self._drop(next(iter(self._entries)))
                self.evictions += 1

    def _drop(self, key: int) -> None:
        prompt = self._entries.pop(key)
        self.bytes -= prompt.size
        if self._cold.pop(key, 0) is None:
            self.cold_bytes -= prompt.size
        head = prompt.text[:self.HEAD_CHARS]
        keys = self._heads[head]
        keys.remove(key)
        if not keys:
            del self._heads[head]

    def clear(self) -> None:
        """Drop every prompt (counters are kept)."""
        with self._lock:
            self._entries.clear()
            self._heads.clear()
            self._cold.clear()
            self.bytes = self.cold_bytes = 0

    def stats(self) -> dict[str, int]:
        """Counters since creation (``hits``, ``misses``, ``evictions``, ``reused_tokens``,
        ``encoded_tokens`` (every prompt's, also those too short to be cached), ``taken_over``:
        released id lists that became the next prompt's) and current ``entries``, ``bytes`` (ids, text and the ids' JSON), ``max_bytes``."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "reused_tokens": self.reused_tokens, "encoded_tokens": self.encoded_tokens,
                    "taken_over": self.taken_over,
                    "entries": len(self._entries), "bytes": self.bytes, "max_bytes": self.max_bytes}
