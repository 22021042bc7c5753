"""The GPU machine a benchmark ran on: its device, driver and versions, and the GPU memory in use
(read from nvidia-smi; None or empty where there is none), and what an engine's LoRA slots hold."""

from __future__ import annotations

import os
import shutil
import subprocess


def _smi(query: str) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def gpu_memory_mib() -> list[int]:
    used = _smi("memory.used")
    return [int(x) for x in used.split()] if used else []


def machine() -> dict:
    from importlib.metadata import version

    versions = {}
    for pkg in ("vllm", "ray", "torch", "transformers"):
        try:
            versions[pkg] = version(pkg)
        except Exception:  # noqa: BLE001 - recorded as missing
            versions[pkg] = None
    return {"gpu": _smi("name,driver_version,memory.total"), "versions": versions,
            "cpus": os.cpu_count()}


def lora_slots(url: str) -> dict:
    """What an api_server's engine holds on the GPU for its LoRA slots (the worker extension's
    ``lora_slot_memory``, through vLLM's dev-mode ``/collective_rpc``), or the error that kept it."""
    import httpx

    try:
        resp = httpx.post(url.removesuffix("/v1") + "/collective_rpc", json={"method": "lora_slot_memory"}, timeout=60)
        resp.raise_for_status()
        return resp.json()["results"][0]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        return {"error": repr(exc)[:300]}


__all__ = ["gpu_memory_mib", "lora_slots", "machine"]
