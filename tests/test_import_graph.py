"""The product packages' import graph: acyclic, dependencies flow one way, and the rooms of serving,
agent and the lab (training/tiny) keep to their rules (code outside a room imports its face; each room
imports only the rooms below it).

Read from the source with ``ast`` (every import, lazy ones inside functions and those a face names
for type checkers included), so the test needs none of the packages' dependencies.
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
    assert {"agent.env.maze_2d", "serving.app", "evaluation.store", "training.spec", "training.tiny.trainers.sft"} <= set(graph)
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
    assert {m for m in graph if m.startswith("serving") for t in graph[m] if t.startswith("agent")} <= {
        m for m in graph if m == "serving.cli" or m.startswith("serving.cli.")}
    assert _imports_of(graph, "evaluation") <= {"evaluation", "agent", "serving"}
    # maze-eval without an endpoint starts the embedded gateway, and speaks model strings as the
    # gateway does (serving.adapters.ModelId): its uses of serving
    assert {t for m in graph if m.startswith("evaluation") for t in graph[m] if t.startswith("serving")} == {
        "serving.local", "serving.errors", "serving.adapters"}  # and the errors it raises


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


@pytest.mark.parametrize("builder", ["serving.app", "serving.ingress", "serving.ingress.colocated",
                                     "serving.ingress.direct", "serving.engine", "serving.placement"])
def test_what_builds_the_app_does_not_reach_the_process_manager(graph, builder):
    assert not {m for m in _reachable(graph, builder) if m.startswith("serving.local")}


# -- serving's rooms ---------------------------------------------------------------------------------
TOP_LEVEL = {"errors", "metrics", "app", "k8s"}  # besides __init__ and the rooms
# What each room may import besides itself; config (the settings room), compat (the door to Ray's and vLLM's
# internals), errors and metrics are open to every room.
ROOM_RULES = {
    "config": set(),
    "compat": set(),
    "adapters": set(),
    "auth": {"adapters"},  # a key's model patterns match ModelIds
    "placement": {"adapters"},
    "engine": {"adapters", "placement"},
    "ingress": {"adapters", "auth", "engine", "guard", "placement"},
    "parity": {"adapters"},
    "guard": {"adapters"},
    "local": {"adapters", "engine", "ingress", "app"},
    "cli": {"adapters", "auth", "guard", "placement", "parity", "local", "k8s"},  # auth: `keys check`
}
BASE = {"config", "compat", "errors", "metrics"}


def _room(module: str) -> str | None:
    """The serving room (or top-level module) ``module`` belongs to; None outside serving and for
    the package face."""
    parts = module.split(".")
    return parts[1] if parts[0] == "serving" and len(parts) > 1 else None


def test_serving_keeps_only_errors_metrics_app_k8s_the_rooms_and_configs_at_the_top():
    top = {p.stem for p in (ROOT / "serving").glob("*.py")} - {"__init__"}
    rooms = {p.name for p in (ROOT / "serving").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert top == TOP_LEVEL
    assert rooms == set(ROOM_RULES)
    assert (ROOT / "serving" / "configs").is_dir()


def _face_exports(room: str) -> set[str]:
    """The names in a room face's ``__all__`` (read from the source)."""
    tree = ast.parse((ROOT / "serving" / room / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def test_code_outside_a_room_imports_its_face(graph):
    """``from serving.adapters import AdapterStore``, never ``serving.adapters.store`` from outside
    adapters/ (tests may reach into a room's files; product code may not). A face may export a
    module as a namespace (``from serving.local import embedded``: ``embedded.up()``)."""
    exported = {f"serving.{room}.{name}" for room in ROOM_RULES for name in _face_exports(room)}
    crossings = {(m, t) for m, targets in graph.items() for t in targets
                 if t.count(".") >= 2 and _room(t) in ROOM_RULES and _room(m) != _room(t) and t not in exported}
    assert crossings == set()


def test_each_room_imports_only_the_rooms_below_it(graph):
    broken = {}
    for module, targets in graph.items():
        room = _room(module)
        if room not in ROOM_RULES:
            continue
        used = {_room(t) for t in targets if t.startswith("serving.")} - {room}
        if extra := used - ROOM_RULES[room] - BASE:
            broken[module] = sorted(extra)
    assert broken == {}


def test_the_top_level_modules_sit_below_the_rooms(graph):
    def rooms_of(module: str) -> set[str]:
        return {_room(t) for t in graph[module] if t.startswith("serving.")} - {None}

    for module in ("serving.config", "serving.errors", "serving.metrics"):
        assert rooms_of(module) <= BASE, module
    assert rooms_of("serving.app") <= BASE | {"adapters", "engine", "ingress", "placement"}
    assert rooms_of("serving.k8s") <= BASE | {"app"}


def test_only_the_cli_imports_local(graph):
    """Starting processes is local/'s alone: in serving only the CLI reaches it (the package face
    names ensure_embedded_gateway for library users by string, loaded on first use)."""
    importers = {m for m, targets in graph.items() if m.startswith("serving") and _room(m) != "local"
                 and any(_room(t) == "local" for t in targets)}
    assert {m for m in importers if _room(m) != "cli"} == set()


def _private_imports() -> list[str]:
    """``from x import _name`` (dunders aside) between the product packages' own modules; a private
    name of Ray or vLLM that the gateway builds on is the upstream's business, pinned by version."""
    found = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                    found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_name():
    assert _private_imports() == []


# Private attributes of Ray's and vLLM's objects that serving reads (serving.compat.access reads each).
UPSTREAM_PRIVATE_ATTRIBUTES = ("_engine_client", "_oai_models", "_adapter_manager", "_registered_adapters",
                               "_serve_request_context", "_get_serve_request_context", "_get_global_client",
                               "__serve_multiplex_wrapper")


def _upstream_internals(path: Path) -> list[str]:
    """What ``path`` reaches of Ray's and vLLM's internals itself: any vLLM module, Ray's ``_internal``
    and ``_private`` modules, a private name imported from Ray, a private attribute of their objects."""
    found, where = [], path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [(node.module, [a.name for a in node.names])]
        else:
            if isinstance(node, ast.Attribute) and node.attr in UPSTREAM_PRIVATE_ATTRIBUTES:
                found.append(f"{where}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Constant) and node.value in UPSTREAM_PRIVATE_ATTRIBUTES:
                found.append(f"{where}:{node.lineno} {node.value!r}")
            continue
        for module, names in modules:
            top = module.split(".")[0]
            private = top == "ray" and (set(module.split(".")) & {"_internal", "_private"}
                                        or any(n.startswith("_") for n in names))
            if top == "vllm" or private:
                found.append(f"{where}:{node.lineno} {module}")
    return found


def test_ray_and_vllm_internals_are_reached_through_compat_alone():
    """Ray Serve LLM and vLLM move their internals between releases, and the product runs on two stacks
    of them (docs/gpu.md): serving/compat/ names each one once, and nothing else in serving, or the
    benchmarks, reaches one itself."""
    files = [p for d in ("serving", "benchmarks") for p in (ROOT / d).rglob("*.py")
             if not p.is_relative_to(ROOT / "serving" / "compat")]
    assert [hit for p in files for hit in _upstream_internals(p)] == []


def test_the_internals_check_sees_a_reach(tmp_path):
    planted = tmp_path / "reach.py"
    planted.write_text("from ray.llm._internal.serve.core.server.llm_server import LLMServer\n"
                       "from ray.serve.context import _get_global_client\n"
                       "from vllm.platforms import current_platform\n"
                       "def f(engine):\n    return engine._engine_client\n")
    hits = _upstream_internals(planted)
    assert [h.split(" ", 1)[1] for h in hits] == [
        "ray.llm._internal.serve.core.server.llm_server", "ray.serve.context", "vllm.platforms", "._engine_client"]


# -- agent's and the lab's rooms -----------------------------------------------------------------------
# What each room may import besides itself (and, in agent, the error root every room may use). Code
# outside a room, in the package or in another one, imports the room's face.
AGENT_RULES = {
    "maze": set(),  # layouts, frames, actions: pure
    "protocol": {"maze"},
    "env": {"maze", "protocol"},
    "runner": {"maze", "protocol", "env"},
    "tools": {"maze", "protocol", "env", "runner"},
    "cli": {"runner", "tools"},
}
LAB_RULES = {
    "model": set(),
    "fastpath": set(),
    "policies": set(),
    "data": {"fastpath"},
    "trainers": {"model", "fastpath", "data", "policies"},
    "diagnostics": {"model", "fastpath", "data", "policies", "trainers"},
    "gpu": {"fastpath", "data", "policies"},
}
ROOMED = {"agent": AGENT_RULES, "training.tiny": LAB_RULES}


def _package_room(module: str, package: str) -> str | None:
    """The room of ``package`` that ``module`` belongs to; None outside the package, for its face and
    for its top-level modules."""
    if not module.startswith(package + "."):
        return None
    room = module[len(package) + 1:].split(".")[0]
    return room if room in ROOMED[package] else None


def _all_of(init: Path) -> set[str] | None:
    """The names in an ``__init__.py``'s ``__all__`` (read from the source); None without one."""
    for node in ast.parse(init.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(getattr(t, "id", "") == "__all__" for t in targets):
            return set(ast.literal_eval(node.value))
    return None


def test_agent_keeps_only_its_error_root_and_the_rooms_at_the_top():
    top = {p.stem for p in (ROOT / "agent").glob("*.py")} - {"__init__"}
    rooms = {p.name for p in (ROOT / "agent").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert top == {"errors"}
    assert rooms == set(AGENT_RULES)


def test_the_lab_keeps_no_module_at_the_top():
    """A new lab module goes into the room of its role, not loose beside the rooms."""
    lab = ROOT / "training" / "tiny"
    assert {p.name for p in lab.glob("*.py")} == {"__init__.py"}
    assert {p.name for p in lab.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(LAB_RULES)
    assert (lab / "gpu" / "run.sh").is_file() and (lab / "gpu" / "configs").is_dir()


@pytest.mark.parametrize("package", sorted(ROOMED))
def test_each_room_has_a_face_with_a_docstring_and_its_public_names(package):
    base = ROOT.joinpath(*package.split("."))
    for init in [base / "__init__.py", *(base / room / "__init__.py" for room in ROOMED[package])]:
        assert ast.get_docstring(ast.parse(init.read_text())), init
        assert _all_of(init) is not None, init


@pytest.mark.parametrize("package", sorted(ROOMED))
def test_code_outside_an_agent_or_lab_room_imports_its_face(graph, package):
    """``from agent.runner import EpisodeRecord``, never ``agent.runner.records`` from outside runner/,
    in agent or in the packages that build on it (tests may reach into a room's files; product code
    may not). A face may export a module as a namespace (``from training.tiny.trainers import grpo``)."""
    base = ROOT.joinpath(*package.split("."))
    exported = {f"{package}.{room}.{name}" for room in ROOMED[package] for name in _all_of(base / room / "__init__.py")}
    crossings = {(m, t) for m, targets in graph.items() for t in targets
                 if (room := _package_room(t, package)) and t != f"{package}.{room}"
                 and _package_room(m, package) != room and t not in exported}
    assert crossings == set()


@pytest.mark.parametrize("package", sorted(ROOMED))
def test_each_agent_and_lab_room_imports_only_the_rooms_below_it(graph, package):
    rules = ROOMED[package]
    broken = {}
    for module, targets in graph.items():
        room = _package_room(module, package)
        if room is None:
            continue
        used = {_package_room(t, package) for t in targets} - {room, None}
        if extra := used - rules[room]:
            broken[module] = sorted(extra)
    assert broken == {}


def test_agents_error_root_and_faces_sit_where_they_should(graph):
    """The error root imports no room (every room may use it); no room imports the package face,
    which imports every room (and registers the envs)."""
    assert not {t for t in graph["agent.errors"] if t.startswith("agent")}
    assert {m for m, targets in graph.items() if _package_room(m, "agent") and "agent" in targets} == set()


def test_the_labs_faces_load_their_modules_on_first_use():
    """A lab face names its modules as strings (``lazy_exports``; imports for type checkers only), so
    importing it pulls in no torch and ``python -m training.tiny.trainers.grpo`` does not import the
    module twice (once through its face)."""
    lab = ROOT / "training" / "tiny"
    for init in [lab / "__init__.py", *(lab / room / "__init__.py" for room in LAB_RULES)]:
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("training"):
                assert node.module == "training.tiny" and [a.name for a in node.names] == ["lazy_exports"], init
