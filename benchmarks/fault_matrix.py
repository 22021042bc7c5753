"""Faults on the embedded gateway: what a client sees, whether anything is lost, and recovery time.

    .venv/bin/python benchmarks/fault_matrix.py [--out benchmarks/results/fault_matrix.json]
    .venv/bin/python benchmarks/fault_matrix.py --table   # the markdown table of the results file

Starts the embedded stack (the shipped embedded config on free ports, its own ``MAZE_HOME``) with a key
file (re-read every 2 s) and its key limits in a real Redis (``auth.store.kind: redis``, ``on_error:
open``), and a real PostgreSQL as ``maze-eval``'s results database. Then, one fault at a time, each
bounded well under a minute and undone without restarting the gateway:

* S3 down (the stack's S3 server stopped, then started again and re-seeded): requests for the base,
  an adapter resident on the replica, an adapter the gateway resolved but never loaded, and one it
  never saw;
* Redis down (stopped, started again empty);
* the results database down in the middle of ``maze-eval``: a short outage (waited out) and one
  longer than the run waits (the run stops; ``--resume`` completes it);
* the key file deleted, then corrupted (each restored afterwards);
* the adapter cache disk full (a tiny tmpfs mounted over one version's cache folder on the replica;
  needs root, else the row says it was not simulated).

For each it records the statuses, ``Retry-After`` headers, error codes and messages (and whether a
message names the store: its endpoint or an ``s3://`` location), what was lost, and the seconds from
undoing the fault to the first good answer. Writes them with the commit and the command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.support.provenance import engine_settings, provenance  # noqa: E402
from benchmarks.support.stack import dev_assets, stack_config  # noqa: E402

KEY = "sk-fault-matrix-admin-0001"
KEYS = {"keys": [{"name": "ops", "role": "admin", "models": ["*"], "secrets": [KEY],
                  "limits": {"requests": 100000}}]}  # a limit, so every request goes through the limit store
REDIS_ENV = "MAZE_FAULT_REDIS_URL"
OUTAGE_S = 20.0  # how long S3 stays down: past resolve_ttl_s (1 s), well within stale_if_error_s (300 s)
RECOVERY_BOUND_S = 45.0
EVAL_SEEDS = "0-15"


class Probe:
    """Requests to the running gateway, each summarised as a client sees it."""

    def __init__(self, cfg, base_url: str):
        import httpx

        from tests.support.gateway_stack import image_messages

        self.cfg, self.base = cfg, cfg.base_models[0].id
        self.http = httpx.Client(base_url=base_url.removesuffix("/v1"), timeout=60,
                                 headers={"Authorization": f"Bearer {KEY}"})
        self.messages = image_messages()
        self.store_marks = [cfg.adapters.endpoint_url, cfg.adapters.endpoint_url.split("//")[1], "s3://"]

    def chat(self, model: str) -> dict:
        t0 = time.perf_counter()
        r = self.http.post("/v1/chat/completions", json={"model": model, "messages": self.messages,
                                                         "max_tokens": 1, "temperature": 0})
        return self._seen(r, time.perf_counter() - t0)

    def get(self, path: str) -> dict:
        t0 = time.perf_counter()
        return self._seen(self.http.get(path), time.perf_counter() - t0)

    def _seen(self, r, seconds: float) -> dict:
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        err = body.get("error") or {}
        return {"status": r.status_code, "retry_after": r.headers.get("retry-after"), "code": err.get("code"),
                "message": err.get("message"), "model": body.get("model"), "s": round(seconds, 3)}

    def names_store(self, message: str | None) -> bool:
        return bool(message) and any(mark in message for mark in self.store_marks)


def summary(probe: Probe, seen: list[dict]) -> dict:
    """What the client saw over a fault: status counts, Retry-After values, codes, distinct messages."""
    messages = sorted({s["message"] for s in seen if s["message"]})
    return {"requests": len(seen), "statuses": dict(Counter(str(s["status"]) for s in seen)),
            "retry_after": sorted({s["retry_after"] for s in seen if s["retry_after"]}),
            "no_retry_after_on_503": sum(1 for s in seen if s["status"] == 503 and not s["retry_after"]),
            "codes": sorted({s["code"] for s in seen if s["code"]}), "messages": [m[:300] for m in messages],
            "message_names_store": any(probe.names_store(m) for m in messages),
            "versions": sorted({s["model"] for s in seen if s["model"]}),
            "latency_s_max": max((s["s"] for s in seen), default=None)}


def until_ok(call, bound_s: float = RECOVERY_BOUND_S, every_s: float = 0.25) -> float | None:
    """Seconds until ``call()`` answers 200 (None past ``bound_s``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if call()["status"] == 200:
            return round(time.monotonic() - t0, 2)
        time.sleep(every_s)
    return None


# -- S3 -------------------------------------------------------------------------------------------
def s3_down(probe: Probe, stack) -> list[dict]:
    """S3 stopped for OUTAGE_S: the base, a resident adapter, one resolved but not loaded, one never seen."""
    from serving.local import embedded

    b = probe.base
    models = {"base": b, "adapter resident on the replica": f"{b}:maze-grpo",
              "adapter resolved before, not resident": f"{b}:cold-read",
              "adapter never resolved": f"{b}:cold-never"}
    # Answered before (the versions to keep); cold-read only through its card, which resolves but loads nothing.
    before = {case: probe.chat(models[case]) for case in ("base", "adapter resident on the replica")}
    assert all(s["status"] == 200 for s in before.values())
    assert probe.get(f"/v1/models/{models['adapter resolved before, not resident']}")["status"] == 200
    seen: dict[str, list[dict]] = {case: [] for case in models}
    t0 = time.monotonic()
    embedded.stop_s3()
    while time.monotonic() - t0 < OUTAGE_S:
        for case, model in models.items():
            seen[case].append(probe.chat(model))
        time.sleep(0.5)
    down_s = time.monotonic() - t0
    t1 = time.monotonic()
    embedded.start_s3(stack.cfg, adapters=stack.adapters)
    restart_s = time.monotonic() - t1
    rows = []
    for case, model in models.items():
        recovery = until_ok(lambda m=model: probe.chat(m))
        after = probe.chat(model)
        versions_kept = before.get(case, {}).get("model") in (None, after["model"])
        rows.append({"fault": "S3 down", "case": case, "fault_s": round(down_s, 1),
                     "client_sees": summary(probe, seen[case]),
                     "lost": "nothing" if versions_kept and after["status"] == 200 else f"after: {after}",
                     "recovery_s": recovery, "recovery_from": f"S3 serving again (its restart took {restart_s:.1f}s)"})
    return rows


# -- Redis ----------------------------------------------------------------------------------------
def redis_down(probe: Probe, redis) -> list[dict]:
    """The limit store stopped for 8 s under on_error: open, then started again (empty)."""
    assert probe.chat(probe.base)["status"] == 200
    chat, usage = [], []
    t0 = time.monotonic()
    redis.stop()
    while time.monotonic() - t0 < 8:
        chat.append(probe.chat(probe.base))
        usage.append(probe.get("/v1/usage?since=1h"))
        time.sleep(0.5)
    down_s = time.monotonic() - t0
    redis.start()
    rows = []
    for case, seen, call in (("chat (key with limits)", chat, lambda: probe.chat(probe.base)),
                             ("GET /v1/usage", usage, lambda: probe.get("/v1/usage?since=1h"))):
        rows.append({"fault": "Redis down (auth.store redis, on_error open)", "case": case, "fault_s": round(down_s, 1),
                     "client_sees": summary(probe, seen), "recovery_s": until_ok(call),
                     "recovery_from": "Redis serving again (restarted empty)",
                     "lost": "the shared counters and usage kept in Redis (this Redis keeps no data on disk); "
                             "requests during the outage were limited per replica"})
    return rows


# -- key file -------------------------------------------------------------------------------------
def key_file_faults(probe: Probe, keys_file: Path) -> list[dict]:
    """The key file deleted, then corrupted, each for 8 s (reload_s 2), then restored."""
    good = keys_file.read_text()
    rows = []
    for case, damage in (("deleted", lambda: keys_file.unlink()),
                         ("corrupted (invalid YAML)", lambda: keys_file.write_text("keys: [\n  - {name: ops,"))):
        assert until_ok(lambda: probe.chat(probe.base), bound_s=20) is not None
        seen = []
        t0 = time.monotonic()
        damage()
        while time.monotonic() - t0 < 8:
            seen.append(probe.chat(probe.base))
            time.sleep(0.5)
        down_s = time.monotonic() - t0
        keys_file.write_text(good)
        rows.append({"fault": "key file", "case": case, "fault_s": round(down_s, 1), "client_sees": summary(probe, seen),
                     "recovery_s": until_ok(lambda: probe.chat(probe.base)), "recovery_from": "file restored",
                     "lost": "nothing"})
    return rows


# -- adapter cache disk ---------------------------------------------------------------------------
LORA_CACHE = Path("/tmp/ray/llm/lora/cache")  # Ray Serve LLM's loader's folder on the replica


def cache_disk_full(probe: Probe, version: str) -> list[dict]:
    """A 4 KiB tmpfs mounted over one version's cache folder: its download runs out of space."""
    folder = LORA_CACHE / f"cold-disk@{version}"
    folder.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(folder)], capture_output=True, text=True)
    row = {"fault": "adapter cache disk full", "case": "adapter not resident (its download)"}
    if mount.returncode != 0:
        return [{**row, "simulated": False, "notes": f"mount failed ({mount.stderr.strip()}); unit-tested instead "
                                                     "(tests/serving/engine/test_adapter_download_failures.py)"}]
    seen = []
    try:
        t0 = time.monotonic()
        seen = [probe.chat(f"{probe.base}:cold-disk") for _ in range(2)]
        base = probe.chat(probe.base)
        down_s = time.monotonic() - t0
    finally:
        subprocess.run(["umount", str(folder)], check=False)
    return [{**row, "simulated": True, "fault_s": round(down_s, 1), "client_sees": summary(probe, seen),
             "base_meanwhile": base["status"], "recovery_from": "space back (tmpfs unmounted)",
             "recovery_s": until_ok(lambda: probe.chat(f"{probe.base}:cold-disk")), "lost": "nothing"}]


# -- results database -----------------------------------------------------------------------------
def eval_cmd(url: str, db: str, *extra: str, wait_s: float | None = None) -> list[str]:
    """``maze-eval`` against the stack (with ``wait_s``: the run's database wait shortened to keep the
    fault under a minute)."""
    prog = "import importlib, sys; m = importlib.import_module('evaluation.evaluate')"
    prog += f"; m.DB_WAIT_S = {wait_s}" if wait_s else ""
    prog += "; from evaluation.cli import main; sys.argv[0] = 'maze-eval'; main()"
    return [sys.executable, "-c", prog, "--endpoint", url, "--api-key", KEY, "--adapter", "maze-grpo",
            "--seeds", EVAL_SEEDS, "--db", db, *extra]


def stored(db: str) -> list[tuple[str, int, int]]:
    from evaluation import Store

    store = Store(db)
    try:
        with store.engine.connect() as conn:
            return [tuple(r) for r in conn.exec_driver_sql("SELECT run_id, seed, sample FROM episodes")]
    finally:
        store.close()


def _stop_at(pg, db: str, n: int) -> float:
    while len(stored(db)) < n:
        time.sleep(0.1)
    pg.stop()
    return time.monotonic()


def _lines(text: str, *marks: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if any(m in line for m in marks)]


def db_short_outage(url: str, pg) -> dict:
    """PostgreSQL stopped for 8 s once 4 episodes are stored: the run waits and completes."""
    db, state = pg.create_database("fault_short"), {}
    stored(db)  # the tables

    def outage() -> None:
        state["down_at"] = _stop_at(pg, db, 4)
        time.sleep(8)
        pg.start()
        state["up_at"], n = time.monotonic(), len(stored(db))
        while len(stored(db)) == n and time.monotonic() - state["up_at"] < RECOVERY_BOUND_S:
            time.sleep(0.1)
        state["recovery_s"] = round(time.monotonic() - state["up_at"], 2)

    watcher = threading.Thread(target=outage, daemon=True)
    watcher.start()
    done = subprocess.run(eval_cmd(url, db), capture_output=True, text=True, timeout=300)
    watcher.join(timeout=60)
    keys = stored(db)
    return {"fault": "results database down mid maze-eval (PostgreSQL)", "case": "8 s outage (waited out)",
            "fault_s": round(state["up_at"] - state["down_at"], 1),
            "client_sees": {"exit_code": done.returncode, "lines": _lines(done.stdout, "run ", "waited", "solved")},
            "lost": f"{len(keys)} of 16 episodes stored, {len(keys) - len(set(keys))} duplicated",
            "recovery_s": state.get("recovery_s"), "recovery_from": "PostgreSQL serving again (next episode stored)"}


def db_long_outage(url: str, pg) -> dict:
    """PostgreSQL stopped once 4 episodes are stored, past the run's wait (5 s here): the run stops;
    with PostgreSQL back, ``--resume`` completes it."""
    db = pg.create_database("fault_long")
    stored(db)
    proc = subprocess.Popen(eval_cmd(url, db, wait_s=5.0), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    down_at = _stop_at(pg, db, 4)
    out, err = proc.communicate(timeout=120)
    stopped_after = time.monotonic() - down_at
    pg.start()
    before = stored(db)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    run_id = last.rpartition("maze-eval --resume ")[2].strip()
    t0 = time.monotonic()
    again = subprocess.run(eval_cmd(url, db, "--resume", run_id), capture_output=True, text=True, timeout=300)
    keys = stored(db)
    return {"fault": "results database down mid maze-eval (PostgreSQL)", "case": "outage past the run's wait",
            "fault_s": round(stopped_after, 1),
            "client_sees": {"exit_code": proc.returncode, "stderr_last_line": last,
                            "resume_exit_code": again.returncode, "resume_lines": _lines(again.stdout, "run ", "solved")},
            "lost": (f"{len(before)} stored when it stopped, {len(keys)} of 16 after --resume, "
                     f"{len(keys) - len(set(keys))} duplicated"),
            "recovery_s": round(time.monotonic() - t0, 2), "recovery_from": "the --resume run (its whole wall time)"}


# -- the run --------------------------------------------------------------------------------------
def setup(work: Path):
    """Redis, PostgreSQL, a key file and the stack's config (limits in Redis) on free ports."""
    from serving.config import ServingConfig
    from tests.support.postgres import PostgresServer, pg_bindir
    from tests.support.redis_server import RedisServer

    redis = RedisServer(work).start()
    os.environ[REDIS_ENV] = redis.url  # the stack's processes inherit it
    pg = PostgresServer().start() if pg_bindir() else None
    keys_file = work / "keys.yaml"
    keys_file.write_text(json.dumps(KEYS))
    assets = dev_assets(n_extra=3)
    data = stack_config(assets.base_dir, name="fault-matrix", keys_file=str(keys_file)).model_dump(mode="json")
    data["auth"]["store"] = {"kind": "redis", "url_env": REDIS_ENV, "on_error": "open"}
    return ServingConfig.model_validate(data), assets, redis, pg, keys_file


def seed(cfg, assets) -> tuple[dict[str, Path], dict[str, str]]:
    """The adapters every S3 (re)start seeds: the shipped ones and three more; their versions."""
    from serving.adapters import AdapterStore, export_s3_env

    export_s3_env(cfg)
    store, spec = AdapterStore(cfg.adapters), cfg.base_models[0]
    adapters = {**assets.shipped, **dict(zip(("cold-read", "cold-never", "cold-disk"), assets.extra, strict=True))}
    versions = {}
    for name, folder in adapters.items():
        versions[name] = store.push(folder, name, base=spec.id, base_source=spec.source, max_rank=cfg.lora.max_rank,
                                    force=True, vision_tower=cfg.lora.vision_tower).version
    return adapters, versions


def run() -> dict:
    from types import SimpleNamespace

    from serving.local import embedded

    work = Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    os.environ["MAZE_HOME"] = str(work / "home")
    cfg, assets, redis, pg, keys_file = setup(work)
    rows: list[dict] = []
    try:
        url = embedded.up(cfg, adapters=assets.shipped)
        adapters, versions = seed(cfg, assets)
        probe = Probe(cfg, url)
        assert probe.chat(f"{probe.base}:maze-grpo")["status"] == 200  # resident from here on
        rows += s3_down(probe, SimpleNamespace(cfg=cfg, adapters=adapters))
        rows += redis_down(probe, redis)
        rows += key_file_faults(probe, keys_file)
        if pg is None:
            rows.append({"fault": "results database down mid maze-eval", "case": "not run",
                         "notes": "no PostgreSQL server binaries; tests/evaluation/test_db_outage.py needs them too"})
        else:
            rows += [db_short_outage(url, pg), db_long_outage(url, pg)]
        rows += cache_disk_full(probe, versions["cold-disk"])
    finally:
        embedded.down()
        redis.stop()
        if pg is not None:
            pg.remove()
    return {"faults": rows, "stack": {"config": "embedded (colocated, direct ingress) on free ports",
                                      "resolve_ttl_s": cfg.adapters.resolve_ttl_s,
                                      "stale_if_error_s": cfg.adapters.stale_if_error_s,
                                      "auth": "key file (reload_s 2), limits in Redis, on_error open",
                                      "results_db": "PostgreSQL" if pg else None, "eval_seeds": EVAL_SEEDS},
            "engine": engine_settings(cfg)}


def markdown_table(results: dict) -> str:
    """The docs' table: one row per fault and case, from the results file."""
    lines = ["| fault | case | client sees | Retry-After on 503 | store named | lost | recovery |",
             "|---|---|---|---|---|---|---|"]
    for r in results["faults"]:
        seen = r.get("client_sees", {})
        if "statuses" in seen:
            sees = ", ".join(f"{n}x {s}" for s, n in sorted(seen["statuses"].items()))
            sees += f" ({', '.join(seen['codes'])})" if seen["codes"] else ""
            ra = "-" if "503" not in seen["statuses"] else ("yes" if not seen["no_retry_after_on_503"] else "no")
            named = "yes" if seen["message_names_store"] else "no"
        else:
            sees = ", ".join(f"{k} {v}" for k, v in seen.items() if k.endswith("exit_code")) or r.get("notes", "")
            ra, named = "-", "-"
        rec = "-" if r.get("recovery_s") is None else f"{r['recovery_s']} s after {r.get('recovery_from', '')}"
        lines.append(f"| {r['fault']} | {r['case']} | {sees} | {ra} | {named} | {r.get('lost', '-')} | {rec} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fault_matrix.json")
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out and exit")
    args = ap.parse_args()
    if args.table:
        print(markdown_table(json.loads(args.out.read_text())))
        return 0
    t0 = time.monotonic()
    out = run()
    out["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    out.update(provenance([__file__, *sys.argv[1:]], out.pop("engine")))
    out["bench_wall_s"] = round(time.monotonic() - t0, 1)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(markdown_table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
