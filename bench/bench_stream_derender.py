"""Streaming derender cost per chunk: does it stay flat as the output grows?

Workload (the one vLLM 0.33 handles at 4 ms/chunk at the start and 132 ms/chunk at token
1,200, 120 s in total, measured with qwen3 + hermes): Qwen3 reasoning, then a hermes tool
call whose arguments are 1,600 tokens, streamed one token per chunk.

This script starts its own server (``render-service serve`` on the Qwen3 tokenizer from
../shared/models, ``--reasoning-parser qwen3 --tool-call-parser hermes
--enable-auto-tool-choice``, in a subprocess on a free loopback port) and measures, as a
router would see it:

1. **stateless** — ``POST /v1/chat/completions/derender`` with ``stream: true``, one
   generate chunk + the previous ``stream_state`` per call (keep-alive connection):
   median latency of 50 chunks from tool-call token 0, 400, 800, 1,200; total time.
2. **pipe** — ``POST /v1/chat/completions/derender/pipe``, one connection, engine SSE in
   (chunked upload), OpenAI SSE out: latency from sending a chunk to reading its output
   event (chunks whose delta is empty produce no event and are not timed), and total time.
3. **replay baseline, same run** — vLLM's algorithm (every chunk rebuilds a parser and
   replays all earlier output, wire brief §3.3) run in-process on *our* parsers over the
   same windows, to show the curve the stateless design avoids.

Targets (2-core machine): last-window / first-window median ≤ 1.5 and stateless total ≤ 2 s.
Run: ``python bench/bench_stream_derender.py`` (about 20 s). Prints figures; exits 0.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import sys
import time
from pathlib import Path

import orjson

from render_service.wire.generate import ENGINE_ID_PREFIX

REPO = Path(__file__).resolve().parents[1]
QWEN = REPO.parent / "shared" / "models" / "qwen3"
POSITIONS = (0, 400, 800, 1200)
WINDOW = 50
CALL_TOKENS = 1600
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
PROMPT = "<|im_start|>user\nWrite the module.<|im_end|>\n<|im_start|>assistant\n"
REASONING = "<think>\nThe user wants a module. I will write it with one tool call, keeping the code short.\n</think>\n\n"


def workload(tok, call_tokens: int = CALL_TOKENS) -> tuple[list[int], list[int], int]:
    """(prompt ids, output ids, index of the first tool-call token) with a call of at least
    ``call_tokens`` tokens (1,600 by default)."""
    line = "def f_{i}(x):\n    return x * {i}  # 中文 ok\n"
    body, i = "", 0
    while True:
        call = '<tool_call>\n{"name": "write_file", "arguments": ' + json.dumps({"path": "/tmp/m.py", "content": body}) + "}\n</tool_call>"
        n = len(tok.encode(call))
        if n >= call_tokens:
            break
        body += line.format(i=i)
        i += 1
    head = tok.encode(REASONING)
    call_ids = tok.encode(call)
    return tok.encode(PROMPT), head + call_ids + [151645], len(head)


def chunk(ids: list[int], last: bool) -> dict:
    return {"request_id": ENGINE_ID_PREFIX + "chatcmpl-bench", "usage": None, "output_mode": "tokens",
            "choices": [{"index": 0, "finish_reason": "stop" if last else None, "stop_reason": None, "token_ids": ids,
                         "routed_experts": None, "sampling_mask": None, "weight_versions": None, "logprobs": None}]}


def run_stateless(port: int, prompt: list[int], ids: list[int]) -> tuple[list[float], float, list[bool], int]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    state, times, visible, max_state = None, [], [], 0
    chat_request = {"messages": [], "tools": TOOLS}
    t_all = time.perf_counter()
    for k, t in enumerate(ids):
        body = {"stream": True, "generate_chunk": chunk([t], k == len(ids) - 1), "stream_state": state,
                "prompt_token_ids": prompt if state is None else None, "chat_request": chat_request}
        raw = orjson.dumps(body)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions/derender", raw, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        times.append(time.perf_counter() - t0)
        if resp.status != 200:
            raise SystemExit(f"stateless call {k} failed: {data[:300]!r}")
        out = orjson.loads(data)
        state = out["stream_state"]
        max_state = max(max_state, len(orjson.dumps(state)))
        chs = out["chunk"]["choices"]
        d = chs[0]["delta"] if chs else {}
        visible.append(bool(chs) and (k == 0 or bool(d.get("content") or d.get("reasoning") or d.get("tool_calls")
                                                      or chs[0]["finish_reason"])))
    return times, time.perf_counter() - t_all, visible, max_state


def run_pipe(port: int, prompt: list[int], ids: list[int], visible: list[bool]) -> tuple[dict[int, float], float]:
    from render_service.wire import sse

    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t_all = time.perf_counter()
    s.sendall(b"POST /v1/chat/completions/derender/pipe HTTP/1.1\r\nHost: bench\r\nTransfer-Encoding: chunked\r\n\r\n")

    def send(data: bytes) -> None:
        s.sendall(b"%x\r\n%s\r\n" % (len(data), data))

    send(orjson.dumps({"prompt_token_ids": prompt, "chat_request": {"messages": [], "tools": TOOLS}}) + b"\n")
    reader, events, lat, done, failed = sse.SSEReader(), 0, {}, False, False

    def read_events() -> None:  # count complete SSE events as they arrive
        nonlocal events, done, failed
        data = s.recv(1 << 16)
        if not data:
            raise SystemExit("pipe closed early")
        for payload in reader.feed(data):
            events += 1
            done = done or sse.is_done(payload)
            failed = failed or payload.startswith(b'{"error"')

    for k, t in enumerate(ids):
        t0 = time.perf_counter()
        want = events + 1
        send(sse.event(chunk([t], k == len(ids) - 1)))
        if visible[k]:
            while events < want:
                read_events()
            lat[k] = time.perf_counter() - t0
    send(sse.DONE)
    send(b"")
    while not done:
        read_events()
    total = time.perf_counter() - t_all
    s.close()
    if failed:
        raise SystemExit("pipe stream failed")
    return lat, total


def replay_baseline(prompt: list[int], ids: list[int], start: int) -> dict[int, float]:
    """vLLM-style replay in-process: for chunk k, a fresh parser + decode of all k earlier chunks."""
    from parsers.api import ParserSpec, create_parser, prompt_starts_in_reasoning
    from render_service.derender.detokenize import IncrementalDetokenizer
    from render_service.model import load_model

    tok = load_model(str(QWEN)).tokenizer
    sir = prompt_starts_in_reasoning("qwen3", tok.decode(prompt[-64:], skip_special_tokens=False), {})
    spec = ParserSpec(reasoning="qwen3", tool="hermes", tools=TOOLS, tool_choice="auto", starts_in_reasoning=sir)
    out = {}
    for pos in POSITIONS:
        samples = []
        for k in range(start + pos, start + pos + 10):
            t0 = time.perf_counter()
            det, parser = IncrementalDetokenizer(tok, False, prompt), create_parser(spec)
            for t in ids[: k + 1]:
                parser.feed(det.push([t]))
            samples.append(time.perf_counter() - t0)
        out[pos] = statistics.median(samples)
    return out


def window(values: dict[int, float], lo: int) -> float:
    xs = [v for k, v in values.items() if lo <= k < lo + WINDOW]
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    sys.path.insert(0, str(REPO))
    if not QWEN.is_dir():
        raise SystemExit(f"needs {QWEN}")
    from bench.targets import SpawnedServer
    from render_service.model import load_model

    tok = load_model(str(QWEN)).tokenizer
    prompt, ids, start = workload(tok)
    server = SpawnedServer([str(QWEN), "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes",
                            "--enable-auto-tool-choice"])
    server.start()
    port = server.port
    try:
        server.wait_ready(120)
        run_stateless(port, prompt, ids[:50])  # warm-up
        times, total, visible, max_state = run_stateless(port, prompt, ids)
        lat, pipe_total = run_pipe(port, prompt, ids, visible)
    finally:
        server.stop()
    by_pos = dict(enumerate(times))
    print(f"workload: {len(ids)} output tokens = {start} reasoning + {len(ids) - start - 1} tool call + EOS; one token per chunk")
    print(f"{'position in call':>18} {'stateless ms':>13} {'pipe ms':>9}")
    for pos in POSITIONS:
        print(f"{pos:>18} {window(by_pos, start + pos) * 1e3:>13.3f} {window(lat, start + pos) * 1e3:>9.3f}")
    first, last = window(by_pos, start), window(by_pos, start + POSITIONS[-1])
    pfirst, plast = window(lat, start), window(lat, start + POSITIONS[-1])
    print(f"stateless: last/first window median = {last / first:.2f} (target <= 1.5); "
          f"total {total:.2f} s for {len(ids)} chunks (target <= 2 s; vLLM 0.33: ~120 s)")
    print(f"stateless: largest stream_state {max_state} bytes")
    print(f"pipe:      last/first window median = {plast / pfirst:.2f}; total {pipe_total:.2f} s "
          f"({len(lat)} timed chunks with visible output)")
    base = replay_baseline(prompt, ids, start)
    print("replay baseline (vLLM's algorithm on our parsers, in-process, 10 chunks per window):")
    for pos in POSITIONS:
        print(f"{pos:>18} {base[pos] * 1e3:>13.3f} ms/chunk")
    print(f"replay: last/first = {base[POSITIONS[-1]] / base[0]:.1f}x; "
          f"stateless vs replay at token {POSITIONS[-1]}: {base[POSITIONS[-1]] / last:.0f}x cheaper per chunk")


if __name__ == "__main__":
    main()
