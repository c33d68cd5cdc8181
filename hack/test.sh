#!/usr/bin/env bash
# Set up and run every test: lint, types, unit, contract, TLS and end-to-end on a real
# control plane. This is the README's test command and exactly what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 required"'
if ! python3 -m venv --help >/dev/null 2>&1; then
  echo "python3 venv module missing: apt-get install -y python3-venv" >&2; exit 2
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --disable-pip-version-check -q -e '.[dev]'

# etcd, kube-apiserver, kube-scheduler, kubectl: built once from Go modules, then cached.
bash hack/build-controlplane.sh >/dev/null

.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/pytest -q "$@"
