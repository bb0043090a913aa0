"""A request body is parsed with the garbage collector paused (`http.common.read_json`).

A body of many small JSON containers (``[[0],[0],...]``) makes orjson allocate a container
per few bytes, and the collector ran every 700 of them over the young ones and, as they piled
up, over the whole heap: a 1.4 MB body of 360k lists held the event loop ~190 ms in a qwen3
server, 20 ms of it orjson's own work. Nothing a parse makes is garbage, so the collector is
paused for it and runs (once) afterwards.
"""

from __future__ import annotations

import gc

import httpx

from conftest import render_server


def test_a_body_of_many_small_containers_parses_without_collections():
    parts = b",".join([b"[0]"] * 200_000)  # 600 KB, 400k containers
    body = b'{"messages":[{"role":"user","content":[' + parts + b']}]}'
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    with render_server() as url, httpx.Client(timeout=60) as client:
        client.post(url + "/v1/chat/completions/render", json={"messages": [{"role": "user", "content": "warm"}]})
        gc.callbacks.append(count)
        try:
            answer = client.post(url + "/v1/chat/completions/render", content=body,
                                 headers={"content-type": "application/json"})
        finally:
            gc.callbacks.remove(count)
    assert answer.status_code == 400 and answer.json()["error"]["param"].startswith("messages.0.content")
    # the collector may run a few times around the parse (the request's other work, the client), not ~570 times
    assert len(collections) < 40, f"{len(collections)} collections while one request was answered"
