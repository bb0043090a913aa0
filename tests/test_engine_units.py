"""Reference engine pieces without HTTP: leases, KV blobs, script selection, stop rules."""

from __future__ import annotations

import threading

import pytest

from reference_engine import kv
from reference_engine.backend import Finish, KVStateError, SamplingSpec
from reference_engine.generation import Job, KVLoadFailed, run_job
from reference_engine.scripted import NoScriptedResponse, ScriptedBackend


def test_lease_store_frees_on_take_and_on_expiry():
    now = [100.0]
    store = kv.KVLeaseStore(30, clock=lambda: now[0])
    a, b = store.put(b"a"), store.put(b"b")
    assert a != b and len(store) == 2
    assert store.take(a) == b"a" and store.take(a) is None
    now[0] += 29.9
    assert len(store) == 1
    now[0] += 0.2
    assert store.take(b) is None and store.expired == 1 and len(store) == 0


def test_blob_round_trip_and_checks():
    blob = kv.pack_blob("m1", [1, 2, 3], b"\x00payload", engine_id="e", request_id="r")
    header, payload = kv.unpack_blob(blob)
    assert header == {"model_id": "m1", "token_ids": [1, 2, 3], "engine_id": "e", "request_id": "r"}
    assert payload == b"\x00payload"
    prefix = kv.blob_to_prefix(blob, model_id="m1", prompt=[1, 2, 3, 4])
    assert prefix.token_ids == [1, 2, 3] and prefix.payload == b"\x00payload"
    with pytest.raises(KVStateError, match="computed by model"):
        kv.blob_to_prefix(blob, model_id="m2", prompt=[1, 2, 3, 4])
    with pytest.raises(KVStateError, match="strict prefix"):
        kv.blob_to_prefix(blob, model_id="m1", prompt=[1, 2, 3])  # decode must compute >= 1 token
    with pytest.raises(KVStateError, match="strict prefix"):
        kv.blob_to_prefix(blob, model_id="m1", prompt=[1, 9, 3, 4])
    with pytest.raises(KVStateError):
        kv.unpack_blob(b"garbage")


@pytest.mark.parametrize(
    "params",
    [{}, {"remote_host": "h", "remote_port": 1}, {"remote_host": "h", "remote_port": "1", "remote_block_ids": [[1]]},
     {"remote_host": "h", "remote_port": 1, "remote_block_ids": []}],
)
def test_parse_remote_rejects_incomplete_params(params):
    with pytest.raises(KVStateError):
        kv.parse_remote(params)


def test_parse_remote_builds_url():
    remote = kv.parse_remote({"remote_host": "::1", "remote_port": 8100, "remote_block_ids": [[7]],
                              "remote_engine_id": "e"})
    assert remote.url == "http://[::1]:8100/kv/7" and remote.engine_id == "e"


def test_script_selection_match_then_round_robin_and_prefill_peek():
    be = ScriptedBackend({"responses": [
        {"match": [5, 6], "token_ids": [1]},
        {"token_ids": [10]},
        {"token_ids": [20]},
    ]})
    assert be.pick([9, 5, 6]).token_ids == [1]
    assert be.pick([9], advance=False).token_ids == [10]  # a prefill leg peeks
    assert [be.pick([9]).token_ids for _ in range(3)] == [[10], [20], [10]]
    only_match = ScriptedBackend([{"match": [1], "token_ids": [2]}])
    with pytest.raises(NoScriptedResponse):
        only_match.check_prompt([3])


def _run(backend, prompt, sampling, cancel=None):
    events = []
    outcome = run_job(backend, Job("r", prompt, sampling), cancel=cancel or threading.Event(),
                      emit=lambda ids, fin: events.append((ids, fin)))
    return [t for ids, _ in events for t in ids], events[-1][1], outcome


def test_stop_rules_follow_vllm_order():
    be = ScriptedBackend({"eos_token_ids": [2], "max_model_len": 8,
                          "responses": [{"token_ids": [7, 2, 8, 9, 3, 4, 5, 6], "finish_reason": "length"}]})
    assert _run(be, [1], SamplingSpec())[:2] == ([7, 2], Finish("stop", 2))
    assert _run(be, [1], SamplingSpec(min_tokens=3, stop_token_ids=(9,)))[:2] == ([7, 2, 8, 9], Finish("stop", 9))
    assert _run(be, [1], SamplingSpec(ignore_eos=True, max_tokens=3))[:2] == ([7, 2, 8], Finish("length"))
    # the context (max_model_len 8) ends generation at 8 - 2 prompt tokens
    assert _run(be, [1, 1], SamplingSpec(ignore_eos=True))[:2] == ([7, 2, 8, 9, 3, 4], Finish("length"))
    # a script that runs out reports its own finish_reason with the last token
    short = ScriptedBackend([{"token_ids": [4, 5], "finish_reason": "length"}])
    _, last, outcome = _run(short, [1], SamplingSpec())
    assert last == Finish("length") and outcome.num_generated == 2


def test_cancel_before_start_and_kv_policy():
    be = ScriptedBackend([{"token_ids": [4, 5]}])
    cancel = threading.Event()
    cancel.set()
    ids, last, outcome = _run(be, [1], SamplingSpec(), cancel=cancel)
    assert (ids, last, outcome.kv_source) == ([], Finish("abort"), "none")

    params = {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 9, "remote_block_ids": [[1]]}

    def failing_fetch(remote):
        raise KVStateError("gone")

    job = Job("r", [1, 2], SamplingSpec(), kv_params=params, import_kv=True)
    with pytest.raises(KVLoadFailed, match="gone"):
        run_job(be, job, cancel=threading.Event(), emit=lambda *a: None, fetch=failing_fetch)
    outcome = run_job(be, job, cancel=threading.Event(), emit=lambda *a: None, fetch=failing_fetch,
                      failure_policy="recompute")
    assert (outcome.kv_source, outcome.kv_error) == ("recompute", "gone")
    good = kv.pack_blob("scripted", [1], b"", engine_id="e", request_id="r")
    outcome = run_job(be, job, cancel=threading.Event(), emit=lambda *a: None, fetch=lambda remote: good)
    assert (outcome.kv_source, outcome.kv_remote_tokens) == ("remote", 1)
