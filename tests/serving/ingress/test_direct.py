"""``ingress: direct`` (``serving.ingress.direct``) without Ray: the config's rules, the env the
embedded Ray gets, and the Ray 2.60 internals it relies on. Serving through it for real is covered
by ``test_gateway_stack.py`` (the embedded default; ``MAZE_TEST_INGRESS=proxy`` for the other)."""

from __future__ import annotations

import pytest

from serving.config import ServingConfig
from serving.ingress import direct as direct_ingress
from serving.k8s import render_rayservice


def _dict(**changes) -> dict:
    d = ServingConfig.shipped("embedded").model_dump(mode="json")
    d.update(changes)
    return d


def test_embedded_default_is_direct_production_is_proxy():
    assert ServingConfig.shipped("embedded").ingress == "direct"
    assert ServingConfig.shipped("production").ingress == "proxy"


@pytest.mark.parametrize("changes", [
    {"layout": "standard"},
    {"replicas": {"min_replicas": 1, "max_replicas": 2}},
])
def test_direct_needs_one_colocated_replica(changes):
    with pytest.raises(ValueError, match="ingress 'direct'"):
        ServingConfig.model_validate(_dict(**changes))
    assert ServingConfig.model_validate(_dict(ingress="proxy", **changes)).ingress == "proxy"


def test_ray_env_pins_the_replica_port_to_the_config_port():
    cfg = ServingConfig.model_validate(_dict(port=8123))
    env = direct_ingress.direct_ingress_env(cfg)
    assert env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
    assert (env["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"], env["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"]) == ("8123", "8124")
    assert direct_ingress.direct_proxy_port(cfg, lambda: 40001) == 40001  # the idle proxy moves aside
    proxied = cfg.model_copy(update={"ingress": "proxy"})
    assert direct_ingress.direct_ingress_env(proxied) == {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"}
    assert direct_ingress.direct_proxy_port(proxied, lambda: 40001) == 8123


def test_ray_port_allocator_range_is_max_exclusive():
    """The env above relies on Ray 2.60's allocator handing out range(MIN, MAX)."""
    from ray.serve._private.node_port_manager import NoAvailablePortError, PortAllocator

    alloc = PortAllocator(8123, 8124, protocol="HTTP", node_id="n")
    assert alloc.allocate("r1") == 8123
    with pytest.raises(NoAvailablePortError):
        alloc.allocate("r2")


def test_k8s_render_refuses_direct():
    with pytest.raises(ValueError, match="embedded stack"):
        render_rayservice(ServingConfig.shipped("embedded"))
    keyed = ServingConfig.shipped("embedded")
    keyed = keyed.model_copy(update={"ingress": "proxy", "auth": keyed.auth.model_copy(update={"open": True})})
    render_rayservice(keyed)  # the proxy ingress renders (auth open on purpose: render refuses auth off)
