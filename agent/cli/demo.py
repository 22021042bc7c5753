"""``maze-demo``: play the 64-maze set against an OpenAI-compatible endpoint and summarise it.

With no ``--base-url`` it starts the scripted BFS server (``agent.tools.scripted_server``) on
127.0.0.1, so it runs anywhere with no model, GPU or cloud account.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from agent.runner import EndpointConfig, EpisodeRecord, RunnerConfig, parse_seeds, run_endpoint_async, write_jsonl
from agent.tools import save_gif

log = logging.getLogger("maze-demo")


@contextmanager
def scripted_server_process():
    """Start the scripted server in a subprocess; yields ``(base_url, process)``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.tools.scripted_server", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("READY "):
            raise RuntimeError(f"scripted server failed to start (exit {proc.poll()})")
        yield line.split()[1], proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def scripted_server():
    """Start the scripted server in a subprocess; yields its base URL."""
    with scripted_server_process() as (url, _):
        yield url


def summarise(records: list[EpisodeRecord]) -> str:
    done = [r for r in records if r.scored]
    solved = sum(r.success for r in done)
    errors = len(records) - len(done)
    rate = solved / len(done) if done else 0.0
    return f"solved {solved}/{len(done)} ({rate:.1%}), errors {errors}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="maze-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint; default: start the scripted server")
    parser.add_argument("--model", default="bfs", help="model id ('base' or 'base:adapter')")
    parser.add_argument("--api-key", default="EMPTY")
    parser.add_argument("--env", default="maze_2d/simple")
    parser.add_argument("--seeds", default="0-63", help="e.g. 0-63 or 1,5,9")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", default="runs/demo", help="folder for episodes.jsonl and a GIF")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    cfg = RunnerConfig(env_id=args.env, concurrency=args.concurrency)
    seeds = parse_seeds(args.seeds)
    done: list[EpisodeRecord] = []

    def progress(rec: EpisodeRecord) -> None:
        done.append(rec)
        if len(done) % 8 == 0 or len(done) == len(seeds):
            log.info("%d/%d episodes: %s", len(done), len(seeds), summarise(done))

    async def play(base_url: str) -> list[EpisodeRecord]:
        endpoint = EndpointConfig(base_url=base_url, model=args.model, api_key=args.api_key)
        return await run_endpoint_async(endpoint, seeds, cfg, on_done=progress)

    if args.base_url:
        records = asyncio.run(play(args.base_url))
    else:
        with scripted_server() as url:
            log.info("scripted BFS server at %s", url)
            records = asyncio.run(play(url))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, out / "episodes.jsonl")
    save_gif(records[0], str(out / f"seed{records[0].seed}.gif"))
    log.info("%s; wrote %s and a GIF", summarise(records), out / "episodes.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
