"""The import graph of render_service/ and parsers/ (docs/ARCHITECTURE.md, "Layers"):
no cycle, no import from a lower layer to a higher one, derender and render apart, at most
four modules at the package root. Every import counts, also those inside functions and
under ``TYPE_CHECKING``: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("render_service", "parsers")

# Bottom to top; a module is in the layer of its longest matching prefix. The same list is
# docs/ARCHITECTURE.md's, in words.
LAYERS: list[tuple[str, ...]] = [
    ("render_service", "render_service.errors", "render_service.policy", "render_service.telemetry",
     "parsers"),                                                                       # rules, errors, traces
    ("render_service.wire",),                                                          # the vocabulary
    ("render_service.config", "render_service.tokenizer", "render_service.model",
     "render_service.multimodal", "render_service.continuity"),                         # what is loaded / configured
    ("render_service.render", "render_service.derender"),                               # the shared mechanism
    ("render_service.doors",),                                                          # one home per API
    ("render_service.http",),                                                           # the render server
    ("render_service.driver",),                                                         # the four-hop driver
    ("render_service.serve",),                                                          # start-up
]
# Neighbours in one layer that must not import each other.
APART = [("render_service.render", "render_service.derender")]


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


MODULES = modules()


def _target(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> set[str]:
    """The project modules ``module`` imports (a ``from pkg import sub`` names ``pkg.sub``)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        found.update(t for t in map(_target, names) if t is not None and t != module)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def _prefix_of(module: str, prefixes) -> str | None:
    best = None
    for p in prefixes:
        if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best)):
            best = p
    return best


def layer(module: str) -> int:
    every = [(p, i) for i, group in enumerate(LAYERS) for p in group]
    # the package root's own modules are their own entries; "render_service" alone is only its __init__
    candidates = [(p, i) for p, i in every if module == p or (module.startswith(p + ".") and p != "render_service")]
    if not candidates:
        pytest.fail(f"{module} is in no layer: add it to LAYERS and to docs/ARCHITECTURE.md")
    return max(candidates, key=lambda c: len(c[0]))[1]


def test_every_module_has_a_layer():
    for m in MODULES:
        layer(m)


def test_no_import_runs_upward():
    upward = [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
              for a, bs in GRAPH.items() for b in sorted(bs) if layer(b) > layer(a)]
    assert not upward, "\n".join(upward)


def test_neighbours_stay_apart():
    crossing = [f"{a} imports {b}" for a, bs in GRAPH.items() for b in bs for x, y in APART
                if {_prefix_of(a, (x, y)), _prefix_of(b, (x, y))} == {x, y}]
    assert not crossing, "\n".join(crossing)


def test_no_cycle():
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(MODULES):
        if m not in state and (cycle := visit(m)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_at_most_four_modules_at_the_package_root():
    root = sorted(p.name for p in (ROOT / "render_service").glob("*.py"))
    assert len(root) <= 4, root


def test_the_checker_sees_a_violation():
    """The graph is read, not assumed: known edges are there, and an upward edge would be caught."""
    assert "render_service.derender.plan" in GRAPH["render_service.doors.session"]
    assert "render_service.doors" in GRAPH["render_service.http.door_routes"]
    assert layer("render_service.serve.cli") > layer("render_service.http.app") > layer("render_service.wire.sse")
    assert layer("render_service.config.serve") < layer("render_service.render.chat")
