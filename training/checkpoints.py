"""Checkpoints and exports of a training run, on local disk or S3.

Exports follow SkyRL's layout: ``{export_path}/global_step_N/policy/adapter_model.safetensors``
+ ``adapter_config.json``, and evals in
``{export_path}/dumped_evals/global_step_N_evals/aggregated_results.jsonl``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from training.metrics import parse_eval_dump

_STEP_DIR = re.compile(r"global_step_(\d+)/policy/adapter_config\.json$")
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


@dataclass(frozen=True)
class ExportStep:
    """One exported step with its eval pass@1 when the run dumped one."""

    step: int
    path: str
    pass_at_1: float | None


def _s3_split(url: str) -> tuple[str, str]:
    rest = url[5:]
    bucket, _, key = rest.partition("/")
    return bucket, key.rstrip("/")


def _s3():
    import boto3

    return boto3.client("s3")  # honours AWS_ENDPOINT_URL_S3 for a local S3 server


def _list(export: str) -> list[str]:
    """Relative paths of every file under ``export``."""
    if export.startswith("s3://"):
        bucket, key = _s3_split(export)
        client, out, kwargs = _s3(), [], {"Bucket": bucket, "Prefix": key + "/"}
        while True:
            page = client.list_objects_v2(**kwargs)
            out += [o["Key"][len(key) + 1 :] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return out
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
    root = Path(export)
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()] if root.is_dir() else []


def _read(export: str, rel: str) -> str:
    if export.startswith("s3://"):
        bucket, key = _s3_split(export)
        return _s3().get_object(Bucket=bucket, Key=f"{key}/{rel}")["Body"].read().decode()
    return (Path(export) / rel).read_text()


def list_steps(export: str) -> list[ExportStep]:
    """Exported steps of ``export`` (local path or s3://), oldest first."""
    files = _list(export)
    evals: dict[int, float] = {}
    for rel in files:
        if rel.endswith("aggregated_results.jsonl"):
            parsed = parse_eval_dump(rel, _read(export, rel))
            if parsed:
                value = next((v for k, v in parsed.metrics.items() if k.endswith("pass_at_1")), None)
                if value is not None:
                    evals[parsed.step] = value
    steps = []
    for rel in files:
        m = _STEP_DIR.search(rel)
        if m:
            step = int(m.group(1))
            steps.append(ExportStep(step, f"{export.rstrip('/')}/global_step_{step}/policy", evals.get(step)))
    return sorted(steps, key=lambda s: s.step)


def fetch_step(export: str, step: int, dest: str | Path | None = None) -> Path:
    """A local folder holding the adapter files of ``step`` (downloaded when on S3).

    Raises:
        FileNotFoundError: naming the missing step or file.
    """
    known = {s.step: s for s in list_steps(export)}
    if step not in known:
        raise FileNotFoundError(f"no exported step {step} under {export}; exported: {sorted(known)}")
    dest = Path(dest or tempfile.mkdtemp(prefix=f"maze-step{step}-"))
    dest.mkdir(parents=True, exist_ok=True)
    for fname in ADAPTER_FILES:
        rel = f"global_step_{step}/policy/{fname}"
        if export.startswith("s3://"):
            bucket, key = _s3_split(export)
            _s3().download_file(bucket, f"{key}/{rel}", str(dest / fname))
        else:
            src = Path(export) / rel
            if not src.is_file():
                raise FileNotFoundError(f"{src} is missing")
            shutil.copy2(src, dest / fname)
    return dest
