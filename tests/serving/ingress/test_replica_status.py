"""serving.ingress.replica_status: what /ready reports about the LLM deployments' replicas (pure part)."""

from serving.ingress.replica_status import degraded, summarize_replicas


def details(states: list[tuple[str, str, str]], target: int) -> dict:
    replicas = [{"replica_id": rid, "state": st, "node_id": node} for rid, st, node in states]
    return {"applications": {"app": {"deployments": {
        "GatewayIngress": {"replicas": [{"replica_id": "i", "state": "RUNNING", "node_id": "head"}],
                           "target_num_replicas": 1},
        "GatewayLLMServer:maze-tiny": {"replicas": replicas, "target_num_replicas": target}}}}}


def test_both_replicas_running_on_two_nodes():
    out = summarize_replicas(details([("a", "RUNNING", "n1"), ("b", "RUNNING", "n2")], 2), "app")
    assert list(out) == ["GatewayLLMServer:maze-tiny"]  # the ingress is not an LLM deployment
    r = out["GatewayLLMServer:maze-tiny"]
    assert (r["running"], r["target"], r["nodes"], r["placement"]) == (2, 2, ["n1", "n2"], {"a": "n1", "b": "n2"})
    assert not degraded(out)


def test_a_lost_replica_is_degraded_until_its_replacement_runs():
    lost = summarize_replicas(details([("a", "RUNNING", "n1"), ("c", "PENDING_ALLOCATION", "")], 2), "app")
    assert degraded(lost)
    r = lost["GatewayLLMServer:maze-tiny"]
    assert r["running"] == 1 and r["states"] == {"RUNNING": 1, "PENDING_ALLOCATION": 1} and r["nodes"] == ["n1"]
    back = summarize_replicas(details([("a", "RUNNING", "n1"), ("c", "RUNNING", "n2")], 2), "app")
    assert not degraded(back)


def test_unknown_app_reports_nothing():
    assert summarize_replicas(details([], 1), "other") == {}
