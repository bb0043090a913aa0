"""Realistic text for the workloads: real source code, a coding-agent system prompt, its
tools, and Qwen3-style reasoning sentences.

The code is the Python standard library of the interpreter running the bench (real code,
comments and docstrings, the bulk of what a coding agent's context holds); it is the same
for every target of one run. Selection is deterministic: a (seed, offset) gives the same
text every time.
"""

from __future__ import annotations

import functools
import random
import sysconfig
from pathlib import Path

CORPUS_CHARS = 800_000

SYSTEM_PROMPT = (
    "You are a coding agent working in a Python repository. Use the tools to read files, run the "
    "tests and write changes; never guess a file's content, read it first. Keep changes small and "
    "explain each one in a sentence. When the tests pass, summarise what you changed and why.\n"
    "Rules: do not touch files outside the repository; prefer the standard library; every public "
    "function gets a docstring that names its inputs, outputs and the errors it raises."
)

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "path relative to the repository root"},
            "start_line": {"type": "integer"}, "end_line": {"type": "integer"}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Create or overwrite a file of the repository.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string", "description": "the whole new file"}},
            "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run pytest on the given paths and return its output.",
        "parameters": {"type": "object", "properties": {
            "paths": {"type": "array", "items": {"type": "string"}}, "keyword": {"type": "string"}},
            "required": ["paths"]}}},
]

_REASONING = (
    "The user wants the {mod} module changed so that {what}.",
    "I have not read {path} yet, so I should not guess its content.",
    "The failing test points at the error handling in {mod}; the exception is swallowed there.",
    "A smaller change would be to keep the public function and add a helper beside it.",
    "The docstring has to say which errors are raised, otherwise the next reader will not know.",
    "Running the whole suite takes long; I will run only the tests of {mod} first.",
    "The previous tool result shows {n} lines; the function I need starts near line {line}.",
    "Wait, the caller also passes None here, so the check must come before the loop.",
    "I will write the whole file in one tool call, keeping the unrelated parts unchanged.",
    "That matches what the issue describes, and it keeps the behaviour for valid input.",
)
_WHAT = ("it retries on timeouts", "empty input is rejected with a clear message",
         "the cache is bounded", "paths are normalised before use", "the parser keeps its state small")


@functools.lru_cache(maxsize=1)
def code_corpus() -> str:
    """About `CORPUS_CHARS` characters of real Python source: the standard library's
    top-level modules in name order, each introduced by a ``# file:`` line."""
    parts, size = [], 0
    roots = [Path(sysconfig.get_path("stdlib")), Path(__file__).resolve().parents[1] / "render_service"]
    for root in roots:
        for path in sorted(root.glob("*.py")):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            parts.append(f"# file: {path.name}\n{text}\n")
            size += len(parts[-1])
            if size >= CORPUS_CHARS:
                return "".join(parts)
    if not parts:  # pragma: no cover - every Python install has its stdlib sources
        raise RuntimeError("no Python source found for the bench corpus")
    return "".join(parts)


def excerpt(offset: int, chars: int) -> str:
    """``chars`` characters of the corpus from ``offset`` (modulo its length), wrapping."""
    text = code_corpus()
    start = offset % len(text)
    out = text[start:start + chars]
    while len(out) < chars:
        out += text[: chars - len(out)]
    return out


def offset_for(seed: int) -> int:
    """A corpus offset for ``seed``, spread over the whole corpus, at a line start."""
    text = code_corpus()
    pos = random.Random(seed).randrange(len(text))
    nl = text.find("\n", pos)
    return 0 if nl < 0 else nl + 1


def reasoning(seed: int, sentences: int = 6) -> str:
    """A few sentences of coding-agent reasoning, varied by ``seed``."""
    rng = random.Random(seed)
    mod = rng.choice(("config", "cache", "loader", "client", "parser", "scheduler"))
    fill = {"mod": mod, "path": f"src/{mod}.py", "what": rng.choice(_WHAT),
            "n": rng.randint(80, 900), "line": rng.randint(10, 400)}
    return " ".join(rng.choice(_REASONING).format(**fill) for _ in range(sentences))
