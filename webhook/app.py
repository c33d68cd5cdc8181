"""The Flask shell around :mod:`webhook.admission`: routes, body cap, error mapping.

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
    # Werkzeug refuses larger bodies with 413 before we read them.
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes
    app.extensions[EXTENSION] = config

    @app.post("/mutate")
    def mutate() -> Response:
        body = request.get_data(cache=False)
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

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        code = exc.code or 400
        message = exc.description or exc.name
        if code == 413:
            message = f"request body is larger than the {config.max_body_bytes}-byte limit"
        return _json(code, {"code": code, "message": message})

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:  # pragma: no cover - admit() never raises
        logger.exception("unexpected error serving %s %s", request.method, request.path)
        return _json(400, {"code": 400, "message": f"could not process request: {exc}"})

    return app
