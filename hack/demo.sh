#!/usr/bin/env bash
# Set up and run the demo: Tessera on a real local control plane (etcd, kube-apiserver,
# kube-scheduler built from Go modules on first use), fake GPU nodes, example pods in every
# request form, and a per-card table of who got what. Ctrl-C stops and cleans up.
# Needs: Python >= 3.11 with venv, Go >= 1.24 on PATH (first run only), bash.
# Extra arguments go to `tessera demo` (e.g. --no-wait, --workdir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 required"'
if ! python3 -m venv --help >/dev/null 2>&1; then
  echo "python3 venv module missing: apt-get install -y python3-venv" >&2; exit 2
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --disable-pip-version-check -q -e '.[dev]'
exec .venv/bin/tessera demo "$@"
