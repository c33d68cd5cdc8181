"""TLS material for Tessera's services. :mod:`certs.builder` is the pure certificate builder
(``build_ca``, ``build_leaf``); the ``tessera certs`` CLI is built around it."""
