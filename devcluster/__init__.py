"""A real local control plane for tests and the demo.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK (built from Go modules
by hack/build-controlplane.sh) on loopback, with Tessera's webhook and allocator wired in, and
fake GPU nodes. Used by the
end-to-end tests (tests/e2e) and by the demo (``hack/demo.sh``: ``python -m devcluster``). It
runs from the checkout: not packaged, not in the image, imported by nothing shipped.
"""

from __future__ import annotations

from tessera.vocabulary import TesseraError


class DevClusterError(TesseraError):
    """The local control plane could not be built, started or driven. The message says why."""
