#!/usr/bin/env bash
# Set up and run the demo: Tessera on a real local control plane (etcd, kube-apiserver,
# kube-scheduler built from Go modules on first use), fake GPU nodes, example pods in every
# request form, and a per-card table of who got what. Ctrl-C stops and cleans up.
# Needs: Python >= 3.11 and bash; hack/setup.sh installs the rest when missing.
# Extra arguments go to the demo (e.g. --no-wait, --workdir DIR; --help lists them). The dev
# harness (devcluster/) runs from the checkout: it is not part of the package or the image.
set -euo pipefail
cd "$(dirname "$0")/.."

source hack/setup.sh
exec .venv/bin/python -m devcluster "$@"
