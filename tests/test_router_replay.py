"""llm-d's token-producer traffic replayed against a real `render-service serve` (issue 26 item 6).

What the router does today, call for call: at warm-up ``GET /v1/models`` (it reads
``max_model_len``, then every 30 s), a probe of ``/v1/messages/render`` and
``/v1/responses/render`` (it falls back to chat on 404/405), and a 1x1 PNG render on a
vision-language model; then per request one of the four render routes with
``return_mm_kwargs: false``, optionally prefill-only (``max_tokens: 1``), the client's
``Authorization`` forwarded, the request's ``model`` passed through unchanged (a served alias or
a LoRA adapter name), a ``traceparent`` on every call; all over https with a CA (here with
mTLS too). The server runs as deployed: the CLI, TLS, ``--api-key``, ``--lora-modules``.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import uuid

import httpx
import pytest

from cli_server import serve
from conftest import MODELS, needs_shared

QWEN_VL = MODELS / "qwen2.5-vl-instruct"
KEY = "router-key-0123456789"
ALIAS = "Qwen/Qwen2.5-VL-7B-Instruct"
PNG_1X1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def _traceparent() -> str:
    SENT_TRACES.append(uuid.uuid4().hex)
    return f"00-{SENT_TRACES[-1]}-{uuid.uuid4().hex[:16]}-01"


SENT_TRACES: list[str] = []


def _otlp_receiver():
    """The OTLP receiver of tests/test_tracing.py when the [otel] extra is installed, else None."""
    try:
        import test_tracing
    except pytest.skip.Exception:
        return None
    return test_tracing._receiver()


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    """(client as the token-producer configures it, the adapter name, spans the server exported
    or None): https with the CA and a client certificate, ``Authorization: Bearer KEY``
    forwarded."""
    if not QWEN_VL.is_dir():
        pytest.skip("../shared/models/qwen2.5-vl-instruct not present")
    from certs import make_pki

    receiver = _otlp_receiver()
    with receiver if receiver is not None else contextlib.nullcontext((None, None)) as (endpoint, spans):
        yield from _serve(tmp_path_factory, make_pki, endpoint, spans)


def _serve(tmp_path_factory, make_pki, endpoint, spans):
    folder = tmp_path_factory.mktemp("replay")
    pki = make_pki(folder)
    adapter = folder / "sql-lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    with serve(str(QWEN_VL), "--served-model-name", ALIAS, "--api-key", KEY, "--lora-modules", f"sql-lora={adapter}",
               "--ssl-certfile", str(pki.server_cert), "--ssl-keyfile", str(pki.server_key),
               "--ssl-ca-certs", str(pki.ca), "--ssl-cert-reqs", "2",
               *(["--otlp-traces-endpoint", endpoint] if endpoint else []),
               scheme="https", timeout=180, verify=context, headers={"Authorization": f"Bearer {KEY}"}) as (client, _):
        yield client, "sql-lora", spans


def _post(client: httpx.Client, path: str, body: dict, **headers) -> httpx.Response:
    return client.post(path, json=body, headers={"traceparent": _traceparent(), **headers})


@needs_shared
def test_warm_up_as_the_token_producer_does_it(router):
    client, adapter, _ = router
    models = client.get("/v1/models", headers={"traceparent": _traceparent()})
    assert models.status_code == 200
    cards = {m["id"]: m for m in models.json()["data"]}
    assert cards[ALIAS]["max_model_len"] > 0 and cards[adapter]["parent"] == ALIAS
    # probing the two newer routes: both served, so no fallback to chat
    messages = _post(client, "/v1/messages/render", {"model": ALIAS, "max_tokens": 1,
                                                     "messages": [{"role": "user", "content": "ping"}]})
    responses = _post(client, "/v1/responses/render", {"model": ALIAS, "input": "ping", "max_output_tokens": 1})
    assert messages.status_code == 200 and responses.status_code == 200
    assert messages.json()["token_ids"] and responses.json()["token_ids"]
    # the 1x1 PNG render that warms the image path, without the processed tensors
    image = _post(client, "/v1/chat/completions/render", {
        "model": ALIAS, "return_mm_kwargs": False, "max_tokens": 1,
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_1X1}},
                                                  {"type": "text", "text": "warm-up"}]}]})
    assert image.status_code == 200, image.text
    features = image.json()["features"]
    assert features["mm_hashes"]["image"] and not features.get("kwargs_data")


@needs_shared
@pytest.mark.parametrize("route", ["/v1/chat/completions/render", "/v1/completions/render",
                                   "/v1/messages/render", "/v1/responses/render"])
def test_each_render_route_passes_the_model_name_through(router, route):
    """Prefill-only (``max_tokens: 1``), ``return_mm_kwargs: false``, the alias and the adapter
    name: the same prompt ids, and each GenerateRequest names the model as sent."""
    client, adapter, _ = router
    outs = {}
    for model in (ALIAS, adapter):
        body = {"model": model, "return_mm_kwargs": False}
        if route == "/v1/completions/render":
            body.update(prompt="The capital of France is", max_tokens=1)
        elif route == "/v1/responses/render":
            body.update(input="The capital of France?", max_output_tokens=1)
        else:
            body.update(messages=[{"role": "user", "content": "The capital of France?"}], max_tokens=1)
        resp = _post(client, route, body)
        assert resp.status_code == 200, resp.text
        out = resp.json()
        outs[model] = out[0] if isinstance(out, list) else out
        assert outs[model]["model"] == model and outs[model]["sampling_params"]["max_tokens"] == 1
    assert outs[ALIAS]["token_ids"] == outs[adapter]["token_ids"]


@needs_shared
def test_the_key_and_the_names_are_checked(router):
    client, _, _ = router
    body = {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}]}
    without = client.post("/v1/chat/completions/render", json=body, headers={"Authorization": ""})
    wrong = _post(client, "/v1/chat/completions/render", body, Authorization="Bearer nope")
    unknown = _post(client, "/v1/chat/completions/render", {**body, "model": "not-served"})
    assert (without.status_code, wrong.status_code, unknown.status_code) == (401, 401, 404)
    assert unknown.json()["error"]["param"] == "model"


@needs_shared
def test_the_routers_traces_continue_here(router):
    """Each call's traceparent becomes the parent of the server's span (when the [otel] extra is
    installed, the replay server exports to a loopback OTLP receiver)."""
    client, _, spans = router
    if spans is None:
        pytest.skip("the [otel] extra is not installed")
    resp = _post(client, "/v1/chat/completions/render", {"model": ALIAS, "max_tokens": 1,
                                                          "messages": [{"role": "user", "content": "trace me"}]})
    assert resp.status_code == 200
    deadline = time.monotonic() + 20
    while SENT_TRACES[-1] not in {s.trace_id.hex() for s in spans}:
        assert time.monotonic() < deadline, "the router's trace never arrived"
        time.sleep(0.1)
    received = {s.trace_id.hex() for s in spans if s.kind == s.SPAN_KIND_SERVER}
    assert set(SENT_TRACES) <= received  # every call of the replay, warm-up included
