"""Every listener the embedded stack opens, and no way around the gateway through them.

Each Serve replica runs Ray's inter-deployment gRPC server (``ray.serve.ASGIService``) on
``[::]:PORT`` (Ray 2.60 binds it there; ``RAY_USE_TLS`` only adds TLS): the one listener not on
loopback. With Ray's token auth on (``RAY_AUTH_MODE=token``, the embedded stack's setting) that
server runs Ray's authentication interceptor: a call without the cluster's token, or with another
one, is refused before the request is read. The test calls it the way an outsider could (plain
gRPC, over 127.0.0.1 as the rules of these tests require; the socket is the same one the network
reaches) and checks the refusal, and that the same call with the cluster's token is let through
the interceptor (so the refusal is the token's doing, not a port that answers nothing).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import grpc
import psutil
import pytest

from serving.local import embedded

pytestmark = pytest.mark.slow
HANDLE_REQUEST = "/ray.serve.ASGIService/HandleRequest"


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    return (getattr(addr, "ipv4_mapped", None) or addr).is_loopback


def stack_listeners() -> list[tuple[str, int, str, str, int]]:
    """(process name, pid, protocol, address, port) of every listening TCP socket and bound UDP
    socket of the stack's two sessions (Ray's and the S3 server's)."""
    state = embedded.read_state()
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) not in (state.ray_pid, state.moto_pid):
                continue
            name, conns = proc.name(), proc.net_connections(kind="inet")
        except (psutil.Error, OSError):
            continue
        for c in conns:
            udp = c.type == socket.SOCK_DGRAM
            if (udp and not c.raddr) or c.status == psutil.CONN_LISTEN:
                out.append((name, proc.pid, "udp" if udp else "tcp", c.laddr.ip, c.laddr.port))
    return sorted(set(out))


def test_every_listener_is_loopback_but_the_replicas_grpc(stack):
    listeners = stack_listeners()
    print("\n" + "\n".join(f"{n:<40} {pid:>7} {proto} {ip}:{port}" for n, pid, proto, ip, port in listeners))
    exposed = [entry for entry in listeners if not _loopback(entry[3])]
    assert exposed, "expected the Serve replica's gRPC server on [::]"
    assert all("ServeReplica" in name and proto == "tcp" and ip in ("::", "0.0.0.0")
               for name, _, proto, ip, _ in exposed), exposed


def grpc_ports() -> list[int]:
    return sorted({port for name, _, proto, ip, port in stack_listeners()
                   if "ServeReplica" in name and proto == "tcp" and not _loopback(ip)})


def call(port: int, token: str | None) -> grpc.StatusCode:
    """One HandleRequest on the replica's gRPC port, as any client could send it; its status code."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        method = channel.unary_unary(HANDLE_REQUEST, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        metadata = [("authorization", f"Bearer {token}")] if token is not None else None
        try:
            method(b"", metadata=metadata, timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_the_replicas_grpc_port_refuses_calls_without_the_clusters_token(stack):
    ports = grpc_ports()
    assert ports
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    for port in ports:
        assert call(port, None) == grpc.StatusCode.UNAUTHENTICATED
        assert call(port, "not-the-cluster-token") == grpc.StatusCode.UNAUTHENTICATED
        assert call(port, stack.client.api_key) == grpc.StatusCode.UNAUTHENTICATED  # a gateway key is no Ray token
        # With the cluster's own token the call gets past the interceptor (and fails on its empty body).
        assert call(port, token) not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # plain HTTP/1.1: no HTTP answer
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(5)
            try:
                reply = s.recv(4096)
            except (TimeoutError, ConnectionResetError):
                reply = b""
            assert not reply.startswith(b"HTTP/1.1 200"), reply[:100]
    assert stack.client.models.list().data  # the gateway still serves
