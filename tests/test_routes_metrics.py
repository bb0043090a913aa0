"""``/ping``, ``/load`` and ``/metrics`` as vLLM 0.33's render server answers them (issue 11 item 5),
plus our own series, and the tool_choice header. Real servers on loopback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from conftest import MODELS, SHARED, render_server
from render_service.http.admission import Admission
from render_service.http.front import Front, FrontedApp
from render_service.http.metrics import ServiceMetrics

RECORDED = Path(__file__).resolve().parent / "fixtures" / "vllm" / "recorded" / "qwen3-hermes.json"
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def _series(text: str) -> set[str]:
    """Metric lines without their values."""
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}


@pytest.fixture(scope="module")
def client():
    with render_server(None, max_model_len=512) as url, httpx.Client(base_url=url, timeout=30) as c:
        yield c


def test_ping_and_load(client):
    for method in ("GET", "POST"):
        resp = client.request(method, "/ping")
        assert resp.status_code == 200 and resp.content == b""
    load = client.get("/load").json()
    assert load.keys() == {"server_load", "saturation"} and load["server_load"] == 0  # saturation: issue 25
    assert 0.0 <= load["saturation"] <= 1.0


def test_http_series_have_vllms_names_and_labels(client):
    assert client.post("/v1/chat/completions/render", json=CHAT).status_code == 200
    assert client.post("/v1/chat/completions/render", json={"messages": "x"}).status_code == 400
    client.get("/health"), client.get("/ping"), client.get("/load")
    series = _series(client.get("/metrics").text)
    handler = 'handler="/v1/chat/completions/render"'
    assert f'http_requests_total{{{handler},method="POST",status="2xx"}}' in series
    assert f'http_requests_total{{{handler},method="POST",status="4xx"}}' in series
    assert f'http_request_duration_seconds_bucket{{{handler},le="0.1",method="POST"}}' in series
    assert f'http_request_size_bytes_sum{{{handler}}}' in series and f'http_response_size_bytes_sum{{{handler}}}' in series
    assert 'http_request_duration_highr_seconds_bucket{le="0.01"}' in series
    assert not [s for s in series if s.startswith("http_") and any(
        f'handler="{h}"' in s for h in ("/health", "/ping", "/load", "/metrics"))], "vLLM leaves these out"


def test_our_series(client):
    before = _series_values(client.get("/metrics").text)
    out = client.post("/v1/chat/completions/render", json=CHAT).json()
    assert client.post("/v1/completions/render", json={"prompt": [1, 2, 3]}).status_code == 200
    assert client.post("/v1/chat/completions/render", json={"messages": []}).status_code == 400
    after = _series_values(client.get("/metrics").text)

    def grew(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert grew('render_service_prompt_tokens_total{route="/v1/chat/completions/render"}') == len(out["token_ids"])
    assert grew('render_service_prompt_tokens_total{route="/v1/completions/render"}') == 3
    assert grew('render_service_requests_total{route="/v1/chat/completions/render",status="400"}') == 1
    assert grew('render_service_request_duration_seconds_count{route="/v1/chat/completions/render"}') == 2
    assert "render_service_requests_in_flight" in after
    assert "render_tokenizer_prefix_cache_reused_tokens_total" in after and "render_tokenizer_prefix_cache_bytes" in after


def _series_values(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_in_flight_counts_requests_being_served():
    metrics = ServiceMetrics()
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_app(scope, receive, send):
        started.set()
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    from render_service.http.metrics import RequestMetrics

    async def run():
        app = RequestMetrics(slow_app, metrics, {"/x"})
        sent = []

        async def send(message):
            sent.append(message)

        task = asyncio.create_task(app({"type": "http", "path": "/x", "method": "GET", "headers": []}, None, send))
        await started.wait()
        during = metrics._in_flight
        release.set()
        await task
        return during

    assert asyncio.run(run()) == 1 and metrics._in_flight == 0


def _toy_routes():
    from starlette.responses import PlainTextResponse, StreamingResponse
    from starlette.routing import Route

    async def ok(request):
        await request.body()
        return PlainTextResponse("x" * 37)

    async def bad(request):
        return PlainTextResponse("no", status_code=422)

    async def stream(request):
        return StreamingResponse(iter([b"a", b"bc"]))

    async def boom(request):
        raise RuntimeError("boom")

    return [Route("/v1/ok", ok, methods=["POST", "GET"]), Route("/v1/bad", bad), Route("/v1/stream", stream),
            Route("/v1/boom", boom), Route("/health", ok), Route("/metrics", ok), Route("/load", ok)]


def _drive(app) -> None:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def main():
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            await c.post("/v1/ok", content=b"12345")
            await c.post("/v1/ok", content=b"1234567")
            await c.get("/v1/ok")
            await c.put("/v1/ok")  # 405: still the route's handler
            await c.get("/v1/bad")
            await c.get("/v1/stream")
            await c.get("/v1/boom")
            await c.get("/nowhere")  # 404: handler "none"
            for path in ("/health", "/metrics", "/load"):
                await c.get(path)

    asyncio.run(main())


def test_http_series_equal_prometheus_fastapi_instrumentators():
    """Our front layer gives exactly the series vLLM's library gives (names, labels, buckets,
    counts, size sums) for the same requests; only the measured durations differ."""
    import prometheus_client
    from prometheus_fastapi_instrumentator import Instrumentator
    from starlette.applications import Starlette

    from render_service.http.metrics import EXCLUDED_HANDLERS

    theirs_registry = prometheus_client.CollectorRegistry()
    theirs = Starlette(routes=_toy_routes())
    Instrumentator(excluded_handlers=EXCLUDED_HANDLERS, registry=theirs_registry).add().instrument(theirs)
    ours_metrics = ServiceMetrics()
    ours = FrontedApp(routes=_toy_routes())  # the render server's way: the front counts (http/front.py)
    Front(ours, ours_metrics, Admission(2, 1.0), ours.routes)
    _drive(theirs)
    _drive(ours)

    def http_series(registry) -> dict[str, float]:
        text = prometheus_client.generate_latest(registry).decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("http_") and "_created" not in line:
                key, value = line.rsplit(" ", 1)
                timed = "duration" in key and not key.split("{")[0].endswith("_count") and 'le="+Inf"' not in key
                out[key] = None if timed else float(value)  # which finite bucket a duration falls in is timing
        return out

    want, got = http_series(theirs_registry), http_series(ours_metrics.registry)
    assert want and got == want
    assert got['http_request_duration_highr_seconds_bucket{le="+Inf"}'] == 8
    assert got['http_requests_total{handler="none",method="GET",status="4xx"}'] == 1
    assert got['http_request_size_bytes_sum{handler="/v1/ok"}'] == 12


@pytest.mark.skipif(not RECORDED.exists() or not SHARED.is_dir(), reason="vLLM's recorded /metrics or ../shared missing")
def test_every_http_series_vllm_exported_is_exported():
    recorded = json.loads(RECORDED.read_text())
    theirs = {s for x in recorded["info"] if x["route"] == "/metrics" for s in x["response"] if s.startswith("http_")}
    model = str(MODELS / "qwen3")
    with render_server(model, served_model_name=("qwen3-hermes",), max_model_len=4096, reasoning_parser="qwen3",
                       tool_call_parser="hermes", enable_auto_tool_choice=True) as url, \
            httpx.Client(base_url=url, timeout=30) as c:
        c.post("/v1/chat/completions/render", json=CHAT), c.post("/v1/chat/completions/render", json={})
        c.post("/v1/completions/render", json={"prompt": "hi"}), c.post("/v1/completions/render", json={})
        ids = c.post("/tokenize", json={"prompt": "hi"}).json()["tokens"]
        c.post("/tokenize", json={"prompt": "hi", "model": "nope"})
        c.post("/detokenize", json={"tokens": ids}), c.post("/detokenize", json={"tokens": [-1]})
        gen = {"request_id": "r", "choices": [{"index": 0, "token_ids": ids}]}
        c.post("/v1/chat/completions/derender", json={"generate_response": gen, "chat_request": CHAT})
        c.post("/v1/chat/completions/derender", json={})
        c.post("/v1/completions/derender", json={"generate_responses": [gen]})
        c.get("/v1/models")
        ours = _series(c.get("/metrics").text)
    assert not sorted(theirs - ours)


def test_unenforced_tool_choice_is_reported():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {**CHAT, "tools": tools, "tool_choice": "required"}
    with render_server(None, tool_call_parser="mistral", enable_auto_tool_choice=True) as url:
        resp = httpx.post(f"{url}/v1/chat/completions/render", json=body)
    assert resp.status_code == 200 and "mistral" in resp.headers["x-tool-choice-unconstrained"]
    assert "structured_outputs" not in resp.json()["sampling_params"]
    with render_server(None, tool_call_parser="hermes", enable_auto_tool_choice=True) as url:
        resp = httpx.post(f"{url}/v1/chat/completions/render", json=body)
    assert "x-tool-choice-unconstrained" not in resp.headers
    assert json.loads(resp.json()["sampling_params"]["structured_outputs"]["structural_tag"])["type"] == "structural_tag"


def test_two_workers_answer_one_merged_metrics_page(tmp_path, monkeypatch):
    """serve --workers 2: each scrape, whichever worker answers it, counts every request
    both workers served, and counters only grow between scrapes (issue 26 item 2)."""
    from test_hostile import spawned_serve

    multiproc = tmp_path / "metrics"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(multiproc))
    key = 'http_requests_total{handler="/v1/chat/completions/render",method="POST",status="2xx"}'
    ours = 'render_service_requests_total{route="/v1/chat/completions/render",status="200"}'
    with spawned_serve("--workers", "2", "--host", "127.0.0.1", "--max-model-len", "512") as url:

        def send(n: int) -> None:
            for _ in range(n):  # a new connection each: the kernel hands them to either worker
                assert httpx.post(url + "/v1/chat/completions/render", json=CHAT, timeout=30).status_code == 200

        def scrape() -> dict[str, float]:
            return _series_values(httpx.get(url + "/metrics", timeout=30).text)

        def worker_files() -> set[str]:
            return {p.name.rsplit("_", 1)[1] for p in multiproc.glob("counter_*.db")}

        send(30)
        for _ in range(20):  # both workers must have served some
            if len(worker_files()) >= 2:
                break
            send(10)
        assert len(worker_files()) >= 2, "the second worker never served a request"
        first = [scrape() for _ in range(6)]  # new connections: both workers answer some scrapes
        served = first[0][key]
        assert served >= 30 and all(s[key] == served and s[ours] == served for s in first)
        send(5)
        second = [scrape() for _ in range(6)]
        assert all(s[key] == served + 5 for s in second)
        assert second[0]["render_service_requests_in_flight"] >= 0
        assert "render_tokenizer_segment_cache_misses_total" in second[0]
        assert second[0]["process_cpu_seconds_total"] > 0


def test_plain_families_expose_what_prometheus_client_does():
    """The lock-free families of one process (http/plain_metrics.py) write the same text as
    prometheus_client's own classes for the same updates: HELP/TYPE lines, `_total`, buckets
    with Go-formatted `le` (a value on a bound counted in it), `_count`, `_sum`, `_created`."""
    import re

    import prometheus_client

    from render_service.http import plain_metrics

    def exposition(lib) -> str:
        r = prometheus_client.CollectorRegistry()
        total = lib.Counter("http_requests_total", "Total.", ("method", "status"), registry=r)
        lowr = lib.Histogram("lowr_seconds", "Few buckets.", ("handler",), buckets=(0.1, 0.5, 1), registry=r)
        highr = lib.Histogram("highr_seconds", "No labels.", buckets=(0.01, 0.5, 1, 7.5), registry=r)
        size = lib.Summary("size_bytes", "Sizes.", ("handler",), registry=r)
        live = lib.Gauge("in_flight", "Gauge.", registry=r, multiprocess_mode="livesum")
        tokens = lib.Counter("tokens", "No _total in the name.", ["route"], registry=r)
        total.labels("POST", "2xx").inc()
        total.labels("GET", "4xx").inc(3)
        for v in (0.05, 0.1, 0.7, 3, 100):
            lowr.labels("/x").observe(v)
            highr.observe(v)
        size.labels("/x").observe(12)
        size.labels("/y").observe(0)
        live.inc(), live.inc(), live.dec()
        tokens.labels("/x").inc(50)
        text = prometheus_client.generate_latest(r).decode()
        return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 T", text)

    ours, theirs = exposition(plain_metrics), exposition(prometheus_client)
    assert 'lowr_seconds_bucket{handler="/x",le="0.1"} 2.0' in theirs and "in_flight 1.0" in theirs
    assert ours == theirs
