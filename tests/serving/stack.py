"""The embedded gateway stack for tests and benchmarks: model assets and a test config.

Uses the delivered ``models/maze-tiny`` (+ ``models/maze-grpo``) when present, else an untrained
model and random LoRA adapters built with ``training.model_builder`` into a cache folder
(``~/.cache/maze-gateway/dev``, ~10 s once). Extra random adapters for the same base are always
built there (tests push them during the run).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import openai
from PIL import Image

from serving import embedded
from serving.adapters import AdapterStore
from serving.config import REPO_ROOT, ServingConfig

LAYOUT_ENV = "MAZE_TEST_LAYOUT"  # run the stack tests on the other layout: MAZE_TEST_LAYOUT=standard|colocated
INGRESS_ENV = "MAZE_TEST_INGRESS"  # and on the other ingress: MAZE_TEST_INGRESS=proxy|direct
CACHE = Path.home() / ".cache" / "maze-gateway" / "dev"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Assets:
    base_dir: Path
    shipped: dict[str, Path]  # adapters seeded on up (name -> folder)
    extra: list[Path] = field(default_factory=list)  # more random adapters for the same base


def dev_assets(n_extra: int = 8) -> Assets:
    """Base model folder, the adapters to seed, and ``n_extra`` further random adapters."""
    from training.model_builder import BuilderConfig, build_model

    shipped_base = REPO_ROOT / "models" / "maze-tiny"
    if (shipped_base / "config.json").is_file() and (REPO_ROOT / "models" / "maze-grpo" / "adapter_config.json").is_file():
        base, shipped = shipped_base, None
    else:
        base = CACHE / "maze-tiny"
        if not (base / "config.json").is_file():
            build_model(base, BuilderConfig(seed=0))
        shipped = {"maze-grpo": _lora(base, CACHE / "lora-0", 0)}
    tag = hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:8]
    extra = [_lora(base, CACHE / f"extra-{tag}-{i}", 100 + i) for i in range(n_extra)]
    if shipped is None:
        from serving.embedded import shipped_adapters

        shipped = shipped_adapters()
    return Assets(base_dir=base, shipped=shipped, extra=extra)


def _lora(base: Path, out: Path, seed: int) -> Path:
    from training.model_builder import build_random_lora

    if not (out / "adapter_model.safetensors").is_file():
        build_random_lora(base, out, rank=8, seed=seed)
    return out


def stack_config(base_dir: Path, *, name: str = "maze-gateway-test", auth_env: str | None = None,
                 resolve_ttl_s: float = 1.0, adapters_per_replica: int | None = None,
                 layout: str | None = None, ingress: str | None = None) -> ServingConfig:
    """The shipped embedded config on free ports, pointing at ``base_dir``; ``layout`` and ``ingress``
    (default: the embedded config's, or ``$MAZE_TEST_LAYOUT`` / ``$MAZE_TEST_INGRESS``) pick the
    Serve layout and who listens on the port."""
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["layout"] = layout or os.environ.get(LAYOUT_ENV) or d["layout"]
    d["ingress"] = ingress or os.environ.get(INGRESS_ENV) or d["ingress"]
    if d["layout"] != "colocated":
        d["ingress"] = "proxy"  # direct ingress needs the colocated layout
    d["name"] = name
    d["base_models"][0]["source"] = str(base_dir)
    d["port"] = free_port()
    d["adapters"]["endpoint_url"] = f"http://127.0.0.1:{free_port()}"
    d["adapters"]["resolve_ttl_s"] = resolve_ttl_s
    d["auth"] = {"api_keys_env": auth_env}
    d["limits"] = {"max_body_bytes": 2 * 2**20, "max_images_per_request": 4, "max_image_bytes": 256 * 2**10}
    if adapters_per_replica:
        d["lora"]["adapters_per_replica"] = adapters_per_replica
    return ServingConfig.model_validate(d)


KEY = "sk-test-maze"
KEY_ENV = "MAZE_TEST_API_KEYS"


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
        embedded.s3_env(self.cfg)
        return AdapterStore(self.cfg.adapters)

    def push(self, folder, name, force=False):
        spec = self.cfg.base_models[0]
        return self.store.push(folder, name, base=spec.id, base_source=spec.source, max_rank=self.cfg.lora.max_rank, force=force)

    def first_logprobs(self, model: str) -> list[tuple[str, float]]:
        resp = self.client.chat.completions.create(model=model, messages=image_messages(), max_tokens=4,
                                                   temperature=0, logprobs=True, top_logprobs=5)
        return [(t.token, round(t.logprob, 4)) for t in resp.choices[0].logprobs.content[0].top_logprobs]
