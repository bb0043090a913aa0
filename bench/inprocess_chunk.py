"""Drive a streamed derender in-process: the ASGI app called straight (no socket, no uvicorn),
for instruction counts and profiles of a chunk's app-side CPU that the machine's load does not
move.

``python -m bench.inprocess_chunk [--streams N] [--callgrind] [--profile OUT]`` builds the
render server the way ``bench regress`` spawns it (``../shared/models/qwen3``, ``--max-model-len
262144``, qwen3 reasoning + hermes tool parsers), prepares `bench.workloads.derender.StreamDerender`
(400-token tool call; the prompt rendered by this app), runs one warm-up stream, then ``N``
measured streams: every chunk as ``bench regress``'s ``stream-chunk`` sends it (the whole
``prompt_token_ids`` and ``chat_request``, the previous ``stream_state`` back unchanged), the
request's headers as httpx sends them. Prints chunks and CPU microseconds per chunk (thread
time; the instructions are callgrind's).

- ``--callgrind``: under ``valgrind --tool=callgrind --instr-atstart=no``, switches
  instrumentation on around the measured streams only (``callgrind_control -i on`` from a
  child process; start-up and warm-up are not counted).
- ``--profile OUT``: cProfile of the measured streams to OUT (pstats).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time
from pathlib import Path

import orjson

from .tokens import load_tokenizer
from .workloads import Probe
from .workloads.derender import StreamDerender

MODEL = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "qwen3"


def _scope(path: str, body: bytes) -> dict:
    headers = [(b"host", b"127.0.0.1:8000"), (b"accept", b"*/*"), (b"accept-encoding", b"gzip, deflate"),
               (b"connection", b"keep-alive"), (b"user-agent", b"python-httpx/0.28.1"),
               (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000), "scheme": "http", "method": "POST",
            "root_path": "", "path": path, "raw_path": path.encode(), "query_string": b"", "headers": headers,
            "state": {}}


async def post(app, path: str, body: dict) -> dict:
    """POST ``body`` to ``app`` at ``path``; the parsed JSON answer (raises unless 200)."""
    raw = orjson.dumps(body)
    sent = False
    out: list[dict] = []

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()

    async def send(message):
        out.append(message)

    await app(_scope(path, raw), receive, send)
    status = out[0]["status"]
    answer = b"".join(m.get("body", b"") for m in out[1:])
    if status != 200:
        raise RuntimeError(f"{path}: {status} {answer[:300]!r}")
    return orjson.loads(answer)


async def stream(app, workload: StreamDerender, index: int) -> int:
    """Run session ``index`` of ``workload`` to its end; the number of chunks."""
    gen = workload.session(index)
    answer, n = None, 0
    try:
        while True:
            call = gen.send(answer)
            answer = await post(app, call.path, call.body)
            if call.check is not None:
                call.check(answer)
            n += 1
    except StopIteration:
        return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--profile")
    args = ap.parse_args()

    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig(model=str(MODEL), max_model_len=262144, reasoning_parser="qwen3",
                                      tool_call_parser="hermes", enable_auto_tool_choice=True))
    loop = asyncio.new_event_loop()
    workload = StreamDerender(400)
    workload.prepare(Probe(load_tokenizer(str(MODEL)), None,
                           lambda p, b: loop.run_until_complete(post(app, p, b)), print))
    loop.run_until_complete(stream(app, workload, 10**9 - 1))  # warm-up
    if args.callgrind:
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True)
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.thread_time()
    chunks = sum(loop.run_until_complete(stream(app, workload, i)) for i in range(args.streams))
    used = time.thread_time() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.profile)
    if args.callgrind:
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, capture_output=True)
    print(f"{chunks} chunks, {1e6 * used / chunks:.1f} us CPU per chunk")


if __name__ == "__main__":
    main()
