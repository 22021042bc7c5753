"""serving/'s rooms from the outside: every name a face exports resolves, every import path the app
and its manifest hand to Ray Serve, vLLM or pip names a real object, and building the app still
imports no vLLM (the engine-bound classes load on first use)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("adapters", "auth", "ingress", "placement", "engine", "local", "cli")


@pytest.fixture(autouse=True)
def _stock_platform_afterwards():
    """Importing the worker extension installs the grouped kernels into this process's vLLM: put
    the stock ones back, as tests/serving/engine/test_lora_kernels.py does, for the tests after."""
    yield
    if "serving.engine.lora_worker" in sys.modules:
        from serving.engine.lora_kernels import uninstall

        uninstall()


def _resolve(path: str):
    """``module:attr`` (Ray's and pip's form) or ``module.attr`` (vLLM's ``worker_extension_cls``)."""
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("room", ["", *ROOMS])
def test_every_name_a_face_exports_resolves(room):
    face = importlib.import_module(f"serving.{room}".rstrip("."))
    missing = [name for name in face.__all__ if getattr(face, name, None) is None]
    assert missing == []


def _lazy_table(face: Path) -> set[str]:
    """The names a face loads on first use (its ``_LAZY`` table, read from the source)."""
    for node in ast.parse(face.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_LAZY":
            return {name for names in ast.literal_eval(node.value).values() for name in names}
    return set()


def _type_checking_names(face: Path) -> set[str]:
    """The names a face imports under ``if TYPE_CHECKING:`` (for type checkers and the import graph)."""
    for node in ast.parse(face.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            return {alias.asname or alias.name for imp in node.body for alias in imp.names}
    return set()


@pytest.mark.parametrize("room", ROOMS)
def test_a_faces_lazy_names_are_the_ones_it_names_for_type_checkers(room):
    face = ROOT / "serving" / room / "__init__.py"
    assert _lazy_table(face) == _type_checking_names(face)


def test_a_face_refuses_a_name_it_does_not_have():
    import serving.engine

    with pytest.raises(AttributeError, match="has no attribute 'NoSuchServer'"):
        serving.engine.NoSuchServer  # noqa: B018 - the lazy __getattr__ must not swallow typos


def test_the_import_paths_name_the_classes_they_load():
    from ray.llm._internal.serve.core.ingress.ingress import OpenAiIngress
    from ray.llm._internal.serve.core.server.llm_server import LLMServer
    from ray.serve.request_router import RequestRouter

    from serving.app import build_app_from_args
    from serving.engine import GatewayLLMServer, SERVER_CLS_PATH, WORKER_EXTENSION_PATH
    from serving.engine.lora_worker import GroupedLoraWorkerExtension
    from serving.ingress import INGRESS_CLS_PATH
    from serving.ingress.gateway import GatewayIngress
    from serving.k8s import APP_IMPORT_PATH
    from serving.placement import ROUTER_PATH
    from serving.placement.router import AdapterSpreadRouter

    assert _resolve(SERVER_CLS_PATH) is GatewayLLMServer and issubclass(GatewayLLMServer, LLMServer)
    assert _resolve(WORKER_EXTENSION_PATH) is GroupedLoraWorkerExtension
    assert _resolve(ROUTER_PATH) is AdapterSpreadRouter and issubclass(AdapterSpreadRouter, RequestRouter)
    assert _resolve(INGRESS_CLS_PATH) is GatewayIngress and issubclass(GatewayIngress, OpenAiIngress)
    assert _resolve(APP_IMPORT_PATH) is build_app_from_args


def test_the_console_scripts_resolve():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, path in scripts.items():
        if not path.startswith("maze_gateway"):  # maze-env runs in the OpenEnv venv (tests/maze_gateway)
            assert callable(_resolve(path)), name


def test_the_app_builds_its_config_without_importing_vllm():
    """Importing every face and deriving the app's arguments and manifest stays light: a driver,
    the CLI and `maze-serve render` never pay for vLLM."""
    code = (
        "import sys\n"
        "import serving, serving.adapters, serving.auth, serving.cli, serving.engine, serving.ingress\n"
        "import serving.local, serving.placement\n"
        "from serving.app import serving_args\n"
        "from serving.config import ServingConfig\n"
        "from serving.k8s import render_yaml\n"
        "serving_args(ServingConfig.shipped('embedded'))\n"
        "render_yaml(ServingConfig.shipped('production'))\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch'))\n"
        "assert not heavy, heavy[:5]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_loggers_are_named_after_their_modules():
    """A logger named by a string goes stale when its module moves, and whoever configures it by
    that name (maze-eval shows the embedded stack's start-up lines) configures nothing."""
    literal = []
    for path in (ROOT / "serving").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getLogger" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                literal.append(f"{path.relative_to(ROOT)}: {node.args[0].value}")
    assert literal == []
