"""Why a start failed, read from Ray's kept session logs (serving.local.start_failure)."""

from __future__ import annotations

import os

from serving.local.start_failure import root_cause

# The shape of what a GPU replica printed when its engine could not start (vLLM 0.26, float32 LoRA).
WORKER_OUT = """\
(Worker pid=2823) INFO 12-07 19:12:40 [gpu_model_runner.py:3000] Loading model
(Worker pid=2823) ERROR 12-07 19:13:08 [multiproc_executor.py:1007] Traceback (most recent call last):\r
(Worker pid=2823) ERROR 12-07 19:13:08 [multiproc_executor.py:1007]   File "vllm/lora/ops/triton_ops/lora_shrink_op.py", line 177, in _lora_shrink\r
(Worker pid=2823) ERROR 12-07 19:13:08 [multiproc_executor.py:1007]     assert inputs.dtype in [torch.float16, torch.bfloat16]\r
(Worker pid=2823) ERROR 12-07 19:13:08 [multiproc_executor.py:1007] AssertionError\r
"""
ENGINE_ERR = """\
(EngineCore pid=4174) Traceback (most recent call last):
(EngineCore pid=4174)   File "vllm/v1/engine/core.py", line 1334, in run_engine_core
(EngineCore pid=4174) RuntimeError: Worker failed with error '', please check the stack trace above for the root cause
"""


def test_the_engines_own_failure_is_named_not_the_wrapper(tmp_path):
    (tmp_path / "worker-a-01000000-2823.out").write_text(WORKER_OUT)
    (tmp_path / "worker-b-01000000-3887.err").write_text(ENGINE_ERR)
    os.utime(tmp_path / "worker-a-01000000-2823.out", (1000, 1000))  # the first attempt's file
    os.utime(tmp_path / "worker-b-01000000-3887.err", (2000, 2000))
    assert root_cause(tmp_path) == "AssertionError"


def test_a_wrapper_is_named_when_it_is_all_there_is_and_none_without_a_traceback(tmp_path):
    (tmp_path / "worker-b-01000000-3887.err").write_text(ENGINE_ERR)
    assert root_cause(tmp_path).startswith("RuntimeError: Worker failed with error")
    (tmp_path / "worker-b-01000000-3887.err").write_text("(EngineCore pid=1) INFO nothing went wrong\n")
    assert root_cause(tmp_path) is None
    assert root_cause(tmp_path / "missing") is None


def test_serves_failed_deploy_becomes_the_stacks_error_naming_the_replicas_failure(tmp_path):
    from serving.errors import ServingError
    from serving.local.embedded import deploy_failed

    (tmp_path / "worker-a-01000000-2823.out").write_text(WORKER_OUT)
    serve_says = RuntimeError("Deploying application maze-gpu failed: Failed to update the deployments "
                              "['GatewayLLMServer:maze-tiny'].")
    err = deploy_failed(serve_says, tmp_path)
    assert isinstance(err, ServingError)
    assert str(err) == ("the gateway app did not start: Deploying application maze-gpu failed: Failed to update the "
                        f"deployments ['GatewayLLMServer:maze-tiny'].; the replica failed with AssertionError; see {tmp_path}")
    assert str(deploy_failed(serve_says, None)).endswith("['GatewayLLMServer:maze-tiny'].")


# The end of what `ray start --head` printed when two of its ports were one (seen in a test run).
RAY_PORT_CLASH = """Traceback (most recent call last):
  File "/x/.venv/lib/python3.11/site-packages/ray/_private/parameter.py", line 343, in update_pre_selected_port
    raise ValueError(
ValueError: Ray component dashboard_agent_http is trying to use a port number 53823 that is used by other components.
Port information: {'object_manager': 53823, 'dashboard_agent_http': 53823}
If you allocate ports, please make sure the same port is not used by multiple components.
"""


def test_a_ray_head_that_exited_is_an_error_naming_why_not_a_wait(tmp_path, monkeypatch):
    import subprocess
    import time

    import pytest

    from serving.local import embedded
    from serving.local.ports import free_port

    monkeypatch.setenv("MAZE_HOME", str(tmp_path))
    logs = embedded.state_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "ray.log").write_text(RAY_PORT_CLASH)
    exited = subprocess.Popen(["true"])
    exited.wait()
    t0 = time.monotonic()
    with pytest.raises(embedded.EmbeddedError) as caught:  # nothing listens on the GCS port
        embedded._wait_for_gcs(f"127.0.0.1:{free_port()}", exited.pid, time.monotonic() + 120)
    assert time.monotonic() - t0 < 5
    assert "Ray did not start: ValueError: Ray component dashboard_agent_http" in str(caught.value)
    assert str(logs / "ray.log") in str(caught.value)


def test_ports_taken_together_are_distinct_and_avoid_the_ones_given():
    from serving.local.ports import free_ports, ray_node_port_args

    for _ in range(50):
        ports = free_ports(7)
        assert len(set(ports)) == 7
    taken = tuple(free_ports(2))
    args = ray_node_port_args(*taken)
    chosen = [int(a.rsplit("=", 1)[1]) for a in args]
    assert len(set(chosen)) == 5 and not set(chosen) & set(taken)
