"""The ingress app's middlewares (serving.ingress.middleware): Ray's BaseHTTPMiddleware error
wrapper replaced by the pure-ASGI one with the same behaviour."""

from __future__ import annotations

from serving.config import ServingConfig


def test_application_error_middleware_replaces_ray_base_http_middleware():
    """create_app swaps Ray's BaseHTTPMiddleware error wrapper for the pure-ASGI one, which keeps
    its behaviour: an unhandled route error becomes Ray's JSON error before the response starts."""
    from fastapi.testclient import TestClient
    from starlette.middleware.base import BaseHTTPMiddleware

    from serving.ingress import create_app
    from serving.ingress.middleware import ApplicationErrorMiddleware

    app = create_app(ServingConfig.shipped("embedded"))
    classes = [m.cls for m in app.user_middleware]
    assert ApplicationErrorMiddleware in classes and BaseHTTPMiddleware not in classes

    @app.get("/boom")
    async def boom():
        raise RuntimeError("kaput")

    @app.get("/fine")
    async def fine():
        return {"ok": True}

    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/boom", headers={"x-request-id": "req-1"})
    assert r.status_code == 500 and "error" in r.json()
    assert client.get("/fine").json() == {"ok": True}
