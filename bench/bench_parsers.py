"""Parser cost per chunk, per family: does it stay flat as the output grows?

For each family a long output (reasoning, then one tool call whose arguments hold ~40 k
characters) is fed in 4-character pieces (about one token each), three ways:

1. **stream** — one parser, ``feed`` per piece;
2. **stream + restore** — the stateless derender path: ``export_state`` → JSON →
   ``OutputParser.restore`` before every piece;
3. **replay baseline, same run** — vLLM's approach (wire brief §3.3): every chunk re-parses
   the whole output so far (``parse_complete`` on the prefix), measured on the first and
   last 50 chunks only (the full replay would take minutes).

Printed per family: mean µs/chunk for 1 and 2, the ratio of the last-window to the
first-window median per-chunk cost (flat ⇒ about 1), and the replay baseline's
last-window cost as a multiple of ours. Target: last/first ≤ 1.5 for 1 and 2, except
``pythonic`` under restore: a Python call may only be emitted once complete, so its
unfinished text is state and the stateless path pays O(call so far) per chunk (the
plain stream stays flat; the one-off ``ast`` parse lands on the closing chunk). Run:
``python bench/bench_parsers.py`` (about 10 s). Prints figures; exits 0.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from statistics import fmean as mean
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parsers.api import OutputParser, ParserSpec, create_parser, parse_complete  # noqa: E402

VALUE = ("The quick brown fox jumps over the lazy dog, 42 times; ünïcödé ✓ \"quoted\" {braces} "
         "[brackets] </tool_call> \\ ") * 400
PIECE = 4
WINDOW = 50

WORKLOADS = {
    "qwen3+hermes": (ParserSpec(reasoning="qwen3", tool="hermes", starts_in_reasoning=True),
                     "Let me think this through. " * 40 + "</think>\n\n<tool_call>\n"
                     + json.dumps({"name": "write", "arguments": {"text": VALUE}}, ensure_ascii=False)
                     + "\n</tool_call>"),
    "qwen3_coder": (ParserSpec(tool="qwen3_coder"),
                    "<tool_call>\n<function=write>\n<parameter=text>\n" + VALUE
                    + "\n</parameter>\n</function>\n</tool_call>"),
    "kimi_k2": (ParserSpec(tool="kimi_k2"),
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.write:0<|tool_call_argument_begin|>"
                + json.dumps({"text": VALUE}, ensure_ascii=False) + "<|tool_call_end|><|tool_calls_section_end|>"),
    "openai (harmony)": (ParserSpec(reasoning="openai_gptoss", tool="openai"),
                         "<|channel|>analysis<|message|>" + "Thinking. " * 100 + "<|end|><|start|>assistant"
                         "<|channel|>commentary to=functions.write <|constrain|>json<|message|>"
                         + json.dumps({"text": VALUE}, ensure_ascii=False) + "<|call|>"),
    "pythonic": (ParserSpec(tool="pythonic"), "[write(text=" + repr(VALUE) + ")]"),
}


def pieces(text: str) -> list[str]:
    return [text[i:i + PIECE] for i in range(0, len(text), PIECE)]


def stream(spec: ParserSpec, chunks: list[str], restore: bool) -> list[float]:
    """Seconds per chunk."""
    parser = create_parser(spec)
    times = []
    for chunk in chunks:
        t0 = time.perf_counter()
        if restore:
            parser = OutputParser.restore(spec, json.loads(json.dumps(parser.export_state())))
        parser.feed(chunk)
        times.append(time.perf_counter() - t0)
    parser.finish()
    return times


def replay(spec: ParserSpec, chunks: list[str], start: int) -> float:
    """vLLM-style: seconds per chunk when each chunk re-parses the whole prefix."""
    prefix = "".join(chunks[:start])
    t0 = time.perf_counter()
    for chunk in chunks[start:start + WINDOW]:
        prefix += chunk
        parse_complete(spec, prefix)
    return (time.perf_counter() - t0) / WINDOW


def main() -> None:
    print(f"{'family':18} {'chars':>7} {'chunks':>6} | {'stream us/chunk':>15} {'last/first':>10} | "
          f"{'+restore us/chunk':>17} {'last/first':>10} | {'replay last-window x':>20}")
    for name, (spec, text) in WORKLOADS.items():
        chunks = pieces(text)
        plain = stream(spec, chunks, restore=False)
        restored = stream(spec, chunks, restore=True)
        last = len(chunks) - WINDOW
        ratio = median(plain[last:]) / median(plain[:WINDOW])
        ratio_r = median(restored[last:]) / median(restored[:WINDOW])
        replay_last = replay(spec, chunks, last)
        print(f"{name:18} {len(text):7d} {len(chunks):6d} | {mean(plain) * 1e6:15.1f} {ratio:10.2f} | "
              f"{mean(restored) * 1e6:17.1f} {ratio_r:10.2f} | {replay_last / median(plain[last:]):20.0f}")


if __name__ == "__main__":
    main()
