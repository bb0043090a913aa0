"""A long tool call streamed one token per chunk: does a chunk's CPU and the state stay flat?

Issue 40's target: a 2,000-token hermes call, last chunks <= 1.2x the first chunks' CPU, state
bytes bounded — stateless (``stream_state`` sent back each chunk) and live (the pipe keeps the
parser in memory). Workload: `bench.bench_stream_derender.workload` (Qwen3 reasoning, then a
``write_file`` call whose arguments are a long module), with a 2,000-token call.

Measured in-process, so other engineers' load on the machine moves both windows alike:

1. **stateless** — the app built as ``serve`` builds it (`bench.inprocess_chunk`), each chunk
   POSTed straight to the ASGI app with the previous ``stream_state``: thread CPU per chunk,
   and the state's bytes.
2. **live parser** — the request's `parsers.OutputParser` fed the detokenized piece of each
   token (what the pipe's choice does per chunk): thread CPU per chunk, and the exported
   parser state's bytes (what a stateless stream would carry of it).

Prints, per mode, the median CPU of the call's first and last ``WINDOW`` chunks and their
ratio, and the state bytes at call tokens 100, 1,000 and the last. Run:
``python -m bench.bench_tool_stream`` (about 15 s; needs ../shared/models/qwen3).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import orjson

from parsers.api import OutputParser, ParserSpec
from render_service.wire.generate import ENGINE_ID_PREFIX

from .bench_stream_derender import PROMPT, QWEN, TOOLS, workload
from .inprocess_chunk import post
from .tokens import load_tokenizer

CALL_TOKENS = 2000
WINDOW = 200


def _chunk(ids: list[int], last: bool) -> dict:
    return {"request_id": ENGINE_ID_PREFIX + "chatcmpl-bench", "usage": None, "output_mode": "tokens",
            "choices": [{"index": 0, "finish_reason": "stop" if last else None, "stop_reason": None, "token_ids": ids,
                         "routed_experts": None, "sampling_mask": None, "weight_versions": None, "logprobs": None}]}


def stateless(prompt: list[int], ids: list[int]) -> tuple[list[float], list[int]]:
    """CPU seconds and state bytes per chunk, one token per chunk, through the app."""
    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, _, _ = build_app(ServeConfig(model=str(QWEN), max_model_len=262144, reasoning_parser="qwen3",
                                      tool_call_parser="hermes", enable_auto_tool_choice=True))
    loop = asyncio.new_event_loop()
    chat_request = {"messages": [], "tools": TOOLS}
    cpu, sizes, state = [], [], None
    for k, t in enumerate(ids):
        body = {"stream": True, "generate_chunk": _chunk([t], k == len(ids) - 1), "stream_state": state,
                "prompt_token_ids": prompt, "chat_request": chat_request}
        t0 = time.thread_time()
        out = loop.run_until_complete(post(app, "/v1/chat/completions/derender", body))
        cpu.append(time.thread_time() - t0)
        state = out["stream_state"]
        sizes.append(len(orjson.dumps(state)) if state else 0)
    return cpu, sizes


def live(tok, ids: list[int]) -> tuple[list[float], list[int]]:
    """CPU seconds per token piece through one live parser, and its exported state's bytes."""
    pieces, done = [], ""
    for k in range(1, len(ids) + 1):
        now = tok.decode(ids[:k])
        pieces.append(now[len(done):])
        done = now
    parser = OutputParser(ParserSpec(reasoning="qwen3", tool="hermes", tools=TOOLS))
    cpu, sizes = [], []
    for piece in pieces:
        t0 = time.thread_time()
        parser.feed(piece)
        cpu.append(time.thread_time() - t0)
        sizes.append(len(json.dumps(parser.export_state())))
    return cpu, sizes


def report(name: str, cpu: list[float], sizes: list[int], start: int) -> float:
    call = cpu[start:-1]
    first, last = statistics.median(call[:WINDOW]), statistics.median(call[-WINDOW:])
    at = {n: sizes[min(start + n, len(sizes) - 2)] for n in (100, 1000, len(call) - 1)}
    print(f"{name}: call chunks {len(call)}; median CPU first {WINDOW} {1e6 * first:.1f} us, last {WINDOW} "
          f"{1e6 * last:.1f} us, ratio {last / first:.2f}; state bytes at call token "
          + ", ".join(f"{n}: {b}" for n, b in at.items()))
    return last / first


def main() -> None:
    tok = load_tokenizer(str(QWEN))
    prompt, ids, start = workload(tok, CALL_TOKENS)
    print(f"output {len(ids)} tokens, the call from token {start} ({len(ids) - start - 1} tokens)")
    decoder = _Decoder(QWEN)
    report("live parser", *live(decoder, ids), start)
    report("stateless (app)", *stateless(prompt, ids), start)


class _Decoder:
    """Prefix decoding with the model's ``tokenizer.json`` (specials kept, as derender's)."""

    def __init__(self, path) -> None:
        import tokenizers

        self.tok = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)


if __name__ == "__main__":
    main()
