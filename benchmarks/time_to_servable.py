"""Seconds from a new adapter version being published to the first token that version serves, on the
embedded gateway.

    .venv/bin/python benchmarks/time_to_servable.py [--versions 10] [--resolve-ttl-s S]
        [--out benchmarks/results/time_to_servable.json]

Starts the embedded stack (the shipped embedded config on free ports, its own ``MAZE_HOME``, the
shipped ``adapters.resolve_ttl_s`` unless ``--resolve-ttl-s``), then measures ``--versions`` new
versions on each path (copies of the shipped ``maze-grpo``, each its own version through one
changed byte of adapter_config.json, so each is a cold load of the real weights):

* ``push_cli_s3``: the real CLI, ``maze-serve -c CFG adapters push FOLDER NAME --force``, as a
  subprocess: it writes S3 directly, so the gateway learns of the version when its resolver's cached
  ``NAME -> version`` expires (``adapters.resolve_ttl_s``). Besides the sample from its exit, each
  sample has ``from_published_s``, from the line it prints once the ref is written, and
  ``cli_exit_s``, the interpreter's exit between the two (the cache may expire meanwhile);
* ``push_gateway``: the same push through the gateway's management route, by
  :meth:`GatewayAdapters.push <serving.cli.gateway_client.GatewayAdapters.push>`, the function
  ``maze-serve adapters --gateway URL push`` calls (no subprocess: a second CLI start per sample
  would only lengthen the run; the sample starts when the call returns either way);
* ``publish_watch``: :func:`training.publishing.publish`, the function ``maze-train watch`` publishes
  an exported step with (its export folder ``global_step_N/policy/``), then the first token through
  ``NAME@VERSION``, the pinned name the watch scores the step under;
* ``promote_s3`` / ``promote_gateway``: a canary's promote, :meth:`AdapterStore.promote` (what
  ``maze-serve adapters promote NAME`` calls) and :meth:`GatewayAdapters.promote` (its ``--gateway``
  form), to every new session being on the canary's version. Each sample's canary is a new version
  pushed through the gateway at 50%, warmed by its own share of sessions first; the measurement
  polls with sessions on the stable arm only (their first canary-version answer is the promote
  seen), then checks more sessions of both arms (``old_after``: answers of the old version after
  that, expected 0).

For the alias paths (push, promote) a background client keeps requesting ``NAME`` for a random part
of the resolver's cache period (so the command falls anywhere in it) and while the push or promote
runs, so the gateway's resolver holds the name as a hot name does; once the command returns,
streaming requests follow back to back. A sample is the arrival of the first content token
of the first request sent after the command returned that the new version answered (the gateway
names the version that answered in every chunk's ``model``: ``base:NAME@VERSION``), minus the
command's return. Its split:

* ``stale_s``: until that request was sent (the gateway still answered with the version before,
  from its resolver's cache; one request's duration of granularity);
* ``cold_s``: that request's time to first token minus a warm one's (the median of the requests the
  previous version answered in the same sample): resolving the version and loading it;
* ``warm_s``: a warm request's time to first token;
* ``replica_load_s``: the replica's own count of the version's load (download, integrity, register,
  coverage; ``maze_gateway_adapter_load_seconds``), whenever it happened (a version pre-loaded
  before its first request costs that request nothing).

Writes every sample and p50/p95 per path (p95: nearest rank) to the output with the commit,
the command and the engine's environment.
"""

from __future__ import annotations

import argparse
import itertools
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.load_checks import scraped_phases  # noqa: E402
from benchmarks.support.stack import dev_assets, stack_config  # noqa: E402

PROMPT = [{"role": "user", "content": "Which way out of the maze?"}]
WAIT_S = 30.0  # a version not served this long after its push is a failed sample
CANARY_WEIGHT = 50.0
CONFIRM = 8  # requests after a promote was seen that must all get the new version
PUBLISHED = re.compile(r"version ([0-9a-f]{12})")


@dataclass
class Answer:
    """One streamed request: when it was sent, when its first token came, which model answered."""

    start: float
    first_token: float | None = None
    model: str | None = None
    key: str | None = None
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start


def first_token(http, model: str, key: str | None = None) -> Answer:
    """Send one streaming chat request and time its first content token (the first chunk with text,
    else the one that finishes it)."""
    import httpx

    answer = Answer(start=time.perf_counter(), key=key)
    body = {"model": model, "messages": PROMPT, "max_tokens": 1, "temperature": 0, "stream": True}
    try:
        with http.stream("POST", "/v1/chat/completions", json=body,
                         headers={"X-Session-Id": key} if key else {}) as resp:
            if resp.status_code != 200:
                resp.read()
                answer.error = f"{resp.status_code}: {resp.text[:200]}"
                return answer
            for line in resp.iter_lines():
                if answer.first_token is not None or not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                choice = (chunk.get("choices") or [{}])[0]
                if (choice.get("delta") or {}).get("content") or choice.get("finish_reason"):
                    answer.first_token, answer.model = time.perf_counter(), chunk.get("model")
    except httpx.HTTPError as exc:
        answer.error = f"{type(exc).__name__}: {exc}"
    if answer.first_token is None and answer.error is None:
        answer.error = "no token"
    return answer


class Background:
    """Requests for ``model`` back to back in a thread (what keeps a name hot in the gateway)."""

    def __init__(self, url: str, model: str, keys: list[str | None]):
        self.url, self.model, self.keys = url, model, keys
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import httpx

        with httpx.Client(base_url=self.url, timeout=60) as http:
            for i in itertools.count():
                if self._stop.is_set():
                    return
                answer = first_token(http, self.model, self.keys[i % len(self.keys)])
                self.answers.append(answer)
                if answer.error:
                    time.sleep(0.05)

    def stop(self) -> None:
        """No request after the one in flight."""
        self._stop.set()

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self._thread.join(timeout=60)


def poll_until(http, model: str, served: str, t0: float, keys: list[str | None]) -> tuple[Answer | None, list[Answer]]:
    """Requests for ``model`` from now on until one is answered by ``served``: (that one, all of them)."""
    answers = []
    for i in itertools.count():
        if time.perf_counter() - t0 > WAIT_S:
            return None, answers
        answer = first_token(http, model, keys[i % len(keys)])
        answers.append(answer)
        if answer.model == served:
            return answer, answers
        if answer.error:
            time.sleep(0.05)


def sample(t0: float, hit: Answer | None, before: list[Answer], served: str, **extra) -> dict:
    warm = [a.ttft for a in before if a.model and a.model != served and a.ttft is not None]
    warm_s = statistics.median(warm) if warm else None
    row = {"version": served.rpartition("@")[2], "served": hit is not None, **extra}
    if hit is None:
        return row
    row.update(total_s=hit.first_token - t0, stale_s=max(hit.start - t0, 0.0), request_s=hit.ttft, warm_s=warm_s,
               cold_s=None if warm_s is None else hit.ttft - warm_s,
               old_answers=sum(1 for a in before if a.start >= t0 and a.model and a.model != served),
               errors=sorted({a.error for a in before if a.error and a.start >= t0}))
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def run_cli(cli: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run a ``maze-serve`` command: (when it printed the version, when it exited, the version). The
    line comes once the ref is written; the exit follows after the interpreter's teardown."""
    with tempfile.TemporaryFile("w+") as stderr:  # a file: a chatty stderr cannot block the process
        proc = subprocess.Popen(cli, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=stderr,
                                text=True)
        printed, version, out = None, None, []
        for line in proc.stdout:
            out.append(line)
            match = PUBLISHED.search(line)
            if match and version is None:
                printed, version = time.perf_counter(), match.group(1)
        code = proc.wait(timeout=120)
        exited = time.perf_counter()
        stderr.seek(0)
        err = stderr.read()
    if code != 0 or version is None:
        raise RuntimeError(f"{' '.join(cli)} exited {code} printing {''.join(out)!r}: {err.strip()[-500:]}")
    return printed, exited, version


class Bench:
    def __init__(self, cfg, url: str, home: Path, shipped: Path):
        import httpx

        from serving.adapters import AdapterStore, export_s3_env
        from serving.cli.gateway_client import GatewayAdapters

        self.cfg, self.url, self.home, self.shipped = cfg, url.removesuffix("/v1"), home, shipped
        self.base = cfg.base_models[0].id
        export_s3_env(cfg)
        self.store = AdapterStore(cfg.adapters)
        self.gateway = GatewayAdapters(self.url, None)
        self.http = httpx.Client(base_url=self.url, timeout=60)
        self.config_file = home / "serving.yaml"
        import yaml

        self.config_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
        self.cli_env = {k: v for k, v in os.environ.items() if not k.startswith("MAZE_")} | {"MAZE_HOME": str(home)}
        self.cli = [str(Path(sys.executable).parent / "maze-serve"), "-c", str(self.config_file)]
        self._copies = itertools.count()
        # The command comes at a random point of the gateway's cache period, as a push or promote does.
        self._lead = random.Random(0)

    def lead(self) -> None:
        time.sleep(self._lead.uniform(0, self.cfg.adapters.resolve_ttl_s))

    def copy(self, tag: str, dest: Path | None = None) -> Path:
        """A copy of the shipped adapter that is a version of its own (its config carries ``tag``)."""
        copy = f"{tag}-{next(self._copies)}"
        folder = dest or self.home / "copies" / copy
        shutil.copytree(self.shipped, folder)
        cfg = json.loads((folder / "adapter_config.json").read_text())
        cfg["maze_time_to_servable"] = copy
        (folder / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
        return folder

    def push(self, folder: Path, name: str, **kw):
        c = self.cfg
        return self.store.push(folder, name, base=self.base, base_source=c.base_models[0].source,
                               max_rank=c.lora.max_rank, force=True, vision_tower=c.lora.vision_tower, **kw)

    def warm(self, name: str) -> None:
        """Serve ``name`` once, so the gateway holds it as a name in use."""
        deadline = time.perf_counter() + WAIT_S
        while (answer := first_token(self.http, f"{self.base}:{name}")).error:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{name}: {answer.error}")
            time.sleep(0.2)

    def in_use(self, name: str) -> str:
        """Publish a first version of ``name`` and serve it once; the model id that names it."""
        self.push(self.copy(name), name)
        self.warm(name)
        return f"{self.base}:{name}"

    # -- paths --------------------------------------------------------------------------------
    def push_new(self, n: int, via_gateway: bool) -> list[dict]:
        """S3: the real CLI in a subprocess; gateway: the function ``adapters --gateway URL push`` calls."""
        name = "ttfs-gateway" if via_gateway else "ttfs-s3"
        model, rows = self.in_use(name), []
        for _ in range(n):
            folder = self.copy(name)
            with Background(self.url, model, [None]) as bg:
                self.lead()
                extra = {}
                if via_gateway:
                    version = self.gateway.push(folder, name, base=self.base, force=True).version
                    t0 = time.perf_counter()
                else:
                    printed, t0, version = run_cli([*self.cli, "adapters", "push", str(folder), name, "--force"],
                                                   self.cli_env)
                    extra["cli_exit_s"] = round(t0 - printed, 4)
                bg.stop()
                hit, after = poll_until(self.http, model, f"{model}@{version}", t0, [None])
            row = sample(t0, hit, bg.answers + after, f"{model}@{version}", name=name, **extra)
            if hit is not None and extra:
                row["from_published_s"] = round(hit.first_token - printed, 4)
            rows.append(row)
        return rows

    def publish_watch(self, n: int) -> list[dict]:
        from training.publishing import publish

        name, export, rows = "ttfs-watch", self.home / "export", []
        for step in range(1, n + 1):
            self.copy(name, export / f"global_step_{step}" / "policy")
            done = publish(str(export), step, name, serving_config=str(self.config_file), force=True)
            t0 = time.perf_counter()
            model = f"{self.base}:{name}@{done.version}"
            hit, answers = poll_until(self.http, model, model, t0, [None])
            again = first_token(self.http, model)  # the same version warm: the request's own time
            row = sample(t0, hit, answers, model, name=name, step=step)
            if hit is not None and again.ttft is not None:
                row.update(warm_s=round(again.ttft, 4), cold_s=round(hit.ttft - again.ttft, 4))
            rows.append(row)
        return rows

    def promote(self, n: int, via_gateway: bool) -> list[dict]:
        from serving.adapters import Canary, serves_canary

        name = "ttfs-promote-gateway" if via_gateway else "ttfs-promote-s3"
        model, rows = self.in_use(name), []
        for _ in range(n):
            ref = self.gateway.push(self.copy(name), name, base=self.base, force=True, canary=CANARY_WEIGHT)
            new, old = ref.canary.version, ref.version
            canary = Canary(version=new, weight=CANARY_WEIGHT)
            keys = [f"session-{new}-{i}" for i in range(200)]
            stable = [k for k in keys if not serves_canary(name, canary, k)][:16]
            on_canary = [k for k in keys if serves_canary(name, canary, k)][:16]
            setup = time.perf_counter()  # the canary served to its share (and loaded) before the promote
            if poll_until(self.http, model, f"{model}@{new}", setup, on_canary[:1])[0] is None:
                raise RuntimeError(f"canary {name}@{new} never served")
            with Background(self.url, model, stable) as bg:
                self.lead()
                (self.gateway if via_gateway else self.store).promote(name)
                t0 = time.perf_counter()
                bg.stop()
                hit, after = poll_until(self.http, model, f"{model}@{new}", t0, stable)
            confirm = [first_token(self.http, model, k) for k in (stable + on_canary)[:CONFIRM]]
            row = sample(t0, hit, bg.answers + after, f"{model}@{new}", name=name, previous=old)
            row["old_after"] = sum(1 for a in confirm if a.model != f"{model}@{new}")
            rows.append(row)
        return rows


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return round(ordered[max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 1)) - 1))], 4)


def summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if r.get("served")]
    out: dict = {"n": len(rows), "served": len(ok)}
    for key in ("total_s", "from_published_s", "stale_s", "cold_s", "warm_s", "replica_load_s"):
        values = [r[key] for r in ok if r.get(key) is not None]
        if values:
            out[key] = {"p50": round(statistics.median(values), 4), "p95": pct(values, 0.95)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--versions", type=int, default=10, help="new versions measured per path")
    ap.add_argument("--resolve-ttl-s", type=float, default=None,
                    help="the gateway's adapters.resolve_ttl_s (default: the shipped config's)")
    ap.add_argument("--paths", default="push_cli_s3,push_gateway,publish_watch,promote_s3,promote_gateway")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "time_to_servable.json")
    args = ap.parse_args()
    started = time.monotonic()

    from benchmarks.support.provenance import engine_settings, provenance
    from serving.config import ServingConfig
    from serving.engine import allocator_env
    from serving.local import embedded

    ttl = ServingConfig.shipped("embedded").adapters.resolve_ttl_s if args.resolve_ttl_s is None else args.resolve_ttl_s
    assets = dev_assets(n_extra=0)
    home = Path(tempfile.mkdtemp(prefix="time-to-servable-"))
    os.environ["MAZE_HOME"] = str(home)
    cfg = stack_config(assets.base_dir, name="time-to-servable", resolve_ttl_s=ttl)
    t_up = time.monotonic()
    url = embedded.up(cfg, adapters=assets.shipped)
    up_s = time.monotonic() - t_up
    paths: dict[str, list[dict]] = {}
    try:
        bench = Bench(cfg, url, home, assets.shipped["maze-grpo"])
        bench.warm("maze-grpo")  # the engine's first requests are no version's cost
        runs = {"push_cli_s3": lambda: bench.push_new(args.versions, via_gateway=False),
                "push_gateway": lambda: bench.push_new(args.versions, via_gateway=True),
                "publish_watch": lambda: bench.publish_watch(args.versions),
                "promote_s3": lambda: bench.promote(args.versions, via_gateway=False),
                "promote_gateway": lambda: bench.promote(args.versions, via_gateway=True)}
        for path in args.paths.split(","):
            t = time.monotonic()
            paths[path] = runs[path]()
            print(f"{path}: {time.monotonic() - t:.0f}s {json.dumps(summary(paths[path]))}", file=sys.stderr)
        state = embedded.read_state()
        loads = scraped_phases(state.metrics_port, [f"{r['name']}@{r['version']}" for rows in paths.values()
                                                    for r in rows if r.get("served")], timeout_s=10)
        engine_env = {**state.config["env"], **allocator_env(cfg.allocator, state.config["env"])}
    finally:
        embedded.down(wait_ports=False)  # nothing starts on its ports after it
    for rows in paths.values():
        for row in rows:
            phases = loads.get(f"{row['name']}@{row['version']}")
            if phases:
                row["replica_load_s"] = round(sum(phases.values()), 4)
    out = {
        "benchmark": "time_to_servable",
        **provenance([__file__, *sys.argv[1:]], engine_settings(cfg, engine_env)),
        "stack": {"layout": cfg.layout, "ingress": cfg.ingress, "resolve_ttl_s": ttl,
                  "adapters_per_replica": cfg.lora.adapters_per_replica, "adapter": "maze-grpo (rank 64) copies",
                  "up_s": round(up_s, 1)},
        "machine": {"platform": platform.platform()},
        "summary": {path: summary(rows) for path, rows in paths.items()},
        "target": {"push_to_first_token_p50_s": 2.0},
        "samples": paths,
        "bench_wall_s": round(time.monotonic() - started, 1),
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
