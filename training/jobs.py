"""Launch and follow training jobs on any Ray cluster through the Ray Jobs SDK.

Addresses: ``http://HOST:8265`` for any Ray cluster, or ``sagemaker_ray://<cluster>/<namespace>``
for SageMaker HyperPod (Ray imports the ``sagemaker_ray`` module, from the PyPI package
toolkit-for-ray-on-sagemaker-ai, to resolve it). Ray is imported lazily.
"""

from __future__ import annotations

import logging
import re
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from training.errors import ClusterAuthRequired, ClusterUnavailable, JobError, UnknownJob
from training.metrics import StepMetrics, parse_log_lines

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[1]
Trainer = Literal["skyrl", "local"]
# A head that has just started registers its job agent a few seconds later; until then Ray refuses
# every submission with this message, which a retry outlives.
AGENT_NOT_READY = "No available agent to submit job"
AGENT_WAIT_S = 60.0
# Kept out of the uploaded working_dir: environments, caches and local outputs.
WORKING_DIR_EXCLUDES = [".venv/", ".git/", "**/__pycache__/", "runs/", ".pytest_cache/", "*.egg-info/", ".whl/", ".gl/"]
# What the dashboard answers a working_dir package over its upload limit (an HTTP 413).
UPLOAD_TOO_LARGE = "Maximum request body size"


def git_ignored(working_dir: str | Path) -> list[str]:
    """What git leaves out of ``working_dir`` (its ignore files, ``.git/info/exclude``, the user's
    global excludes), as anchored gitwildmatch patterns for Ray's ``excludes``.

    Ray reads only ``.gitignore`` and ``.rayignore`` files: a checkpoint or wheel folder ignored in
    ``.git/info/exclude`` would be zipped and uploaded with every job. Empty outside a git work tree."""
    try:
        out = subprocess.run(["git", "-C", str(working_dir), "ls-files", "--others", "--ignored", "--exclude-standard",
                              "--directory", "-z"], capture_output=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return ["/" + re.sub(r"([\\*?\[\]])", r"\\\1", p) for p in out.decode(errors="surrogateescape").split("\0") if p]


@dataclass(frozen=True)
class JobInfo:
    """What ``status`` and ``list`` report about one job."""

    submission_id: str
    status: str
    entrypoint: str
    message: str | None
    metadata: dict[str, str]


def new_submission_id(trainer: str) -> str:
    return f"maze-{trainer}-{secrets.token_hex(4)}"


class JobClient:
    """Thin typed wrapper over ``ray.job_submission.JobSubmissionClient``."""

    def __init__(self, address: str):
        from ray.exceptions import AuthenticationError
        from ray.job_submission import JobSubmissionClient

        self.address = address
        try:
            self._client = JobSubmissionClient(address)
        except AuthenticationError as exc:
            # Ray's client sends its token only when told to; its own message buries that.
            raise ClusterAuthRequired(f"the Ray cluster at {address} requires token authentication: export RAY_AUTH_MODE=token, "
                           "with the cluster's token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token") from exc
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterUnavailable(f"cannot reach a Ray cluster at {address}: {exc}") from exc

    def submit(self, entrypoint: str, *, submission_id: str, env_vars: dict[str, str] | None = None,
               metadata: dict[str, str] | None = None, working_dir: str | Path = REPO_ROOT,
               resources: dict[str, float] | None = None) -> str:
        """Submit ``entrypoint`` with this repo as the working_dir; returns the submission id.

        ``resources``: custom Ray resources the entrypoint needs (e.g. ``{"maze_worker_1": 1}``), which
        places the job's driver, and so the local trainer, on a node that offers them."""
        excludes = [*WORKING_DIR_EXCLUDES, *git_ignored(working_dir)]
        runtime_env: dict[str, Any] = {"working_dir": str(working_dir), "excludes": excludes}
        if env_vars:
            runtime_env["env_vars"] = env_vars
        deadline = time.monotonic() + AGENT_WAIT_S
        while True:
            try:
                return self._client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env,
                                               submission_id=submission_id, metadata=metadata or {},
                                               entrypoint_resources=resources or None)
            except RuntimeError as exc:
                if AGENT_NOT_READY in str(exc) and time.monotonic() < deadline:
                    log.info("the cluster's job agent is not up yet; retrying the submission")
                    time.sleep(2.0)
                    continue
                hint = (f" (the working_dir {working_dir} is packaged whole but for what git ignores: keep large "
                        "files out of it with .gitignore or .rayignore)") if UPLOAD_TOO_LARGE in str(exc) else ""
                raise JobError(f"submission refused: {exc}{hint}") from exc

    def info(self, submission_id: str) -> JobInfo:
        try:
            d = self._client.get_job_info(submission_id)
        except RuntimeError as exc:
            raise UnknownJob(f"no job {submission_id!r} on {self.address}") from exc
        return JobInfo(submission_id, str(d.status.value if hasattr(d.status, "value") else d.status), d.entrypoint,
                       d.message, dict(d.metadata or {}))

    def list(self) -> list[JobInfo]:
        out = []
        for d in self._client.list_jobs():
            if d.submission_id:
                out.append(JobInfo(d.submission_id, str(getattr(d.status, "value", d.status)), d.entrypoint, d.message,
                                   dict(d.metadata or {})))
        return out

    def logs(self, submission_id: str) -> str:
        try:
            return self._client.get_job_logs(submission_id)
        except RuntimeError as exc:
            raise UnknownJob(f"no job {submission_id!r} on {self.address}") from exc

    async def follow(self, submission_id: str) -> AsyncIterator[str]:
        """Log lines as the job writes them, until it ends."""
        self.info(submission_id)  # a clear error for an unknown id before streaming
        pending = ""
        async for chunk in self._client.tail_job_logs(submission_id):
            pending += chunk
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line
        if pending:
            yield pending

    def stop(self, submission_id: str) -> bool:
        self.info(submission_id)
        return bool(self._client.stop_job(submission_id))


async def follow_metrics(client: JobClient, submission_id: str, *, on_line: Callable[[str], Any] | None = None,
                         on_metrics: Callable[[StepMetrics], Any] | None = None) -> list[StepMetrics]:
    """Stream a job's logs, parsing ``Step N: {...}`` metrics as they appear."""
    found: list[StepMetrics] = []
    lines: list[str] = []

    async for line in client.follow(submission_id):
        if on_line:
            on_line(line)
        lines.append(line)
        for sm in parse_log_lines(lines):  # only a block completed by this line is new
            found.append(sm)
            if on_metrics:
                on_metrics(sm)
            lines.clear()
        if len(lines) > 500:  # no block in sight: keep memory bounded
            lines = lines[-50:]
    return found
