"""The product packages' import graph: acyclic, and dependencies flow one way.

Read from the source with ``ast`` (every import, lazy ones inside functions included), so the test
needs none of the packages' dependencies.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "serving", "evaluation", "training", "maze_gateway")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The product modules ``node`` imports (``from a.b import c`` is a.b.c when c is a module)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
            base = ".".join([*anchor, *([base] if base else [])])
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    else:
        return set()
    return {name for name in names if name in modules}


def import_graph() -> dict[str, set[str]]:
    """Module -> the product modules it imports, for every module of the four packages."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    modules = set(files)
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set().union(*(_targets(node, name, is_package, modules) for node in ast.walk(tree)))
        graph[name] = edges - {name}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_sees_the_packages(graph):
    assert {"agent.env", "serving.app", "evaluation.store", "training.spec", "training.tiny.sft"} <= set(graph)
    assert "training.spec" in graph["training.overrides"]  # edges are found


def test_no_import_cycles(graph):
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_cycle_is_found_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _imports_of(graph: dict[str, set[str]], prefix: str) -> set[str]:
    return {t.split(".")[0] for m, targets in graph.items() if m.split(".")[0] == prefix for t in targets}


def test_dependencies_flow_one_way(graph):
    assert _imports_of(graph, "agent") == {"agent"}
    assert _imports_of(graph, "serving") <= {"serving", "agent"}  # neither evaluation nor training
    # the gateway itself is self-contained; only its CLI shares agent's error boundary
    assert {m for m in graph if m.startswith("serving") for t in graph[m] if t.startswith("agent")} == {"serving.cli"}
    assert _imports_of(graph, "evaluation") <= {"evaluation", "agent", "serving"}
    # maze-eval without an endpoint starts the embedded gateway: its one use of serving
    assert {t for m in graph if m.startswith("evaluation") for t in graph[m] if t.startswith("serving")} == {
        "serving.embedded", "serving.errors"}  # and the errors it raises


def test_the_framework_adapters_build_on_agent_only_and_nothing_imports_them(graph):
    # maze_gateway (OpenEnv, verifiers, Inspect AI) runs in the frameworks' own venvs, with the core alone.
    assert _imports_of(graph, "maze_gateway") == {"maze_gateway", "agent"}
    assert {m for m, targets in graph.items() if not m.startswith("maze_gateway")
            for t in targets if t.startswith("maze_gateway")} == set()


def test_the_lab_imports_agent_only_and_the_launcher_reaches_it_at_one_seam(graph):
    lab = {m for m in graph if m.startswith("training.tiny")}
    assert {t for m in lab for t in graph[m]} - lab <= {m for m in graph if m.startswith("agent")}
    callers = {m for m, targets in graph.items() if m not in lab and targets & lab}
    assert callers == {"training.local_job"}


@pytest.mark.parametrize("builder", ["serving.app", "serving.colocated", "serving.ingress", "serving.direct_ingress"])
def test_what_builds_the_app_does_not_reach_the_process_manager(graph, builder):
    assert "serving.embedded" not in _reachable(graph, builder)
