#!/usr/bin/env bash
# Build the Prometheus server from its Go module at one pinned version, into the same
# user-level cache as the control plane (hack/build-controlplane.sh), keyed by version; reuse
# it when present. The dev cluster runs it to scrape the stand-in dcgm-exporter
# (devcluster/dcgm.py) for the measured-figures tests and demo (docs/metrics.md).
#
# Prometheus 3.x is published to the module proxy as github.com/prometheus/prometheus
# v0.3XX.Y (3.16.0 is v0.316.0); its go.mod has no replace or exclude directive, so
# `go install module/cmd/prometheus@version` builds it. `-tags remove_all_sd` leaves out every
# cloud service discovery (plugins/plugin_*.go: `//go:build !remove_all_sd || enable_*_sd`);
# static, file and HTTP discovery stay (plugins/minimum.go). Without `builtinassets` the web
# UI is not embedded; the HTTP API the allocator reads is all there. Its go.mod asks for Go
# 1.26: an older go (hack/setup.sh installs 1.24 where none is) fetches that toolchain from the
# module proxy itself (GOTOOLCHAIN=auto, Go's default).
#
# Prints the directory holding the binary on its last line of stdout.
set -euo pipefail

PROMETHEUS_VERSION="${TESSERA_PROMETHEUS_VERSION:-v0.316.0}"
CACHE_ROOT="${TESSERA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}"
OUT="$CACHE_ROOT/prometheus/$PROMETHEUS_VERSION"

if [ -x "$OUT/bin/prometheus" ]; then
  echo "$OUT/bin"
  exit 0
fi
command -v go >/dev/null || { echo "build-prometheus: 'go' is not on PATH; install Go >= 1.21 (hack/setup.sh does)" >&2; exit 2; }
mkdir -p "$OUT/bin"

# v0.316.0 -> 3.16.0: the version Prometheus reports (its Makefile stamps it the same way).
minor="${PROMETHEUS_VERSION#v0.}"; patch="${minor#*.}"; minor="${minor%%.*}"
release="${minor:0:1}.$((10#${minor:1})).$patch"
ldflags="-s -w -X github.com/prometheus/common/version.Version=$release"
ldflags="$ldflags -X github.com/prometheus/common/version.Branch=tessera-cache"

echo "build-prometheus: building prometheus $release ($PROMETHEUS_VERSION; a cold build takes minutes on 2 cores)" >&2
GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$OUT/bin.tmp" \
  go install -trimpath -tags remove_all_sd -ldflags "$ldflags" \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION" >&2
mv "$OUT/bin.tmp/prometheus" "$OUT/bin/prometheus"
rmdir "$OUT/bin.tmp"
echo "$release module=$PROMETHEUS_VERSION go=$(go version | awk '{print $3}')" > "$OUT/VERSIONS"
echo "$OUT/bin"
