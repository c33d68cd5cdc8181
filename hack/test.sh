#!/usr/bin/env bash
# Set up and run every test: lint, types, unit, contract, TLS and end-to-end on a real
# control plane. This is the README's test command and exactly what .ci/run calls.
#
#   bash hack/test.sh            everything, one test at a time
#   bash hack/test.sh --fast     the inner loop's tier: everything but the end-to-end tests
#                                (marker e2e), spread over every core (pytest-xdist), then
#                                the few that measure CPU (marker serial) alone
# Other arguments go to pytest, after the tier's own.
set -euo pipefail
cd "$(dirname "$0")/.."

fast=""
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi

source hack/setup.sh

# Debian's chromium and its chromedriver: the allocator page's browser tests (tests/page,
# tests/e2e/test_page_demo.py). Installed only when missing, as root.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "test: chromium and chromedriver are missing: sudo apt-get install -y chromium" \
         "chromium-driver" >&2; exit 2
  fi
fi

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, KWOK and helm: built
# once from Go modules, then cached.
bash hack/build-controlplane.sh >/dev/null
# Prometheus (the measured-figures e2e tests, docs/metrics.md): built once from its Go module.
bash hack/build-prometheus.sh >/dev/null

.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports
if [ -n "$fast" ]; then
  status=0
  .venv/bin/pytest -q -m "not e2e and not serial" -n auto "$@" || status=$?
  .venv/bin/pytest -q -m "serial and not e2e" "$@" || status=$?
  exit "$status"
else
  .venv/bin/pytest -q "$@"
fi
