"""The `stack` fixture's client (tests/serving/conftest.py) and request helpers for the gateway tests.

The stack's model assets and config come from :mod:`benchmarks.support.stack`, which the benchmarks share.
"""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import openai
import pytest
from PIL import Image

from serving.adapters import AdapterStore, export_s3_env

KEY = "sk-test-maze"
KEY_ENV = "MAZE_TEST_API_KEYS"

# The tenants' scoped keys (serving.auth.keys) on the test stack, next to the flat KEY (an admin).
TEAM_A, TEAM_B, OPS = "sk-team-a-test-0001", "sk-team-b-test-0001", "sk-ops-admin-test-01"
RPM_KEY, SHORT_KEY, EVAL_KEY = "sk-rpm-60-test-00001", "sk-short-window-0001", "sk-eval-limited-0001"
TENANTS = {"keys": [
    {"name": "team-a", "role": "inference", "models": ["maze-tiny", "maze-tiny:team-a-*"], "secrets": [TEAM_A]},
    {"name": "team-b", "role": "publisher", "models": ["maze-tiny", "maze-tiny:team-b-*"], "secrets": [TEAM_B]},
    {"name": "ops", "role": "admin", "models": ["*"], "secrets": [OPS]},
    # 60 requests a minute (OpenAI's RPM form): the limit test sends it a burst past the limit.
    {"name": "rpm-60", "role": "inference", "models": ["maze-tiny"], "secrets": [RPM_KEY], "limits": {"requests": 60}},
    # A window of its own, short enough that the openai client's retries (Retry-After) see it refill.
    {"name": "short-window", "role": "inference", "models": ["maze-tiny"], "secrets": [SHORT_KEY],
     "limits": {"requests": 6, "window_s": 3}},
    # maze-eval under a limit below the stack's pace (~7 turns/s with maze-grpo at c=8): its 8
    # concurrent first turns are over it, so some are refused however slowly the machine runs them.
    {"name": "eval-limited", "role": "inference", "models": ["maze-tiny", "maze-tiny:maze-grpo"],
     "secrets": [EVAL_KEY], "limits": {"requests": 7, "window_s": 2}},
]}


def write_tenant_keys(path, extra: list[dict] | None = None):
    """The key file the test stack reads (re-read every 2 s: tests may add keys)."""
    import yaml

    path.write_text(yaml.safe_dump({"keys": TENANTS["keys"] + (extra or [])}))
    return path


def png_url(side: int = 64, seed: int = 0, noisy: bool = False) -> str:
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (side, side, 3), dtype=np.uint8) if noisy else np.full((side, side, 3), 255, np.uint8)
    img[side // 2:, side // 2:] = (255, 0, 0) if not noisy else img[side // 2:, side // 2:]
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def bomb_png_url(width: int = 12000, height: int = 12000) -> str:
    """A real, complete 1-bit PNG of ``width x height`` black pixels: a few KB that decode to
    ``width * height`` pixels (432 MB as RGB at 12000 x 12000)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + b"\x00" * ((width + 7) // 8)  # filter byte + packed bits
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit grayscale
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def image_messages(n_images: int = 1, url: str | None = None) -> list[dict]:
    parts = [{"type": "text", "text": "You are in a maze. Move?"}]
    parts += [{"type": "image_url", "image_url": {"url": url or png_url()}} for _ in range(n_images)]
    return [{"role": "user", "content": parts}]


class Stack:
    """A running embedded stack and authenticated clients for it (the `stack` fixture)."""

    def __init__(self, cfg, assets, base_url):
        self.cfg, self.assets, self.base_url = cfg, assets, base_url
        self.root = base_url.removesuffix("/v1")
        self.base = cfg.base_models[0].id
        self._connect()

    def _connect(self) -> None:
        self.client = openai.OpenAI(base_url=self.base_url, api_key=KEY, max_retries=0, timeout=120)
        self.http = httpx.Client(base_url=self.root, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)

    def close_connections(self) -> None:
        """Close the clients' pooled connections (fresh clients take their place)."""
        self.client.close()
        self.http.close()
        self._connect()

    @property
    def store(self) -> AdapterStore:
        export_s3_env(self.cfg)
        return AdapterStore(self.cfg.adapters)

    def push(self, folder, name, force=False):
        spec = self.cfg.base_models[0]
        return self.store.push(folder, name, base=spec.id, base_source=spec.source, max_rank=self.cfg.lora.max_rank,
                               force=force, vision_tower=self.cfg.lora.vision_tower)

    def first_logprobs(self, model: str) -> list[tuple[str, float]]:
        resp = self.client.chat.completions.create(model=model, messages=image_messages(), max_tokens=4,
                                                   temperature=0, logprobs=True, top_logprobs=5)
        return [(t.token, round(t.logprob, 4)) for t in resp.choices[0].logprobs.content[0].top_logprobs]


def assert_cores_split() -> None:
    """The embedded stack's processes placed as ``cpu_affinity: split`` places them: vLLM's one
    worker on the worker cores, every thread of every other process of the Ray session on the rest
    (skipped on one core, where nothing is split)."""
    import os

    from serving.engine import cpu_affinity
    from serving.local import embedded
    from serving.local.processes import session_pids

    split = cpu_affinity.split_cores()
    if split is None:
        pytest.skip("one core: nothing to split")
    pids = session_pids(embedded.read_state().ray_pid)
    workers = [p for p in pids if cpu_affinity._is_worker(p)]
    others = {}
    for pid in set(pids) - set(workers):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                others[(pid, int(tid))] = os.sched_getaffinity(int(tid))
        except OSError:
            continue  # a process or thread that ended meanwhile
    assert len(workers) == 1 and os.sched_getaffinity(workers[0]) == set(split.worker), workers
    assert len(others) > 20 and all(cpus == set(split.rest) for cpus in others.values()), others
