"""The README's training walkthrough, run end to end on this machine: a served curve from a CPU GRPO run.

Runs the commands the README shows, in a private MAZE_HOME (its own embedded stack on free ports,
results database and watch ledger), so it never touches a stack or a curve of yours:

1. ``maze-serve -c SERVING up``: the embedded gateway the watcher scores through;
2. ``ray start --head --node-ip-address 127.0.0.2 ...``: the Ray cluster the job runs on;
3. ``maze-train submit --trainer local SPEC``: the GRPO job (default ``training/examples/tiny-local.yaml``);
4. ``maze-train watch JOB --adapter agent``: every exported step published, served and scored on the
   fixed 64 mazes, until the job ends.

Writes ``benchmarks/results/walkthrough.json``: per exported step the served score (solved of 64),
the trainer's own pass@1, the version, when the score landed (seconds after submit), the run's
wall time from submit to the last score, and the exact commands. With ``--gate`` the watcher puts
every step through the offline gate (``maze-train watch --gate``) and each step carries the gate's
decision and the version the name served at the end (``--out benchmarks/results/walkthrough_gated.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "walkthrough.json"
SPEC = "training/examples/tiny-local.yaml"
ADAPTER = "agent"
RAY_HOST = "127.0.0.2"  # a loopback address Ray keeps as given (README)


def _say(msg: str) -> None:
    print(f"[walkthrough {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _cli(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def serving_yaml(path: Path) -> Path:
    """The shipped embedded config on free ports (a stack of yours on the default ports stays untouched)."""
    from serving.config import ServingConfig
    from serving.local import free_port

    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["name"] = "maze-gateway-walkthrough"
    d["port"] = free_port()
    d["adapters"]["endpoint_url"] = f"http://127.0.0.1:{free_port()}"
    path.write_text(yaml.safe_dump(d))
    return path


def ray_head(tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str, list[str]]:
    """``ray start --head`` on 127.0.0.2 with every port its own; the process, dashboard address, command."""
    from serving.local import free_port

    dash = free_port()
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", f"--node-ip-address={RAY_HOST}",
           f"--dashboard-host={RAY_HOST}", f"--dashboard-port={dash}", f"--port={free_port()}", "--num-cpus=2",
           "--include-dashboard=true", "--disable-usage-stats", f"--temp-dir={tmp}",
           f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
           f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
           f"--ray-client-server-port={free_port()}", "--block"]
    # --block: the head stays a process of ours, so stopping its group stops this cluster only.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"http://{RAY_HOST}:{dash}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{address}/api/version", timeout=2).status_code == 200:
                return proc, address, cmd
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    _stop(proc)
    raise RuntimeError("the Ray head did not come up within 120 s")


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def watch_lines(cmd: list[str], env: dict[str, str], t0: float) -> list[tuple[float, str]]:
    """Run the watcher to its end; its output lines, each with seconds since ``t0``."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append((round(time.monotonic() - t0, 1), line.rstrip()))
        _say(f"watch: {line.rstrip()}")
    if proc.wait() != 0:
        raise RuntimeError(f"maze-train watch exited {proc.returncode}: {lines[-5:]}")
    return lines


def curve(db: Path, job: str, lines: list[tuple[float, str]]) -> list[dict]:
    """The run's served curve from the results store, each step with when its score landed."""
    from evaluation.served import served_curves
    from evaluation.store import Store

    store = Store(str(db))
    try:
        (c,) = served_curves(store, job)
    finally:
        store.close()
    landed = {}
    for t, line in lines:
        if ": served " in line and line.startswith("step "):
            landed[int(line.split(":", 1)[0].removeprefix("step "))] = t
    return [{"step": p.step, "served_solved": round(p.served * p.n), "n": p.n, "served": round(p.served, 4),
             "trainer_pass_at_1": p.trainer_pass_at_1, "version": p.version, "scored_at_s": landed.get(p.step),
             **({"gate": p.gate} if p.gate is not None else {})}
            for p in c.points]


def seed_spec(tmp: Path, spec: dict, seed: int) -> Path:
    """The spec with ``optim.seed`` set, as a file the CLI reads (every other setting as shipped)."""
    path = tmp / f"spec-seed{seed}.yaml"
    path.write_text(yaml.safe_dump({**spec, "optim": {**spec.get("optim", {}), "seed": seed}}))
    return path


def one_run(spec_path: str, adapter: str, ctx: dict, gate: bool = False) -> dict:
    """Submit one job and watch it to its end: its served curve, wall time and commands."""
    spec = yaml.safe_load((ROOT / spec_path).read_text())
    from training.spec import TrainSpec

    seed = TrainSpec.model_validate(spec).optim.seed  # the spec's, or its default when it leaves it out
    for key in ("ckpt_path", "export_path"):  # a fresh run: a leftover checkpoint would be resumed
        subprocess.run(["rm", "-rf", spec["output"][key]], check=True)
    env, address, tmp = ctx["env"], ctx["address"], ctx["tmp"]
    submit = _cli("training.cli", "submit", "--address", address, "--trainer", "local", spec_path)
    t0 = time.monotonic()
    job = subprocess.run(submit, env=env, check=True, cwd=ROOT, capture_output=True, text=True).stdout.strip()
    _say(f"submitted {job} (seed {seed})")
    watch = _cli("training.cli", "watch", job, "--adapter", adapter, "--address", address,
                 "--serving-config", str(ctx["serving"]), "--endpoint", ctx["base_url"],
                 "--ledger", str(tmp / f"ledger-{adapter}.json"), "--interval", "10", *(["--gate"] if gate else []))
    lines = watch_lines(watch, env, t0)
    wall_s = round(time.monotonic() - t0, 1)
    points = curve(ctx["db"], job, lines)
    best = max(points, key=lambda p: (p["served_solved"], -p["step"]))
    return {"seed": seed, "job": job, "adapter": adapter,
            "submit_to_last_score_s": wall_s, "first_step": points[0]["step"], "best_step": best["step"],
            "rise_solved": best["served_solved"] - points[0]["served_solved"], "curve": points,
            "commands": [" ".join(submit), " ".join(watch)],
            "watch_output": [f"{t:7.1f}s  {line}" for t, line in lines]}


def spread(runs: list[dict]) -> list[dict]:
    """Per exported step, the served score over the runs: each run's, and the least, the most and the mean."""
    steps = sorted({p["step"] for r in runs for p in r["curve"]})
    out = []
    for step in steps:
        solved = [p["served_solved"] for r in runs for p in r["curve"] if p["step"] == step]
        out.append({"step": step, "served_solved": solved, "min": min(solved), "max": max(solved),
                    "mean": round(sum(solved) / len(solved), 2), "runs": len(solved)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default=SPEC, help="training spec, relative to the repo root")
    parser.add_argument("--trainer-seeds", type=int, nargs="+", default=None,
                        help="run the spec once per trainer seed (optim.seed) on one gateway and Ray head; the first "
                             "run's curve is the file's headline, all runs' scores per step its spread")
    parser.add_argument("--gate", action="store_true",
                        help="gate every step (maze-train watch --gate): the alias moves only on the gate's pass")
    parser.add_argument("--out", default=str(OUT), help="results file")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="maze-walk-", dir="/tmp"))
    spec = yaml.safe_load((ROOT / args.spec).read_text())
    db, serving = tmp / "results.db", serving_yaml(tmp / "serving.yaml")
    env = {**os.environ, "MAZE_HOME": str(tmp / "home"), "MAZE_DB": str(db), "PYTHONPATH": str(ROOT),
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    plan = [(args.spec, ADAPTER)] if not args.trainer_seeds else [
        (str(seed_spec(tmp, spec, s)), f"{ADAPTER}-seed{s}") for s in args.trainer_seeds]
    up = _cli("serving.cli", "-c", str(serving), "up")
    t_up = time.monotonic()
    subprocess.run(up, env=env, check=True, cwd=ROOT)
    up_s = time.monotonic() - t_up
    base_url = f"http://127.0.0.1:{yaml.safe_load(serving.read_text())['port']}/v1"
    head = None
    try:
        head, address, ray_cmd = ray_head(tmp / "ray", env)
        ctx = {"env": env, "address": address, "tmp": tmp, "serving": serving, "base_url": base_url, "db": db}
        runs = [one_run(path, adapter, ctx, args.gate) for path, adapter in plan]
        if args.gate:
            from serving.adapters import AdapterStore, export_s3_env
            from serving.config import ServingConfig

            cfg = ServingConfig.model_validate(yaml.safe_load(serving.read_text()))
            export_s3_env(cfg)
            store = AdapterStore(cfg.adapters)
            for run in runs:
                run["served_at_end"] = store.resolve(run["adapter"]).version
                run["history"] = [{k: v for k, v in m.__dict__.items() if v is not None}
                                  for m in store.history(run["adapter"])]
    finally:
        if head is not None:
            _stop(head)
        subprocess.run(_cli("serving.cli", "-c", str(serving), "down"), check=False, env=env, cwd=ROOT)
    first = runs[0]
    result = {
        "what": "README training walkthrough: maze-train submit --trainer local + maze-train watch, served curve "
                "on the fixed 64 mazes (seeds 0-63, greedy, 15 turns) through the embedded gateway",
        "spec": args.spec, "spec_content": spec, "job": first["job"], "trainer_seed": first["seed"],
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "gateway_up_s": round(up_s, 1),
        **{k: first[k] for k in ("submit_to_last_score_s", "first_step", "best_step", "rise_solved", "curve")},
        **({"gated": True, "served_at_end": first["served_at_end"], "history": first["history"]} if args.gate else {}),
        "commands": [" ".join(up), " ".join(ray_cmd), *first["commands"]],
        "watch_output": first["watch_output"],
    }
    if len(runs) > 1:
        result["replicates"] = {"trainer_seeds": [r["seed"] for r in runs], "spread": spread(runs),
                                "rise_solved": [r["rise_solved"] for r in runs],
                                "best_step": [r["best_step"] for r in runs], "runs": runs[1:]}
    sys.path.insert(0, str(ROOT))  # run as a script: benchmarks/ is not an installed package
    from benchmarks.support.provenance import engine_settings, provenance
    from serving.config import ServingConfig

    result.update(provenance([__file__, *sys.argv[1:]],
                             engine_settings(ServingConfig.model_validate(yaml.safe_load(serving.read_text())))))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for r in runs:
        _say(f"seed {r['seed']}: served curve {[(p['step'], p['served_solved']) for p in r['curve']]}")
    _say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
