"""The local S3 server of the embedded stack: moto's server with its writes taken one at a time.

moto checks a write's ``If-Match`` / ``If-None-Match`` and then stores the object, in a request
thread of its own with no lock between the two: two writers that read the same ETag can both
succeed, and one update is lost. Amazon S3 makes a conditional write atomic, and the adapter
store relies on it for every alias move, canary, policy and pin (``ObjectStore.replace_json``).
This server runs moto's own WSGI app with every request that writes (PUT, POST, DELETE) in turn;
reads stay concurrent.

    python -m serving.local.s3_server -H 127.0.0.1 -p PORT
"""

from __future__ import annotations

import argparse
import os
import threading

WRITES = frozenset({"PUT", "POST", "DELETE"})


class SerialWrites:
    """WSGI middleware: requests that write run one at a time, each to the end of its response."""

    def __init__(self, app):
        self.app, self.lock = app, threading.Lock()

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") not in WRITES:
            return self.app(environ, start_response)
        with self.lock:  # the condition checked and the object stored under one lock
            return list(self.app(environ, start_response))


def main(argv: list[str] | None = None) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    ap = argparse.ArgumentParser(description="moto's S3 server with atomic conditional writes")
    ap.add_argument("-H", "--host", default="127.0.0.1", help="address to bind")
    ap.add_argument("-p", "--port", type=int, required=True, help="port to listen on")
    args = ap.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))  # moto builds its own URLs from it
    app = SerialWrites(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
