"""A real local control plane for tests and the demo.

etcd, kube-apiserver and kube-scheduler (built from Go modules by hack/build-controlplane.sh)
on loopback, with Tessera's webhook and allocator wired in, and fake GPU nodes. Used by the
end-to-end tests (tests/e2e) and by ``tessera demo``. This package is an edge: it may import
``kubernetes``; nothing in the services' core imports it.
"""

from __future__ import annotations

from tessera.vocabulary import TesseraError


class DevClusterError(TesseraError):
    """The local control plane could not be built, started or driven. The message says why."""
