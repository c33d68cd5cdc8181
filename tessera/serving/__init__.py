"""How the services meet the network: their listener configuration and the two servers.

- :mod:`tessera.serving.config`: the ``TESSERA_*`` listener variables, flags over them, and
  a service's start (re-exported here: ``from tessera import serving``).
- :mod:`tessera.serving.policy` and :mod:`tessera.serving.tls`: what both servers share,
  the body policy (one cap, one 413, one deadline), the JSON error shape, the TLS files.
- :mod:`tessera.serving.gunicorn`: the webhook's server, gunicorn's asyncio worker with a
  WSGI bridge (the server the design names; nothing on the admission path needs more).
- :mod:`tessera.serving.granian`: the allocator's server, granian (Rust HTTP/1.1, HTTP/2 and
  rustls), for kube-scheduler's two calls a pod (docs/benchmarks.md, issue 13's tenth pass).

The two servers import nothing of each other (``.importlinter``). Each one's reliance on its
server's private internals sits behind one function in its ``internals`` module, with a
test that fails when an upgrade changes what was read (tests/serving/test_internals.py).
docs/serving.md draws the package.
"""

from tessera.serving.config import (
    DIALECT_ENV_HELP,
    DIALECT_FLAGS,
    LOG_LEVELS,
    OBJECT_NAME,
    EnvFlags,
    EnvReader,
    Listener,
    ServingConfig,
    add_env_flags,
    env_with_flags,
    start,
)

__all__ = [
    "DIALECT_ENV_HELP",
    "DIALECT_FLAGS",
    "LOG_LEVELS",
    "OBJECT_NAME",
    "EnvFlags",
    "EnvReader",
    "Listener",
    "ServingConfig",
    "add_env_flags",
    "env_with_flags",
    "start",
]
