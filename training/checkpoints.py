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


def _s3(export: str):
    """The objects under an ``s3://`` export, through the adapter store's door (its one S3 client, its
    errors: an outage is a 503 ``AdapterStoreUnavailable``, a missing object ``KeyError``)."""
    from serving.adapters import open_objects, spec_from_env  # only where an export lives in S3

    return open_objects(spec_from_env(export.rstrip("/")))  # honours AWS_ENDPOINT_URL_S3 (a local S3 server)


def _list(export: str) -> list[str]:
    """Relative paths of every file under ``export``."""
    if export.startswith("s3://"):
        return list(_s3(export).list())
    root = Path(export)
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()] if root.is_dir() else []


def _read(export: str, rel: str) -> str:
    if export.startswith("s3://"):
        return _s3(export).get(rel).decode()
    return (Path(export) / rel).read_text()


def _download(export: str, rel: str, dest: Path) -> None:
    """``rel`` of an S3 export into ``dest``, streamed, under a temporary name until complete."""
    part = dest.with_name(dest.name + ".part")
    try:
        with open(part, "wb") as out:
            for chunk in _s3(export).stream(rel):
                out.write(chunk)
        part.replace(dest)
    except KeyError:
        raise FileNotFoundError(f"{export.rstrip('/')}/{rel} is missing") from None
    finally:
        part.unlink(missing_ok=True)  # gone once complete; a failed transfer leaves nothing behind


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
            _download(export, rel, dest / fname)
        else:
            src = Path(export) / rel
            if not src.is_file():
                raise FileNotFoundError(f"{src} is missing")
            shutil.copy2(src, dest / fname)
    return dest
