"""Gateway and plain vLLM on the same model: starting both, the bench request and its load generator.

    .venv/bin/python benchmarks/support/gateway_bench.py [--quick] [--out FILE]

The helpers here (``start_gateway``, ``start_vllm``, ``run_load``, the bench request: one-turn chat,
one maze image, 8 tokens, ``ignore_eos``) are what ``layout_ab.py`` and ``paired_ab.py`` measure with.
Run as a script, it measures one thing at a time, in a fixed order (the machine has 2 cores):

1. the embedded gateway stack (local S3 + Ray Serve LLM + vLLM CPU), in the embedded config's
   ``layout`` and ``ingress`` (``--layout``/``--ingress`` override; recorded in ``gateway``), with
   ``adapters_per_replica`` 8 (= vLLM ``max_loras`` 8): time to ready and memory, then latency p50/p95 and throughput at
   concurrency 1, 8, 32 on the base model; adapter cold load (pushed to S3, then the first streamed
   token); a block of requests for one adapter, then a block mixing 8 adapters, at concurrency 8;
2. ``python -m vllm.entrypoints.openai.api_server`` with the same engine settings (``vllm_launch``:
   engine arguments, engine env, core split, niceness): time to ready, memory and the same
   latency/throughput runs.

Because the parts run one after another, the machine's drift between them enters every ratio it
prints; ``paired_ab.py`` (gateway against vLLM) and ``lora_parity.py`` (8 adapters mixed against
one) interleave their comparisons instead, and their results are the ones docs/benchmarks.md reports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.support.stack import dev_assets, free_port, stack_config

log = logging.getLogger("gateway_bench")
MAX_TOKENS = 8
CONCURRENCY = (1, 8, 32)


def maze_png_url(seed: int = 0) -> str:
    """Frame of maze_2d/simple seed ``seed`` at its start, as the runner sends it (a data: URL)."""
    from agent.maze import generate_from_seed, png_data_url, render_frame

    m = generate_from_seed(7, 7, seed)
    return png_data_url(render_frame(m.grid, m.start, m.goal))


def payload(model: str, image: str, stream: bool = False) -> dict:
    return {"model": model, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "stream": stream,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "You are in a 7x7 maze. Move?"},
                                                      {"type": "image_url", "image_url": {"url": image}}]}]}


async def run_load(base_url: str, models: list[str], n: int, concurrency: int, image: str) -> dict:
    """``n`` chat requests, ``concurrency`` at a time, models taken round-robin; latency and throughput."""
    latencies: list[float] = []
    errors: list[str] = []
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as client:
        async def one(i: int) -> None:
            async with sem:
                t = time.perf_counter()
                r = await client.post("/chat/completions", json=payload(models[i % len(models)], image))
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                latencies.append(time.perf_counter() - t)

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - start
    if errors:
        log.error("%d/%d requests failed, e.g. %s", len(errors), n, errors[0])
    latencies.sort()
    return {"n": n, "concurrency": concurrency, "models": len(models), "errors": len(errors),
            "p50_s": round(statistics.median(latencies), 4),
            "p95_s": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 4),
            "throughput_rps": round(n / wall, 2), "tokens_per_s": round(n * MAX_TOKENS / wall, 1)}


async def first_token_s(base_url: str, model: str, image: str) -> float:
    async with httpx.AsyncClient(base_url=base_url, timeout=300) as client:
        t = time.perf_counter()
        async with client.stream("POST", "/chat/completions", json=payload(model, image, stream=True)) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data:") and '"content"' in line:
                    return time.perf_counter() - t
    raise RuntimeError(f"no token streamed for {model}")


def latency_suite(base_url: str, model: str, image: str, quick: bool) -> dict:
    out = {}
    asyncio.run(run_load(base_url, [model], 8, 4, image))  # warm-up (first multimodal request compiles caches)
    for c in CONCURRENCY:
        n = max(16 if quick else 40, c * (2 if quick else 4))
        out[f"c{c}"] = asyncio.run(run_load(base_url, [model], n, c, image))
        log.info("%s c=%d: %s", model, c, out[f"c{c}"])
    return out


def session_procs(sids: list[int]) -> list:
    """Every live process (``psutil.Process``) in the given sessions, this one excluded."""
    import psutil

    procs = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) in sids and proc.pid != os.getpid():
                procs.append(proc)
        except OSError:  # gone, or not ours to ask
            continue
    return procs


def session_memory_gb(sids: list[int]) -> dict:
    """RSS and PSS (shared pages counted once) of every process in the given sessions."""
    import psutil

    rss = pss = 0
    for proc in session_procs(sids):
        try:
            info = proc.memory_full_info()
            rss, pss = rss + info.rss, pss + info.pss
        except (psutil.Error, OSError):
            continue
    return {"rss_gb": round(rss / 2**30, 2), "pss_gb": round(pss / 2**30, 2)}


def background_load(exclude_sids: list[int]) -> dict:
    """Load average and CPU hogs outside the benchmarked stack (the machine may be shared)."""
    import psutil

    procs = []
    for proc in psutil.process_iter(["name"]):
        try:
            if os.getsid(proc.pid) not in exclude_sids and proc.pid != os.getpid():
                proc.cpu_percent(None)
                procs.append(proc)
        except (psutil.Error, OSError):
            continue
    time.sleep(1.0)
    hogs = []
    for proc in procs:
        try:
            pct = proc.cpu_percent(None)
            if pct > 20:
                hogs.append({"cmd": " ".join(proc.cmdline())[:80], "cpu_pct": round(pct)})
        except psutil.Error:
            continue
    return {"loadavg_1m": round(os.getloadavg()[0], 2), "foreign_cpu_hogs": hogs}


def variant_config(assets, name: str, layout: str | None = None, ingress: str | None = None,
                   engine_env: dict[str, str | None] | None = None, lora: dict | None = None,
                   allocator: str | None = None, base: dict | None = None, cpu_affinity: str | None = None):
    """The embedded config on free ports (8 adapters per replica) with one benchmark variant's
    changes: ``engine_env`` changes its engine ``env`` (None removes a variable), ``lora`` fields of
    its ``lora`` section, ``allocator`` and ``cpu_affinity`` replace its own, ``base`` changes fields
    of its base model. Both sides of a comparison are built from it."""
    cfg = stack_config(assets.base_dir, name=name, resolve_ttl_s=5.0, adapters_per_replica=8, layout=layout,
                       ingress=ingress)
    if engine_env:
        merged = {**cfg.env, **engine_env}
        cfg = cfg.model_copy(update={"env": {k: v for k, v in merged.items() if v is not None}})
    if lora:
        cfg = cfg.model_copy(update={"lora": cfg.lora.model_copy(update=lora)})
    if allocator:
        cfg = cfg.model_copy(update={"allocator": allocator})
    if cpu_affinity:
        cfg = cfg.model_copy(update={"cpu_affinity": cpu_affinity})
    if base:
        cfg = cfg.model_copy(update={"base_models": [cfg.base_models[0].model_copy(update=base)]})
    return cfg


def start_gateway(assets, name: str, layout: str | None = None, ingress: str | None = None,
                  env: dict[str, str] | None = None, cfg=None, **changes):
    """The embedded stack (fresh ``MAZE_HOME``) for ``cfg`` (default: :func:`variant_config` of
    ``changes``), once ready: (config, base_url, seconds to ready). ``env`` reaches the Ray processes
    only (``ray start`` inherits this process's environment, which is restored afterwards). Stop it
    with ``serving.local.embedded.down()``."""
    from serving.local import embedded

    os.environ["MAZE_HOME"] = tempfile.mkdtemp(prefix=f"{name}-")
    cfg = cfg or variant_config(assets, name, layout, ingress, **changes)
    env = env or {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    t0 = time.monotonic()
    try:
        base_url = embedded.up(cfg, adapters=assets.shipped)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    return cfg, base_url, round(time.monotonic() - t0, 1)


def bench_gateway(assets, image: str, quick: bool, layout: str | None = None, ingress: str | None = None) -> dict:
    from serving.adapters import AdapterStore
    from serving.local import embedded

    cfg, base_url, ready_s = start_gateway(assets, "maze-gateway-bench", layout, ingress)
    base = cfg.base_models[0].id
    out: dict = {"layout": cfg.layout, "ingress": cfg.ingress, "time_to_ready_s": ready_s}
    state = embedded.read_state()
    out["memory_after_ready"] = session_memory_gb([state.ray_pid, state.moto_pid])
    try:
        out["background_before"] = background_load([state.ray_pid, state.moto_pid, os.getsid(0)])
        out["base"] = latency_suite(base_url, base, image, quick)
        store = AdapterStore(cfg.adapters)
        spec = cfg.base_models[0]

        def push(i: int, name: str) -> None:
            store.push(assets.extra[i], name, base=base, base_source=spec.source, max_rank=cfg.lora.max_rank)

        # Cold load: a never-seen adapter, S3 -> replica disk -> vLLM -> first token.
        cold = []
        for i in range(3):
            push(i, f"cold-{i}")
            cold.append(round(asyncio.run(first_token_s(base_url, f"{base}:cold-{i}", image)), 3))
        warm = [round(asyncio.run(first_token_s(base_url, f"{base}:cold-{i}", image)), 3) for i in range(3)]
        out["adapter_cold_first_token_s"] = {"runs": cold, "median": statistics.median(cold),
                                             "warm_same_adapters": warm, "warm_median": statistics.median(warm)}
        # 8 adapters interleaved vs 1, all resident (max_loras = adapters_per_replica = 8).
        names = [f"mix-{i}" for i in range(8)]
        for i, name in enumerate(names):
            push(i, name)
        n = 48 if quick else 96
        asyncio.run(run_load(base_url, [f"{base}:{x}" for x in names], 16, 8, image))  # load all eight
        one = asyncio.run(run_load(base_url, [f"{base}:{names[0]}"], n, 8, image))
        eight = asyncio.run(run_load(base_url, [f"{base}:{x}" for x in names], n, 8, image))
        out["adapters_one_c8"], out["adapters_eight_interleaved_c8"] = one, eight
        out["memory_after_load"] = session_memory_gb([state.ray_pid, state.moto_pid])
        out["background_after"] = background_load([state.ray_pid, state.moto_pid, os.getsid(0)])
    finally:
        embedded.down()
    return out


# Ray starts its workers (the replica, and so its engine) at this niceness unless RAY_worker_niceness says otherwise.
RAY_WORKER_NICENESS = 15


def vllm_launch(cfg, ray_env: dict[str, str] | None = None) -> dict:
    """What the gateway gives its engine, as vLLM's own api_server takes it, so that a comparison
    measures the gateway and not its settings: every engine argument of the base model's LLMConfig
    (max_model_len, dtype, eager mode, the image cache, the LoRA limits, the worker extension with
    the grouped CPU LoRA kernels, the mp executor Ray Serve LLM uses on CPU), the engine env (the
    allocator's LD_PRELOAD, the worker's core binding), the core split (applied once it is up) and
    Ray's niceness. Returns {"args", "env", "split", "niceness"}."""
    from serving.app import llm_config_dicts
    from serving.engine import plan_core_split

    cfg, split = plan_core_split(cfg)
    llm = llm_config_dicts(cfg)[0]
    # Ray Serve LLM runs a CPU engine on vLLM's mp executor and a GPU one on its ray executor, which
    # only a Ray cluster offers: a GPU api_server keeps vLLM's own default.
    kwargs = {**llm["engine_kwargs"], **({"distributed_executor_backend": "mp"} if cfg.device == "cpu" else {})}
    args: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else [f"--no-{key.replace('_', '-')}"]
        else:  # vLLM's command line reads a mapping or a list as JSON
            args += [flag, json.dumps(value) if isinstance(value, dict | list) else str(value)]
    env = {k: v for k, v in llm["runtime_env"]["env_vars"].items() if not k.startswith("AWS_")}
    niceness = int((ray_env or {}).get("RAY_worker_niceness", RAY_WORKER_NICENESS))
    return {"args": args, "env": env, "split": split, "niceness": niceness}


def start_vllm(base_dir: Path, cfg=None, ray_env: dict[str, str] | None = None, served_name: str = "maze-tiny",
               extra_args: list[str] | None = None) -> tuple[subprocess.Popen, str, object]:
    """``vllm.entrypoints.openai.api_server`` on ``base_dir`` with the engine settings of ``cfg`` (default:
    the shipped embedded config's) given as :func:`vllm_launch` gives them, serving it as
    ``served_name`` with ``extra_args`` after the engine's (e.g. ``--lora-modules``), once healthy:
    (process, base_url, log file)."""
    from serving.engine import pin_session

    if cfg is None:
        cfg = stack_config(base_dir, name="maze-bench-vllm", adapters_per_replica=8)
    launch = vllm_launch(cfg, ray_env)
    port = free_port()
    cmd = ["nice", "-n", str(launch["niceness"]), sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(base_dir), "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           *launch["args"], *(extra_args or [])]
    logf = open(Path(tempfile.gettempdir()) / "maze-bench-vllm.log", "wb")  # noqa: SIM115 - closed in stop_vllm
    t0 = time.monotonic()
    env = {**os.environ, **launch["env"], "PYTHONPATH": str(ROOT)}  # the worker extension is the project's
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() - t0 > 600:
                raise RuntimeError(f"vLLM api_server did not start; see {logf.name}")
            time.sleep(0.5)
        if launch["split"] is not None:  # as `up` does for the gateway's session once its engine is up
            import psutil

            pids = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]
            pin_session(pids, launch["split"])
    except BaseException:
        stop_vllm(proc, logf)
        raise
    return proc, f"http://127.0.0.1:{port}/v1", logf


def stop_vllm(proc: subprocess.Popen, logf) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    logf.close()


def bench_vllm(base_dir: Path, image: str, quick: bool) -> dict:
    t0 = time.monotonic()
    proc, base_url, logf = start_vllm(base_dir)
    try:
        out: dict = {"time_to_ready_s": round(time.monotonic() - t0, 1)}
        out["memory_after_ready"] = session_memory_gb([proc.pid])
        out["background_before"] = background_load([proc.pid, os.getsid(0)])
        out["base"] = latency_suite(base_url, "maze-tiny", image, quick)
        out["background_after"] = background_load([proc.pid, os.getsid(0)])
        return out
    finally:
        stop_vllm(proc, logf)


def ratios(gw: dict, vl: dict) -> dict:
    out = {}
    for c in CONCURRENCY:
        g, v = gw["base"][f"c{c}"], vl["base"][f"c{c}"]
        out[f"c{c}"] = {"p50_added_pct": round(100 * (g["p50_s"] / v["p50_s"] - 1), 1),
                        "p95_added_pct": round(100 * (g["p95_s"] / v["p95_s"] - 1), 1),
                        "p50_added_ms": round(1000 * (g["p50_s"] - v["p50_s"]), 1),
                        "throughput_ratio": round(g["throughput_rps"] / v["throughput_rps"], 3)}
    out["eight_adapters_vs_one_throughput"] = round(
        gw["adapters_eight_interleaved_c8"]["throughput_rps"] / gw["adapters_one_c8"]["throughput_rps"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "maze-gateway-bench.json",
                    help="where the figures go (no results file: paired_ab.py is the committed comparison)")
    ap.add_argument("--quick", action="store_true", help="fewer requests per point")
    ap.add_argument("--layout", choices=["standard", "colocated"], default=None,
                    help="Serve layout of the gateway (default: the embedded config's)")
    ap.add_argument("--ingress", choices=["proxy", "direct"], default=None,
                    help="who listens on the gateway's port (default: the embedded config's)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a log line per request would load the client
    assets = dev_assets(n_extra=8)
    image = maze_png_url()
    gw = bench_gateway(assets, image, args.quick, args.layout, args.ingress)
    vl = bench_vllm(assets.base_dir, image, args.quick)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "model": str(assets.base_dir), "max_tokens": MAX_TOKENS, "request": "chat, one 175x175 PNG, ignore_eos",
        "gateway": gw, "vllm": vl, "ratios": ratios(gw, vl),
        "targets": {"p50_added_pct_max": 10, "adapter_cold_first_token_s_max": 1.0, "eight_vs_one_min": 0.8},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ratios"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
