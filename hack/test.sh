#!/usr/bin/env bash
# Set up and run every test: lint, types, unit, contract, TLS and end-to-end on a real
# control plane. This is the README's test command and exactly what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

source hack/setup.sh

# etcd, kube-apiserver, kube-scheduler, kubectl: built once from Go modules, then cached.
bash hack/build-controlplane.sh >/dev/null

.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/pytest -q "$@"
