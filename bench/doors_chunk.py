"""A streamed chunk's derender cost per door, in one run: the same engine token stream
derendered through the stateless streaming route of chat, Anthropic Messages and OpenAI
Responses (the ASGI app called straight, as `bench.inprocess_chunk` does: no socket).

``python -m bench.doors_chunk [--model DIR] [--tokens N] [--rounds R]`` builds the render
server as ``bench regress`` does (qwen3 reasoning + hermes tool parsers), renders one
conversation with one tool for each API, and streams the same output (Qwen3 reasoning, then
a hermes tool call, ``N`` tokens, one token per chunk, each chunk sending back the previous
``stream_state`` unchanged, the whole prompt and request again, as a router does). Rounds
interleave the doors (chat, Messages, Responses, chat, …) so the machine's load moves them
alike. Prints CPU microseconds per chunk (thread time, median over rounds) and each door's
ratio to chat; exits 1 when a ratio is above ``--max-ratio`` (1.1, the issue-38 target).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from .inprocess_chunk import post

MODEL = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "qwen3"
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
          "required": ["path", "content"]}
QUESTION = "Rewrite the loader so that it reads the file lazily."


def requests(model: str) -> dict[str, tuple[str, str, dict]]:
    """door -> (render path, derender path, field, client request): one conversation, one tool."""
    return {
        "chat": ("/v1/chat/completions/render", "/v1/chat/completions/derender", "chat_request",
                 {"model": model, "messages": [{"role": "user", "content": QUESTION}],
                  "tools": [{"type": "function", "function": {"name": "write_file", "parameters": SCHEMA}}]}),
        "messages": ("/v1/messages/render", "/v1/messages/derender", "messages_request",
                     {"model": model, "max_tokens": 4096, "messages": [{"role": "user", "content": QUESTION}],
                      "tools": [{"name": "write_file", "input_schema": SCHEMA}]}),
        "responses": ("/v1/responses/render", "/v1/responses/derender", "responses_request",
                      {"model": model, "input": QUESTION,
                       "tools": [{"type": "function", "name": "write_file", "parameters": SCHEMA}]}),
    }


def output_ids(tok, n: int) -> list[int]:
    """``n`` tokens of reasoning then one hermes tool call (cut to ``n``, ended by EOS)."""
    code = "\n".join(f"def step_{i}(x):\n    return x * {i} + {i * i}  # keeps it going" for i in range(400))
    text = ('<think>\nThe loader reads everything up front; make it lazy and keep the interface.\n</think>\n\n'
            '<tool_call>\n{"name": "write_file", "arguments": {"path": "src/loader.py", "content": '
            + repr(code).replace("'", '"') + '}}\n</tool_call>')
    ids = tok.encode(text, add_special_tokens=False)
    if len(ids) < n:
        raise SystemExit(f"the output has {len(ids)} tokens; ask for at most that many")
    return ids[:n - 1] + [tok.convert_tokens_to_ids("<|im_end|>")]


async def one_stream(app, path: str, fixed: dict, ids: list[int]) -> None:
    state = None
    for k, token in enumerate(ids):
        last = k == len(ids) - 1
        body = {**fixed, "stream": True, "stream_state": state,
                "generate_chunk": {"request_id": "chatcmpl-bench", "choices": [
                    {"index": 0, "token_ids": [token], "finish_reason": "stop" if last else None}]}}
        state = (await post(app, path, body))["stream_state"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-ratio", type=float, default=1.1)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from render_service.config.serve import ServeConfig
    from render_service.serve.server import build_app

    app, bundle, _ = build_app(ServeConfig(model=args.model, max_model_len=262144, reasoning_parser="qwen3",
                                           tool_call_parser="hermes", enable_auto_tool_choice=True))
    loop = asyncio.new_event_loop()
    model = bundle.served_model_names[0]
    ids = output_ids(AutoTokenizer.from_pretrained(args.model), args.tokens)
    fixed = {}
    for door, (render_path, derender_path, field, req) in requests(model).items():
        prompt = loop.run_until_complete(post(app, render_path, req))["token_ids"]
        fixed[door] = (derender_path, {"model": model, "prompt_token_ids": prompt, field: req})
    for door, (path, body) in fixed.items():  # warm-up
        loop.run_until_complete(one_stream(app, path, body, ids))
    per_chunk: dict[str, list[float]] = {door: [] for door in fixed}
    for _ in range(args.rounds):
        for door, (path, body) in fixed.items():
            t0 = time.thread_time()
            loop.run_until_complete(one_stream(app, path, body, ids))
            per_chunk[door].append(1e6 * (time.thread_time() - t0) / len(ids))
    chat = statistics.median(per_chunk["chat"])
    worst = 0.0
    print(f"{len(ids)} chunks per stream, {args.rounds} interleaved rounds (median CPU us per chunk):")
    for door, values in per_chunk.items():
        med = statistics.median(values)
        worst = max(worst, med / chat)
        print(f"  {door:<10} {med:8.1f} us   x{med / chat:.2f} of chat   (rounds: "
              + ", ".join(f"{v:.0f}" for v in values) + ")")
    sys.exit(0 if worst <= args.max_ratio else 1)


if __name__ == "__main__":
    main()
