"""Placement drives a replica through ``serving.placement.Replica`` alone, and the engine's replica
offers all of it (read from the source with ``ast``, so neither Ray nor vLLM is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

from serving.placement import Replica, ResidentAdapters

ROOT = Path(__file__).resolve().parents[3]
PLACEMENT = ROOT / "serving" / "placement"


def _members(protocol: type) -> set[str]:
    """A Protocol's members: its annotated attributes, methods and properties."""
    own = {n for n in vars(protocol) if not n.startswith("_")}
    return own | set(getattr(protocol, "__annotations__", {}))


def _replica_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args if isinstance(a.annotation, ast.Name) and a.annotation.id == "Replica"}


def _uses(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(attributes used on a Replica parameter, attributes used on its ``resident``), over every
    function taking a ``Replica`` (``getattr(replica, "name")`` counts as a use of ``name``)."""
    on_replica, on_resident = set(), set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not (params := _replica_params(fn)):
            continue
        residents = {t.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
                     and _is_attr(node.value, params, "resident") for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in params:
                    on_replica.add(node.attr)
                elif node.value.id in residents:
                    on_resident.add(node.attr)
            elif isinstance(node, ast.Attribute) and _is_attr(node.value, params, "resident"):
                on_resident.add(node.attr)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                target, name = node.args[0], node.args[1]
                if isinstance(target, ast.Name) and target.id in params and isinstance(name, ast.Constant):
                    on_replica.add(name.value)
    return on_replica, on_resident


def _is_attr(node: ast.AST, params: set[str], attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id in params)


def test_placement_uses_nothing_of_a_replica_beyond_its_protocol():
    used, used_resident = set(), set()
    for path in sorted(PLACEMENT.glob("*.py")):
        on_replica, on_resident = _uses(ast.parse(path.read_text()))
        used |= on_replica
        used_resident |= on_resident
    assert used, "no function of placement takes a Replica: the scan would prove nothing"
    assert used <= _members(Replica), sorted(used - _members(Replica))
    assert used_resident <= _members(ResidentAdapters), sorted(used_resident - _members(ResidentAdapters))
    # the loop and the pre-load both read the resident set, so the second check is not vacuous
    assert {"models", "last_used"} <= used_resident


def test_the_loop_takes_the_replica_as_a_replica():
    """Every placement function that is handed the replica says so, so the scan above sees it."""
    tree = ast.parse((PLACEMENT / "agent.py").read_text())
    takers = {fn.name for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
              and any(a.arg == "server" for a in fn.args.args)}
    typed = {fn.name for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             and _replica_params(fn)}
    assert takers and takers == typed


def test_the_engine_replica_offers_the_whole_protocol():
    tree = ast.parse((ROOT / "serving" / "engine" / "llm_server.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GatewayLLMServer")
    offered = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    offered |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert _members(Replica) <= offered, sorted(_members(Replica) - offered)


def test_the_scan_catches_a_reach_past_the_protocol():
    code = ("async def f(server: Replica):\n"
            "    lru = server.resident\n"
            "    server.engine.x()\n"
            "    return lru.private_field\n")
    on_replica, on_resident = _uses(ast.parse(code))
    assert "engine" in on_replica - _members(Replica)
    assert "private_field" in on_resident - _members(ResidentAdapters)
