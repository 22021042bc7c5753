"""The adapter store's one storage door, read from the source: S3's vocabulary stays in
serving/adapters/s3.py (no boto call, no ``.call("...")``, no botocore import elsewhere), and only
serving/adapters/ knows where a version's files live (no ``{name}@{version}/`` key built outside it).

Read with ``ast`` and regular expressions, so the test needs none of the packages' dependencies.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "serving", "evaluation", "training", "maze_gateway", "benchmarks", "scripts")
DOOR_S3 = "serving/adapters/s3.py"
BOTO_CALLS = re.compile(r"\b(get_object|put_object|head_object|delete_objects?|list_objects(_v2)?|head_bucket|"
                        r"create_bucket|copy_object|download_file|upload_file|download_fileobj|upload_fileobj)\b")


def _sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for pkg in PRODUCT if (ROOT / pkg).is_dir()
            for p in (ROOT / pkg).rglob("*.py")}


def _code(text: str) -> str:
    """``text`` without its docstrings and comments (what runs, not what describes it)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def _imported(text: str) -> set[str]:
    """Top-level packages ``text`` imports (lazy imports inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_the_scan_sees_the_door_and_the_product():
    sources = _sources()
    assert DOOR_S3 in sources and "serving/adapters/store.py" in sources and "benchmarks/load_checks.py" in sources
    assert BOTO_CALLS.search(_code(sources[DOOR_S3]))  # the door names them
    assert "botocore" in _imported(sources[DOOR_S3])


def test_no_call_of_a_boto_verb_outside_the_door():
    found = [path for path, text in _sources().items() if path != DOOR_S3 and '.call("' in text]
    assert found == []
    named = {path: sorted({m.group(0) for m in BOTO_CALLS.finditer(_code(text))})
             for path, text in _sources().items() if path != DOOR_S3}
    assert {path: verbs for path, verbs in named.items() if verbs} == {}


def test_boto_is_imported_by_the_door_alone():
    sources = _sources()
    assert [path for path, text in sources.items() if "botocore" in _imported(text)] == [DOOR_S3]
    assert [path for path, text in sources.items() if "boto3" in _imported(text)] == [DOOR_S3]


def _version_keys(text: str) -> list[str]:
    """The f-strings of ``text`` that build a ``...@{version}/...`` key (``@`` then a value then ``/``)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for before, value, after in zip(parts, parts[1:], parts[2:], strict=False):
                if (isinstance(before, ast.Constant) and str(before.value).endswith("@")
                        and isinstance(value, ast.FormattedValue)
                        and isinstance(after, ast.Constant) and str(after.value).startswith("/")):
                    found.append(ast.unparse(node))
    return found


def test_only_the_adapters_room_builds_a_versions_key():
    assert _version_keys('key = f"{root}{name}@{version}/{fname}"') and not _version_keys('f"{name}@{version}"')
    builders = {path: _version_keys(text) for path, text in _sources().items()}
    inside = {path for path, keys in builders.items() if keys and path.startswith("serving/adapters/")}
    assert inside == {"serving/adapters/layout.py"}  # the store's layout, written once
    assert {path: keys for path, keys in builders.items() if keys and path not in inside} == {}
