"""The gateway on a GPU: against plain vLLM on the same GPU, adapters against the base, cold adapter
loads, and the embedded model's evaluation and parity through the GPU gateway.

    python benchmarks/gpu_serving.py PART [PART ...] [--rounds 5] [--block-s 6] [--out FILE]

Runs on the GPU machine with the GPU stack installed (docs/gpu.md). The parts share the servers they
start through a state file in ``--work``, so a run can span several commands:

* ``up``: the gateway (``maze-serve up``'s embedded stack: a local S3 endpoint, Ray, Ray Serve LLM
  on vLLM) and ``vllm.entrypoints.openai.api_server`` side by side on the one GPU, each with half of
  its memory for the engine, both serving a Qwen3-VL-8B-shaped model with random weights
  (``load_format: dummy``, benchmarks/support/gpu_assets.py). Like for like: the api_server gets
  every engine argument the gateway's LLMConfig gives its engine (``gateway_bench.vllm_launch``:
  the LoRA limits, the image cache, the worker extension) and the gateway's adapters as
  ``--lora-modules``. The gateway config is ``production.yaml``'s engine settings with the bench's
  model, Serve's default layout (an ingress deployment before the LLM server, Serve's proxy on the
  port) and ``stream_batching_ms`` from ``--stream-batching-ms``.
* ``compare``: the base model through each side at concurrency 1, 8, 32 and 64, in alternating
  blocks (the side that goes first alternating by round), closed loop: time to first token (TTFT)
  p50 and p99 and completed requests per second. Per block pair the ratios gateway / vLLM; the
  figures are the medians of the pairs' ratios with bootstrap 95% intervals.
* ``adapters``: through the gateway, the base, one rank-16 adapter, 8 distinct rank-16 adapters in
  the same batches, and one rank-64 adapter, in alternating blocks at concurrency 1 and 32: each
  adapter setting's throughput and TTFT against the base's in the same round.
* ``cold``: ``--cold`` new rank-16 adapters pushed to the S3 store, each asked for once (the
  replica's 8 slots already full, so each load evicts one): time to first token of that first
  request, against a second request for the same adapter once it is resident.
* ``embedded``: a second gateway with the shipped ``maze-tiny`` (real weights) on the GPU:
  ``maze-serve up``, ``maze-eval --adapter maze-grpo`` (64 mazes; the score against the CPU
  gateway's in ``models/scores_gateway.json``), ``maze-serve adapters verify maze-grpo --parity``,
  ``maze-serve down``; each command's exit code, time and last lines.
* ``layouts``: where the gateway's cost sits: the gateway restarted in each of ``--layouts`` (e.g.
  ``colocated``: one Serve hop, the engine in the replica that answers HTTP; ``ingress4``: four
  ingress replicas before the LLM server) and compared with the same api_server as in ``compare``.
  It leaves the gateway down: run it after the parts that use the shipped layout.
* ``down``: both servers stopped.

Every request is the maze workload's turn: the tuple protocol's first-turn text and one distinct
rendered maze frame, 8 tokens with ``ignore_eos`` so both sides generate the same tokens, streamed.
Results merge into ``benchmarks/results/gpu_serving.json`` with the device, driver, versions,
commit and command of each part.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.paired_ab import median_ci95  # noqa: E402
from benchmarks.support.gpu_machine import gpu_memory_mib, lora_slots, machine  # noqa: E402
from benchmarks.support.provenance import provenance  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "gpu_serving.json"
BASE = "q3vl8b"
MIX = [f"mix-{i}" for i in range(8)]
MAX_TOKENS = 8


# -- the request and the load ---------------------------------------------------------------------

def frame_pool(n: int = 256) -> list[str]:
    """``n`` distinct maze frames (data URLs): maze_2d/simple mazes of seeds 0..n-1 at their start."""
    from benchmarks.support.gateway_bench import maze_png_url

    return [maze_png_url(seed) for seed in range(n)]


class Workload:
    """The turn requests: the first turn's text with a new frame each time, models round-robin."""

    def __init__(self) -> None:
        from agent.protocol.formats import get_protocol

        self.text = get_protocol("tuple").initial_text(7, 7)
        self.frames = frame_pool()
        self.sent = 0

    def body(self, model: str) -> dict:
        self.sent += 1
        image = self.frames[self.sent % len(self.frames)]
        return {"model": model, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "stream": True,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": self.text}, {"type": "image_url", "image_url": {"url": image}}]}]}


async def one_request(session, url: str, body: dict) -> float:
    """Send one streamed chat request; its time to the first chunk with content (s)."""
    t0 = time.perf_counter()
    first = None
    async with session.post(url + "/chat/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:300]}")
        async for raw in resp.content:
            line = raw.decode().strip()
            if first is None and line.startswith("data: {") and _has_content(line[6:]):
                first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("no content streamed")
    return first


def _has_content(chunk: str) -> bool:
    """Whether a stream chunk carries generated text (the first one has only the role)."""
    choices = json.loads(chunk).get("choices") or [{}]
    return bool((choices[0].get("delta") or {}).get("content"))


async def block(url: str, models: list[str], concurrency: int, seconds: float, work: Workload) -> dict:
    """Closed loop at ``concurrency`` for ``seconds``: requests completed per second and TTFTs."""
    import aiohttp

    ttfts: list[float] = []
    errors: list[str] = []
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as session:
        stop = time.perf_counter() + seconds
        turn = itertools.count()

        async def worker() -> None:
            while time.perf_counter() < stop:
                try:
                    ttfts.append(await one_request(session, url, work.body(models[next(turn) % len(models)])))
                except Exception as exc:  # noqa: BLE001 - counted and shown, the block goes on
                    errors.append(repr(exc)[:200])
                    await asyncio.sleep(0.05)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    ttfts.sort()
    return {"requests": len(ttfts), "rps": len(ttfts) / elapsed, "errors": len(errors), "first_errors": errors[:2],
            "ttft_p50_ms": 1000 * _pct(ttfts, 0.5), "ttft_p99_ms": 1000 * _pct(ttfts, 0.99)}


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def warm(url: str, models: list[str], concurrency: int, work: Workload) -> None:
    asyncio.run(block(url, models, concurrency, 3.0, work))


# -- paired blocks ----------------------------------------------------------------------------------

def alternate(sides: dict[str, tuple[str, list[str]]], concurrency: int, rounds: int, seconds: float,
              work: Workload) -> dict:
    """Blocks of each side in turn, ``rounds`` times (the first side rotating); per side its blocks,
    per other side the ratios to the first side's block of the same round."""
    names = list(sides)
    blocks: dict[str, list[dict]] = {n: [] for n in names}
    for name, (url, models) in sides.items():
        warm(url, models, concurrency, work)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            url, models = sides[name]
            blocks[name].append(asyncio.run(block(url, models, concurrency, seconds, work)))
            print(f"  c={concurrency} round {r} {name}: {_brief(blocks[name][-1])}", flush=True)
    ref = names[0]
    out = {"blocks": {n: [_rounded(b) for b in bs] for n, bs in blocks.items()}}
    for name in names[1:]:
        pairs = list(zip(blocks[name], blocks[ref], strict=True))
        out[f"{name}_vs_{ref}"] = {
            "throughput_ratio": _summary([a["rps"] / b["rps"] for a, b in pairs]),
            "ttft_p50_ratio": _summary([a["ttft_p50_ms"] / b["ttft_p50_ms"] for a, b in pairs]),
            "ttft_p50_added_ms": _summary([a["ttft_p50_ms"] - b["ttft_p50_ms"] for a, b in pairs]),
            "ttft_p99_ratio": _summary([a["ttft_p99_ms"] / b["ttft_p99_ms"] for a, b in pairs]),
        }
    return out


def _summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "ci95": median_ci95(values),
            "min": round(min(values), 3), "max": round(max(values), 3), "n": len(values)}


def _rounded(b: dict) -> dict:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in b.items()}


def _brief(b: dict) -> str:
    return f"{b['rps']:.1f} req/s, TTFT p50 {b['ttft_p50_ms']:.1f} ms p99 {b['ttft_p99_ms']:.1f} ms, {b['errors']} errors"


# -- the servers ------------------------------------------------------------------------------------

def gateway_config(model_dir: Path, args, port: int, s3_port: int, base: str = BASE, engine: dict | None = None,
                   profile: dict | None = None):
    """production.yaml's gateway on this machine: ``model_dir`` as its one base, a local S3 endpoint,
    8 adapter slots of rank up to 64, no keys, on 127.0.0.1."""
    from serving.config import ServingConfig

    d = ServingConfig.shipped("production").model_dump(mode="json")
    model = {"id": base, "source": str(model_dir), "max_model_len": 4096,
             "engine_kwargs": engine or {"dtype": "bfloat16", "load_format": "dummy",
                                         "gpu_memory_utilization": args.memory, "limit_mm_per_prompt": {"image": 1}}}
    if profile:
        model["agent_profile"] = profile
    d.update(name="maze-gpu-bench", host="127.0.0.1", port=port, accelerator_type=None, auth={}, extensions=[],
             base_models=[model], stream_batching_ms=args.stream_batching_ms,
             adapters={"prefix": "s3://maze-gpu-bench/adapters", "endpoint_url": f"http://127.0.0.1:{s3_port}"},
             lora={"max_rank": 64, "adapters_per_replica": 8, "vision_tower": False})
    return ServingConfig.model_validate(d)


def up(args, state: dict) -> dict:
    """Start the api_server, then the gateway with the same engine settings, and publish the adapters."""
    from benchmarks.support.gateway_bench import start_vllm
    from benchmarks.support.gpu_assets import qwen3vl_8b_folder, random_adapter
    from serving.adapters import AdapterStore
    from serving.local import embedded, free_port

    work = Path(args.work)
    model_dir = qwen3vl_8b_folder(work / "q3vl8b")
    adapters = {name: random_adapter(work / "adapters" / name, model_dir, 16, seed)
                for seed, name in enumerate(MIX)}
    adapters["r64"] = random_adapter(work / "adapters" / "r64", model_dir, 64, 100)
    os.environ["MAZE_HOME"] = str(work / "home")
    cfg = gateway_config(model_dir, args, free_port(), free_port())
    state.update(model_dir=str(model_dir), config=cfg.model_dump(mode="json"))
    t0 = time.monotonic()
    lora_modules = [f"{name}={folder}" for name, folder in adapters.items()]
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # the api_server's /collective_rpc, to read its LoRA slots
    try:
        proc, vllm_url, logf = start_vllm(model_dir, cfg, served_name=BASE, extra_args=["--lora-modules", *lora_modules])
    finally:
        os.environ.pop("VLLM_SERVER_DEV_MODE")
    logf.close()
    state.update(vllm_url=vllm_url, vllm_pid=proc.pid, vllm_log=logf.name)
    (work / "state.json").write_text(json.dumps(state))  # `down` stops it even if the gateway fails to start
    vllm_ready_s = time.monotonic() - t0
    print(f"  vLLM api_server ready in {vllm_ready_s:.0f} s", flush=True)
    t0 = time.monotonic()
    state["gateway_url"] = embedded.up(cfg, progress=lambda m: print("  gateway:", m, flush=True))
    gateway_ready_s = time.monotonic() - t0
    store = AdapterStore(cfg.adapters)
    for name, folder in adapters.items():
        store.push(folder, name, base=BASE, base_source=str(model_dir), max_rank=64)
    return {"gateway_ready_s": round(gateway_ready_s, 1), "vllm_ready_s": round(vllm_ready_s, 1),
            "gateway_config": {k: state["config"][k] for k in ("layout", "ingress", "stream_batching_ms", "lora")},
            "engine_kwargs": state["config"]["base_models"][0]["engine_kwargs"],
            "vllm_args": _vllm_args(cfg), "gpu_memory_after_up_mib": gpu_memory_mib(),
            "lora_slots": lora_slots(vllm_url)}


def _vllm_args(cfg) -> list[str]:
    from benchmarks.support.gateway_bench import vllm_launch

    return vllm_launch(cfg)["args"]


def down(args, state: dict) -> dict:
    from serving.local import embedded

    os.environ["MAZE_HOME"] = str(Path(args.work) / "home")
    if state.get("vllm_pid"):
        try:
            os.killpg(state["vllm_pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    embedded.down()
    state.clear()
    return {}


# -- the parts --------------------------------------------------------------------------------------

def compare(args, state: dict) -> dict:
    work = Workload()
    sides = {"vllm": (state["vllm_url"], [BASE]), "gateway": (state["gateway_url"], [BASE])}
    out = {}
    for c in args.concurrency:
        out[f"c{c}"] = alternate(sides, c, args.rounds, args.block_s, work)
    return out


def adapters(args, state: dict) -> dict:
    work = Workload()
    url = state["gateway_url"]
    sides = {"base": (url, [BASE]), "one_r16": (url, [f"{BASE}:{MIX[0]}"]),
             "eight_r16": (url, [f"{BASE}:{m}" for m in MIX]), "one_r64": (url, [f"{BASE}:r64"])}
    # r64 and the eight share the replica's 8 slots: each setting's first block loads what it needs
    # (its warm-up), and the alternation keeps reloading, as a real mix of 9 adapters on 8 slots would.
    return {f"c{c}": alternate(sides, c, args.rounds, args.block_s, work) for c in (1, 32)}


def cold(args, state: dict) -> dict:
    """First-token time of adapters never served before, against the same adapter once resident."""
    from benchmarks.support.gpu_assets import random_adapter
    from serving.adapters import AdapterStore
    from serving.config import ServingConfig

    import aiohttp

    cfg = ServingConfig.model_validate(state["config"])
    store = AdapterStore(cfg.adapters)
    work, url, model_dir = Workload(), state["gateway_url"], Path(state["model_dir"])

    async def first_token(model: str) -> float:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            return await one_request(session, url, work.body(model))

    asyncio.run(block(url, [f"{BASE}:{m}" for m in MIX], 8, 3.0, work))  # the 8 slots full
    cold_s, warm_s = [], []
    for i in range(args.cold):
        name = f"cold-{i}"
        store.push(random_adapter(Path(args.work) / "adapters" / name, model_dir, 16, 1000 + i), name,
                   base=BASE, base_source=str(model_dir), max_rank=64)
        cold_s.append(asyncio.run(first_token(f"{BASE}:{name}")))
        warm_s.append(asyncio.run(first_token(f"{BASE}:{name}")))
        print(f"  {name}: first token {1000 * cold_s[-1]:.0f} ms cold, {1000 * warm_s[-1]:.0f} ms resident", flush=True)
    ms = sorted(1000 * x for x in cold_s)
    return {"rank": 16, "loads": len(ms), "cold_first_token_ms": [round(x, 1) for x in ms],
            "cold_p50_ms": round(_pct(ms, 0.5), 1), "cold_p95_ms": round(_pct(ms, 0.95), 1),
            "resident_p50_ms": round(1000 * statistics.median(warm_s), 1),
            "adapter_mb": round(sum(f.stat().st_size for f in (Path(args.work) / "adapters" / "cold-0").iterdir()) / 2**20, 1)}


# What each ``layouts`` variant changes in the bench's gateway config (section: fields).
LAYOUTS = {"colocated": {"layout": "colocated"}, "ingress4": {"replicas": {"ingress_replicas": 4}}}


def layout_config(config: dict, name: str):
    """The gateway config ``config`` with layout variant ``name`` applied (validated)."""
    from serving.config import ServingConfig

    d = dict(config)
    for key, change in LAYOUTS[name].items():
        d[key] = {**d[key], **change} if isinstance(change, dict) else change
    return ServingConfig.model_validate(d)


def layouts(args, state: dict) -> dict:
    """Each layout variant's gateway against the api_server, as ``compare`` does for the shipped one."""
    from serving.local import embedded

    os.environ["MAZE_HOME"] = str(Path(args.work) / "home")
    out, work = {}, Workload()
    for name in args.layouts:
        cfg = layout_config(state["config"], name)
        embedded.down()
        state.pop("gateway_url", None)
        t0 = time.monotonic()
        url = embedded.up(cfg, progress=lambda m: print(f"  gateway ({name}):", m, flush=True))
        sides = {"vllm": (state["vllm_url"], [BASE]), "gateway": (url, [BASE])}
        out[name] = {"changes": LAYOUTS[name], "ready_s": round(time.monotonic() - t0, 1),
                     **{f"c{c}": alternate(sides, c, args.rounds, args.block_s, work) for c in args.concurrency}}
    embedded.down()
    return out


def embedded_model(args, state: dict) -> dict:
    """The shipped maze-tiny and maze-grpo through a GPU gateway, by the commands a user types."""
    import yaml

    from serving.local import free_port

    work = Path(args.work)
    engine = {"dtype": "bfloat16", "gpu_memory_utilization": args.memory}  # vLLM's GPU LoRA kernels take 16-bit only
    cfg = gateway_config(ROOT / "models" / "maze-tiny", args, free_port(), free_port(), base="maze-tiny",
                         engine=engine, profile={"protocol": "tuple", "history": "window:2"})
    path = work / "gpu-tiny.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_defaults=True)))
    env = {**os.environ, "MAZE_HOME": str(work / "home-tiny")}
    bindir = Path(sys.executable).parent
    serve = [str(bindir / "maze-serve"), "-c", str(path)]
    db = work / "eval.sqlite"
    steps = {"up": [*serve, "up"],
             "eval": [str(bindir / "maze-eval"), "--endpoint", f"http://127.0.0.1:{cfg.port}/v1", "--adapter",
                      "maze-grpo", "--concurrency", "16", "--db", str(db), "--json"],
             "verify_parity": [*serve, "adapters", "verify", "maze-grpo", "--parity", "--json"],
             "down": [*serve, "down"]}
    out: dict = {"config": cfg.model_dump(mode="json", exclude_defaults=True)}
    for name, cmd in steps.items():
        t0 = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        out[name] = {"command": " ".join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd)),
                     "exit_code": proc.returncode, "seconds": round(time.monotonic() - t0, 1),
                     "tail": (proc.stdout + proc.stderr)[-1500:]}
        print(f"  {name}: exit {proc.returncode} in {out[name]['seconds']} s", flush=True)
        if name in ("eval", "verify_parity") and proc.returncode in (0, 1):
            try:
                out[name]["result"] = json.loads(proc.stdout)
            except json.JSONDecodeError:
                pass
        if name == "up" and proc.returncode != 0:
            break
    if "result" in out.get("eval", {}):
        out["score_vs_cpu"] = score_vs_cpu(out["eval"]["result"], db)
    return out


def score_vs_cpu(result: dict, db: Path) -> dict:
    """The GPU run's score against the CPU gateway's (models/scores_gateway.json), seed by seed."""
    from evaluation import Store

    cpu = next(r for r in json.loads((ROOT / "models" / "scores_gateway.json").read_text()) if r["model"] == "maze-grpo")
    rows = Store(str(db)).episode_rows(result["run_id"])
    gpu = {str(r["seed"]): bool(r["success"]) for r in rows}
    differ = sorted(int(s) for s in gpu if gpu[s] != cpu["outcomes"].get(s))
    s = result["summary"]
    return {"gpu_solved": s["solved"], "gpu_solve_rate": s["solve_rate"], "episodes": s["n"],
            "cpu_solved": cpu["solved"], "cpu_ci95": cpu["ci95"],
            "within_cpu_interval": cpu["ci95"][0] <= s["solve_rate"] <= cpu["ci95"][1],
            "seeds_with_other_outcome": differ}


# -- the results ----------------------------------------------------------------------------------

def markdown_table(results: dict) -> str:
    """The docs' table: per concurrency, each side's median block and the gateway / vLLM ratios."""
    lines = ["| concurrency | vLLM req/s | gateway req/s | throughput ratio (95% CI) | vLLM TTFT p50 | "
             "gateway TTFT p50 | TTFT p50 added (95% CI) | TTFT p99 ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for key, point in results["compare"].items():
        if not key.startswith("c") or not key[1:].isdigit():
            continue
        med = {side: {f: statistics.median(b[f] for b in blocks) for f in ("rps", "ttft_p50_ms")}
               for side, blocks in point["blocks"].items()}
        r = point["gateway_vs_vllm"]
        tput, added = r["throughput_ratio"], r["ttft_p50_added_ms"]
        lines.append(
            f"| {key[1:]} | {med['vllm']['rps']:.1f} | {med['gateway']['rps']:.1f} | "
            f"{tput['median']:.2f} ({tput['ci95'][0]:.2f}-{tput['ci95'][1]:.2f}) | {med['vllm']['ttft_p50_ms']:.1f} ms | "
            f"{med['gateway']['ttft_p50_ms']:.1f} ms | +{added['median']:.1f} ms ({added['ci95'][0]:.1f} to "
            f"{added['ci95'][1]:.1f}) | {r['ttft_p99_ratio']['median']:.2f} |")
    return "\n".join(lines)


PARTS = {"up": up, "compare": compare, "adapters": adapters, "cold": cold, "embedded": embedded_model,
         "layouts": layouts, "down": down}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("parts", nargs="*", metavar="PART", help=f"what to run, in order: {', '.join(PARTS)}")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "maze-gpu-bench"),
                    help="folder for the model, the adapters and the servers' state")
    ap.add_argument("--out", type=Path, default=OUT, help="results file (each part's figures merge into it)")
    ap.add_argument("--rounds", type=int, default=5, help="block pairs per concurrency")
    ap.add_argument("--block-s", type=float, default=6.0, help="seconds per block")
    ap.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 64],
                    help="concurrencies of the comparison")
    ap.add_argument("--cold", type=int, default=24, help="cold adapter loads")
    ap.add_argument("--memory", type=float, default=0.4, help="gpu_memory_utilization of each engine")
    ap.add_argument("--stream-batching-ms", type=float, default=0.0,
                    help="the gateway's stream_batching_ms (Ray's default is 50)")
    ap.add_argument("--layouts", type=lambda s: s.split(","), default=list(LAYOUTS),
                    help=f"the layouts part's variants, among {', '.join(LAYOUTS)}")
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out and exit")
    args = ap.parse_args()
    if args.table:
        print(markdown_table(json.loads(args.out.read_text())))
        return 0
    if bad := [name for name in args.layouts if name not in LAYOUTS]:
        ap.error(f"--layouts takes {', '.join(LAYOUTS)} (not {', '.join(bad)})")
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown or not args.parts:
        ap.error(f"name the parts to run, among {', '.join(PARTS)}" + (f" (not {', '.join(unknown)})" if unknown else ""))
    Path(args.work).mkdir(parents=True, exist_ok=True)
    state_file = Path(args.work) / "state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results["machine"] = machine()
    for part in args.parts:
        print(f"[{part}]", flush=True)
        t0 = time.monotonic()
        figures = PARTS[part](args, state)
        state_file.write_text(json.dumps(state))
        if part != "down":
            results[part] = {**figures, "seconds": round(time.monotonic() - t0, 1),
                             "settings": {"rounds": args.rounds, "block_s": args.block_s, "memory": args.memory,
                                          "stream_batching_ms": args.stream_batching_ms},
                             **provenance(sys.argv)}
            results.update(provenance(sys.argv))  # the file's own: its latest command's
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
