"""KV handoff between a prefill and a decode engine: blob format, leases, params, fetch.

Theory of operation (wire brief §6.1, NIXL-style *pull*):

1. The proxy sends prefill (P) a request with ``kv_transfer_params.do_remote_decode: true``
   and ``max_tokens: 1``. P evaluates ``prompt[:-1]``, snapshots that KV, evaluates the last
   prompt token and samples one (discarded) token.
2. P keeps the snapshot in a `KVLeaseStore` under an integer handle for
   ``--kv-lease-duration`` seconds and answers with `prefill_params` (the §6.1 step 3 dict);
   ``remote_block_ids`` is ``[[handle]]`` and ``remote_host``/``remote_port`` point at P itself.
3. Decode (D) gets the same params verbatim, pulls ``GET /kv/{handle}?engine_id=…`` from P
   (`fetch_blob`), checks the blob is for its model and a prefix of its prompt, loads it,
   evaluates the remaining prompt tokens itself and generates. P frees the snapshot once
   fetched or when the lease lapses.

Bidirectional reuse (issue 16), the same blobs the other way round:

4. A decode leg whose ``kv_transfer_params`` has ``retain_kv: true`` keeps, after its
   answer, the KV of ``prompt + output[:-1]`` under a lease on the decode engine and says
   where in its last chunk's ``kv_transfer_params`` (`retained_params`).
5. The next turn's prefill leg (or a plain request) carries those ``remote_*`` fields (and ``remote_num_tokens``:
   how many tokens the proxy allows it to take, never past the first token where the new
   prompt leaves the held sequence). Prefill pulls the blob (`wants_pull`), keeps the
   positions it shares with its prompt (`blob_to_reusable_prefix`: the engine checks the
   token ids itself too) and computes only the rest. Any failure — lease expired, engine
   gone, nothing shared — means a full prefill, never an error and never stale KV.

Blob layout (``application/octet-stream``): ``b"RSKV1\\n"``, a 4-byte big-endian header
length, the header as JSON ``{"model_id", "token_ids", "engine_id", "request_id"}``, then the
backend payload (llama.cpp sequence state bytes; empty for the scripted backend).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import httpx
import orjson

from .backend import KVPrefix, KVStateError

MAGIC = b"RSKV1\n"


def pack_blob(model_id: str, token_ids: list[int], payload: bytes, *, engine_id: str, request_id: str) -> bytes:
    """Serialise a KV snapshot covering ``token_ids`` (layout in the module docstring)."""
    header = orjson.dumps(
        {"model_id": model_id, "token_ids": token_ids, "engine_id": engine_id, "request_id": request_id}
    )
    return MAGIC + len(header).to_bytes(4, "big") + header + payload


def unpack_blob(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """Split a blob into (header dict, payload). Raises `KVStateError` when malformed."""
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 4:
        raise KVStateError("KV blob has no RSKV1 header")
    start = len(MAGIC) + 4
    size = int.from_bytes(blob[len(MAGIC) : start], "big")
    try:
        header = orjson.loads(blob[start : start + size])
    except orjson.JSONDecodeError as exc:
        raise KVStateError(f"KV blob header is not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("token_ids"), list):
        raise KVStateError("KV blob header lacks token_ids")
    return header, blob[start + size :]


def blob_to_prefix(blob: bytes, *, model_id: str, prompt: list[int]) -> KVPrefix:
    """Check a fetched blob against this engine's model and the request's prompt.

    The snapshot must be for the same ``model_id`` and cover a strict prefix of ``prompt``
    (the decode side always evaluates at least the last prompt token itself).
    Raises `KVStateError` otherwise.
    """
    header, payload = unpack_blob(blob)
    if header.get("model_id") != model_id:
        raise KVStateError(f"KV was computed by model {header.get('model_id')!r}, this engine runs {model_id!r}")
    ids = header["token_ids"]
    if len(ids) >= len(prompt) or prompt[: len(ids)] != ids:
        raise KVStateError(f"KV covers {len(ids)} tokens that are not a strict prefix of the {len(prompt)}-token prompt")
    return KVPrefix(token_ids=ids, payload=payload)


def blob_to_reusable_prefix(blob: bytes, *, model_id: str, prompt: list[int], limit: int | None) -> KVPrefix:
    """The part of a pulled blob that ``prompt`` may use: its longest common prefix with the
    blob's tokens, at most ``limit`` tokens, and never the prompt's last token (prefill
    evaluates it to sample). Raises `KVStateError` for another model or nothing shared."""
    header, payload = unpack_blob(blob)
    if header.get("model_id") != model_id:
        raise KVStateError(f"KV was computed by model {header.get('model_id')!r}, this engine runs {model_id!r}")
    ids = header["token_ids"]
    n = min(len(ids), len(prompt) - 1, len(ids) if limit is None else limit)
    shared = next((i for i in range(n) if ids[i] != prompt[i]), n)
    if shared <= 0:
        raise KVStateError("the pulled KV shares no prefix with this prompt")
    return KVPrefix(token_ids=ids[:shared], payload=payload, covered=len(ids))


class KVLeaseStore:
    """Snapshots held for decode engines to pull, each for ``lease_seconds``.

    Thread-safe. Handles are small increasing ints (they travel as ``remote_block_ids``,
    which vLLM types as ``list[list[int]]``). ``clock`` is injectable for tests.
    """

    def __init__(self, lease_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._items: dict[int, tuple[float, bytes]] = {}
        self.expired = 0

    def put(self, blob: bytes) -> int:
        """Store ``blob`` under a new handle until now + lease."""
        with self._lock:
            self._sweep_locked()
            handle = next(self._ids)
            self._items[handle] = (self._clock() + self.lease_seconds, blob)
            return handle

    def take(self, handle: int) -> bytes | None:
        """Remove and return the blob, or None when unknown or expired."""
        with self._lock:
            self._sweep_locked()
            item = self._items.pop(handle, None)
            return None if item is None else item[1]

    def sweep(self) -> int:
        """Free expired snapshots; returns how many were freed."""
        with self._lock:
            return self._sweep_locked()

    def _sweep_locked(self) -> int:
        # every lease is as long, so insertion order is expiry order: stop at the first live one
        now = self._clock()
        dead = 0
        for h, (expiry, _) in self._items.items():
            if expiry > now:
                break
            dead += 1
        for h in list(itertools.islice(self._items, dead)):
            del self._items[h]
        self.expired += dead
        return dead

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


@dataclass(frozen=True)
class RemoteKV:
    """Where a decode engine pulls its KV from (parsed from P's ``kv_transfer_params``)."""

    host: str
    port: int
    handle: int
    engine_id: str | None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/kv/{self.handle}"


def wants_export(params: dict | None) -> bool:
    """True for a prefill leg (``do_remote_decode: true``)."""
    return bool(params) and bool(params.get("do_remote_decode"))


def wants_import(params: dict | None) -> bool:
    """True for a decode leg (``do_remote_prefill: true``)."""
    return bool(params) and bool(params.get("do_remote_prefill"))


def wants_pull(params: dict | None) -> bool:
    """True for a request that names an engine's retained KV to start from: a prefill leg
    (or a plain request, e.g. one engine carrying a conversation in its own cache) with
    ``remote_host`` and ``remote_block_ids`` set; never a decode leg (``do_remote_prefill``)."""
    return (bool(params) and not params.get("do_remote_prefill") and params.get("remote_host") is not None
            and bool(params.get("remote_block_ids")))


def wants_retain(params: dict | None) -> bool:
    """True for a request asking to keep its answer's KV for the next turn (``retain_kv``)."""
    return bool(params) and bool(params.get("retain_kv"))


def parse_remote(params: dict) -> RemoteKV:
    """Read host, port and handle from P's params. Raises `KVStateError` when they are
    missing or of the wrong type (the failure policy then decides: error or recompute)."""
    host, port, blocks = params.get("remote_host"), params.get("remote_port"), params.get("remote_block_ids")
    try:
        handle = blocks[0][0]
    except (TypeError, IndexError, KeyError):
        handle = None
    if not isinstance(host, str) or not host or not isinstance(port, int) or not isinstance(handle, int):
        raise KVStateError(
            "kv_transfer_params needs remote_host (str), remote_port (int) and remote_block_ids [[handle]]"
        )
    engine_id = params.get("remote_engine_id")
    return RemoteKV(host=host, port=port, handle=handle, engine_id=engine_id if isinstance(engine_id, str) else None)


def fetch_blob(remote: RemoteKV, timeout: float = 10.0) -> bytes:
    """Pull a snapshot from the prefill engine. Raises `KVStateError` on any failure
    (connection refused, timeout, 404 for a freed or expired lease)."""
    params = {"engine_id": remote.engine_id} if remote.engine_id else None
    try:
        resp = httpx.get(remote.url, params=params, timeout=timeout)
    except httpx.HTTPError as exc:
        raise KVStateError(f"cannot reach prefill engine at {remote.url}: {exc.__class__.__name__}: {exc}") from None
    if resp.status_code != 200:
        raise KVStateError(f"prefill engine answered {resp.status_code} for {remote.url}: {resp.text[:200]}")
    return resp.content


def retained_params(
    *, engine_id: str, request_id: str, host: str, port: int, handle: int, num_tokens: int, lease_seconds: float
) -> dict[str, Any]:
    """The ``kv_transfer_params`` of a decode answer that kept its KV: where the next turn's
    prefill pulls it (``remote_*``, the same fields a prefill hands to decode),
    ``remote_num_tokens`` positions, held for ``kv_lease_duration`` seconds."""
    return {
        "do_remote_prefill": False,
        "do_remote_decode": False,
        "remote_block_ids": [[handle]],
        "remote_engine_id": engine_id,
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": port,
        "remote_num_tokens": num_tokens,
        "kv_lease_duration": lease_seconds,
        "transfer_mode": "pull",
    }


def prefill_params(
    *, engine_id: str, request_id: str, host: str, port: int, handle: int, num_tokens: int
) -> dict[str, Any]:
    """The ``kv_transfer_params`` a prefill leg returns (wire brief §6.1 step 3 field set;
    ``remote_block_ids`` carries our lease handle)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [[handle]],
        "remote_engine_id": engine_id,
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
        "dcp_size": 1,
        "pp_size": 1,
        "remote_num_tokens": num_tokens,
        "remote_blocks_expiry_time": None,
        "remote_registration_generation": 0,
        "transfer_mode": "pull",
        "remote_prefill_cached_tokens": 0,
    }
