"""A real local S3 server (the embedded stack's, moto's, on 127.0.0.1, restartable on its port to test outages), every
key of a store's bucket, and small, well-formed peft LoRA folders: what the adapter-store tests publish."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from serving.local import free_port


class S3Server:
    """The local S3 server (serving.local.s3_server: moto's) in a subprocess, restartable on its port
    (to test outages)."""

    def __init__(self, log: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = log  # the server's request log (one line per request, with its time), if kept

    def start(self) -> None:
        # the embedded stack's S3 server: moto's, with its conditional writes atomic as S3's are
        cmd = [sys.executable, "-m", "serving.local.s3_server", "-H", "127.0.0.1", "-p", str(self.port)]
        out = self.log.open("ab") if self.log else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=out)
        finally:
            if self.log:
                out.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url, timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("moto_server did not start")

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def log_tail(self, lines: int = 40) -> str:
        """The request log's last ``lines`` (what a failed test that used this server shows)."""
        if not self.log or not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def bucket_keys(store) -> list[str]:
    """Every key in the store's bucket (an S3 bucket, or a local store's folder's parent), read through
    the door: the store's own prefix (``lora/``) shows in them, so they show the layout as stored."""
    from serving.adapters import open_objects

    outer = store.spec.model_copy(update={"prefix": store.spec.prefix.rsplit("/", 1)[0]})
    return list(open_objects(outer).list())


def make_adapter(folder: Path, *, rank: int = 8, base: str = "maze-tiny", seed: int = 0, hidden: int = 32) -> Path:
    """A small, well-formed peft LoRA folder (config + safetensors weights)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for proj in ("q_proj", "v_proj"):
        stem = f"base_model.model.model.language_model.layers.0.self_attn.{proj}"
        tensors[f"{stem}.lora_A.weight"] = rng.standard_normal((rank, hidden)).astype(np.float32)
        tensors[f"{stem}.lora_B.weight"] = rng.standard_normal((hidden, rank)).astype(np.float32)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    cfg = {"peft_type": "LORA", "r": rank, "lora_alpha": rank, "base_model_name_or_path": base,
           "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    return folder
