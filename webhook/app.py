"""The Flask shell around :mod:`webhook.admission`: routes, body cap, error mapping.

Every error that leaves a view goes through one app-wide handler and is JSON in the services'
one error shape, ``{"code", "message"}`` (:func:`tessera.serving.policy.error_doc`): a body
over the cap is 413 (chunked or not, :func:`read_body`; served, the server refuses it first
with the same answer), a wrong route or method its 4xx, and a bug 400 with its name (input
never gets a 500; the API server treats any non-200 as a failed call and applies the
failurePolicy).

gunicorn target: ``webhook.app:create_app()`` (configuration from ``TESSERA_*`` variables).
Nothing is built at import time.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from tessera import logs
from tessera.serving.policy import error_doc
from tessera.wire import WireError, read_body
from webhook.admission import admit_body
from webhook.config import WebhookConfig

logger = logging.getLogger(__name__)

#: ``app.extensions`` key holding the :class:`WebhookConfig`.
EXTENSION: Final = "tessera.webhook"


def _json(status: int, body: dict[str, Any]) -> Response:
    response = jsonify(body)
    response.status_code = status
    return response


def create_app(config: WebhookConfig | None = None) -> Flask:
    """Build the app. Without ``config`` it is read (and validated) from the environment."""
    if config is None:
        config = WebhookConfig.from_env(os.environ)
        logs.configure(config.serving.log_level)
    app = Flask("webhook")
    # Werkzeug's own cap, for anything it reads itself; /mutate reads through read_body,
    # which also refuses chunked bodies over the cap (Werkzeug truncates those).
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes
    app.extensions[EXTENSION] = config

    @app.post("/mutate")
    def mutate() -> Response:
        body = read_body(request.environ, config.max_body_bytes)
        status, answer = admit_body(body, config)
        return _json(status, answer)

    @app.get("/healthz")
    def healthz() -> Response:
        return _json(200, {"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        # The webhook keeps no state; it is ready when it can serve TLS, i.e. when the
        # certificate files it was given are still there (gunicorn reads them per connection).
        tls = (config.serving.tls_cert, config.serving.tls_key)
        missing = [p for p in tls if p and not os.path.isfile(p)]
        if missing:
            return _json(503, {"status": "not ready", "missing": missing})
        return _json(200, {"status": "ready"})

    @app.errorhandler(Exception)
    def any_error(exc: Exception) -> Response:
        if isinstance(exc, WireError):
            return _json(exc.status, error_doc(exc.status, str(exc)))
        if isinstance(exc, HTTPException):
            code = exc.code or 400
            return _json(code, error_doc(code, exc.description or exc.name))
        # A bug: admit() answers every review itself.
        logger.exception("unexpected error serving %s %s", request.method, request.path)
        return _json(400, error_doc(400, "could not process request: "
                                         f"{type(exc).__name__}: {exc}"))

    # Admission only computes (no API call, no file): the server answers it in its event
    # loop, without the hop to a request thread (tessera.serving.gunicorn.bridge).
    app.inline_paths = ("/mutate",)  # type: ignore[attr-defined]
    return app
