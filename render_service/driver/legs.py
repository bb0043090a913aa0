"""A rendered `GenerateRequest` → the prefill leg and the decode leg (wire brief §6.1). Pure.

Both legs go to tokens-only engines, which reject ``stop`` strings (§1.8): the driver
strips them and derender applies them to the decoded text instead (and the driver aborts
decode once derender has seen one). ``model`` is dropped: the driver already checked it
against its own served names, and engines may serve the same weights under another name.
"""

from __future__ import annotations

from typing import Any

from ..wire.generate import OUTPUT_KIND_DELTA, OUTPUT_KIND_FINAL_ONLY

# §6.1 step 2: what the proxy sends prefill so that it keeps the KV for a remote decode.
PREFILL_KV_PARAMS: dict[str, Any] = {
    "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
    "remote_block_ids": None, "remote_host": None, "remote_port": None,
}


def prefill_leg(gen: dict[str, Any]) -> dict[str, Any]:
    """The prefill leg: ``max_tokens`` 1, ``min_tokens`` 0, non-streaming, no
    ``stream_options``, `PREFILL_KV_PARAMS`.

    The one sampled token is discarded, so prefill also gets ``ignore_eos`` and no stop
    ids: KV is handed off only when prefill ends length-capped (§6.1), and an EOS as the
    first token would otherwise end it with ``stop`` and no ``kv_transfer_params``.
    """
    sp = dict(gen.get("sampling_params") or {})
    sp.update(max_tokens=1, min_tokens=0, stop=[], stop_token_ids=[], ignore_eos=True,
              output_kind=OUTPUT_KIND_FINAL_ONLY)
    return {**gen, "sampling_params": sp, "model": None, "stream": False, "stream_options": None,
            "kv_transfer_params": dict(PREFILL_KV_PARAMS)}


def decode_leg(gen: dict[str, Any], kv_transfer_params: dict | None, continuous_usage: bool = False) -> dict[str, Any]:
    """The decode leg: the original rendered request (full ``max_tokens``, ``min_tokens``)
    with prefill's ``kv_transfer_params`` verbatim (None: decode computes the prompt
    itself). Always streamed, whatever the client asked, so a stop string found by
    derender can end generation early; ``include_usage`` so the final usage and the
    engine's ``metrics`` arrive."""
    sp = dict(gen.get("sampling_params") or {})
    sp.update(stop=[], output_kind=OUTPUT_KIND_DELTA)
    return {**gen, "sampling_params": sp, "model": None, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": continuous_usage},
            "kv_transfer_params": kv_transfer_params}
