"""What the load-time checks of served = trained add to an adapter's cold load, on the embedded gateway.

    .venv/bin/python benchmarks/load_checks.py [--adapters 6] [--out benchmarks/results/load_checks.json]

Starts the embedded stack (the shipped embedded config on free ports, its own ``MAZE_HOME``), publishes
``--adapters`` versions of the shipped ``maze-grpo`` (rank 64; each copy's adapter_config.json carries
its index, so each is a version of its own with the real weights), and for each one:

* cold: the first request through the gateway (one maze-sized image, one token), which downloads,
  verifies, registers and checks the version; warm: the same request once more; the cold load is
  the difference;
* the checks' own time, as the replica logs it (``adapter load checks``): the content hash of the
  downloaded files against the version (``integrity_s``) and the engine's coverage report
  (``coverage_s``), next to vLLM's registration (``register_s``).

Writes the per-adapter figures and the checks' share of the cold load (median, max, and a
bootstrap 95% interval of the median), with the commit and the command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.stack import dev_assets, stack_config  # noqa: E402

LINE = re.compile(r"adapter load checks ([^\s\"]+) (\{[^{}]*\})")


def copies(src: Path, n: int, root: Path) -> list[Path]:
    out = []
    for i in range(n):
        folder = root / f"copy-{i}"
        shutil.copytree(src, folder)
        cfg = json.loads((folder / "adapter_config.json").read_text())
        cfg["maze_copy"] = i  # another config byte: another content version, the same weights
        (folder / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
        out.append(folder)
    return out


def request_s(client, model: str) -> float:
    from tests.support.gateway_stack import image_messages, png_url

    t0 = time.perf_counter()
    client.chat.completions.create(model=model, messages=image_messages(url=png_url(side=224)), max_tokens=1,
                                   temperature=0)
    return time.perf_counter() - t0


def logged_checks(ray_temp_dir: str) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for f in (Path(ray_temp_dir) / "session_latest" / "logs").rglob("*"):
        if f.is_file() and f.suffix in (".log", ".err", ".out"):
            # Ray's JSON log lines escape the quotes of the message.
            for m in LINE.finditer(f.read_text(errors="replace").replace('\\"', '"')):
                found[m.group(1)] = json.loads(m.group(2))
    return found


def bootstrap_median(values: list[float], rounds: int = 2000) -> list[float]:
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return [round(meds[int(0.025 * rounds)], 5), round(meds[int(0.975 * rounds)], 5)]


def run(n: int) -> dict:
    import openai

    from serving.adapters import AdapterStore, export_s3_env
    from serving.local import embedded

    assets = dev_assets(n_extra=0)
    os.environ["MAZE_HOME"] = tempfile.mkdtemp(prefix="load-checks-")
    cfg = stack_config(assets.base_dir, name="load-checks")
    url = embedded.up(cfg, adapters=assets.shipped)
    base = cfg.base_models[0]
    rows = []
    try:
        export_s3_env(cfg)
        store = AdapterStore(cfg.adapters)
        client = openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0, timeout=300)
        request_s(client, base.id)  # the engine's first multimodal request is not an adapter's cost
        for i, folder in enumerate(copies(assets.shipped["maze-grpo"], n, Path(os.environ["MAZE_HOME"]))):
            ref = store.push(folder, f"cold-{i}", base=base.id, base_source=base.source, max_rank=cfg.lora.max_rank,
                             vision_tower=cfg.lora.vision_tower)
            model = f"{base.id}:cold-{i}"
            cold, warm = request_s(client, model), request_s(client, model)
            rows.append({"adapter": f"cold-{i}@{ref.version}", "cold_s": round(cold, 4), "warm_s": round(warm, 4),
                         "cold_load_s": round(cold - warm, 4)})
        checks = logged_checks(embedded.read_state().ray_temp_dir)
    finally:
        embedded.down()
    for row in rows:
        row.update(checks.get(row["adapter"], {}))
        row["checks_s"] = round(row.get("integrity_s", float("nan")) + row.get("coverage_s", float("nan")), 5)
        row["checks_share"] = round(row["checks_s"] / row["cold_load_s"], 5)
    return {"adapters": rows}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--adapters", type=int, default=6, help="adapter versions loaded cold")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "load_checks.json")
    args = ap.parse_args()
    t0 = time.monotonic()
    out = run(args.adapters)
    shares = [r["checks_share"] for r in out["adapters"]]
    out["summary"] = {"checks_share_median": round(statistics.median(shares), 5),
                      "checks_share_median_ci95": bootstrap_median(shares), "checks_share_max": max(shares),
                      "checks_s_median": statistics.median(r["checks_s"] for r in out["adapters"]),
                      "cold_load_s_median": statistics.median(r["cold_load_s"] for r in out["adapters"])}
    out["target"] = {"checks_share_max": 0.05}
    out["adapter"] = "maze-grpo (rank 64) copies"
    out["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    out["commit"], out["command"] = git_commit(), " ".join(["benchmarks/load_checks.py", *sys.argv[1:]])
    out["bench_wall_s"] = round(time.monotonic() - t0, 1)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
