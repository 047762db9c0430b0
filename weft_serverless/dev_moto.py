"""moto's DynamoDB server on a loopback port, one request at a time.

``weft dev`` serves its table from it, and the simulator and the tests point engines at it
over HTTP. It is a module of its own so that the dev server stays one concern: wiring the
handlers to HTTP and to a ticker.

It runs moto as the tests' in-process moto does (``testing_moto.serialise_moto``): besides the
lock, a cancelled transaction is rolled back from copies of the items it names and a query
reads one partition. moto's own ``TransactWriteItems`` deep-copies every table it names once
per action, so each step commit cost the whole table and a dev server storing large inputs
grew by gigabytes (the copies are freed, but their memory not returned) while its table held
megabytes (decision 0045).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


class LockedMotoServer:
    """moto's server on loopback, serving one request at a time (body included).

    moto applies a conditional write as read-check-write without a lock, so two concurrent
    requests can both pass a condition; serialising requests restores DynamoDB's atomicity.
    """

    def __init__(
        self, host: str = "127.0.0.1", lock: AbstractContextManager[Any] | None = None
    ) -> None:
        self.host = host
        self._server: Any = None
        self._lock = lock  # default: the lock that also serialises in-process moto

    def start(self) -> str:
        import logging

        try:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server
        except ImportError:
            from weft_serverless.errors import ConfigurationError
            from weft_serverless.hints import install_extra

            raise ConfigurationError(
                "weft dev runs DynamoDB locally with moto, which is not installed: "
                f"{install_extra('local')}"
            ) from None
        from weft_serverless.testing_moto import serialise_moto

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # it logs every request
        moto_lock = serialise_moto()  # item rollbacks and one-partition queries, process-wide
        lock = self._lock if self._lock is not None else moto_lock
        app = DomainDispatcherApplication(create_backend_app)

        def locked(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            with lock:
                return [b"".join(app(environ, start_response))]

        self._server = make_server(
            self.host, 0, locked, threaded=True, request_handler=MotoRequestHandler
        )
        threading.Thread(target=self._server.serve_forever, name="moto", daemon=True).start()
        return f"http://{self.host}:{self._server.server_port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
