#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-scheduler, kubectl (and KWOK, Helm) from Go modules at one pinned
# Kubernetes version, into a user-level cache keyed by version; reuse them when present.
#
# Why a wrapper module: `go install k8s.io/kubernetes/cmd/...@vX` is refused because
# k8s.io/kubernetes's go.mod replaces every staging module with ./staging/... . The wrapper
# requires k8s.io/kubernetes and replaces each staging module with its published v0.Y.Z
# (the approach of kubernetes-sigs/scheduler-plugins). The list is generated from the
# upstream go.mod of the exact tag, never typed by hand.
#
# etcd: built from go.etcd.io/etcd/server/v3 at the version k8s.io/kubernetes itself
# requires (v3.6.4 for 1.34), so the apiserver's etcd client and the server are the pair
# upstream tests together. Debian's etcd-server 3.4.23 is older than 1.34's client.
#
# v1.34.4: the newest 1.34 patch whose every staging module (v0.34.4) the module proxy we
# can reach serves; v1.34.7 lacks k8s.io/endpointslice and others at v0.34.7 there.
#
# KWOK (sigs.k8s.io/kwok) plays the kubelets: it keeps the fake nodes Ready with lease
# heartbeats and moves bound pods through their phases. It is a plain Go module (no replace
# directives), so `go install module@version` builds it.
#
# Helm (helm.sh/helm/v3) renders charts/tessera for the chart tests; also a plain Go module.
# Its Makefile stamps its version and the Kubernetes version it assumes for `helm template`
# into the binary (-X ldflags); without them it reports v3.19 and renders for Kubernetes
# 1.20, so the same flags are passed here, with the control plane's minor.
#
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail

KUBE_VERSION="${TESSERA_KUBE_VERSION:-v1.34.4}"
KWOK_VERSION="${TESSERA_KWOK_VERSION:-v0.7.0}"
HELM_VERSION="${TESSERA_HELM_VERSION:-v3.19.5}"
CACHE_ROOT="${TESSERA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}"
OUT="$CACHE_ROOT/controlplane/$KUBE_VERSION"
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl)

have_kube() {
  for b in "${BINARIES[@]}"; do [ -x "$OUT/bin/$b" ] || return 1; done
}
have_kwok() {
  [ -x "$OUT/bin/kwok" ] && [ "$(cat "$OUT/KWOK_VERSION" 2>/dev/null)" = "$KWOK_VERSION" ]
}
have_helm() {
  [ -x "$OUT/bin/helm" ] && [ "$(cat "$OUT/HELM_VERSION" 2>/dev/null)" = "$HELM_VERSION" ]
}
if have_kube && have_kwok && have_helm; then
  echo "$OUT/bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-controlplane: 'go' is not on PATH; install Go >= 1.24 (Debian: golang, or go.dev)" >&2; exit 2; }
mkdir -p "$OUT/bin"

if ! have_kwok; then
  echo "build-controlplane: building kwok $KWOK_VERSION" >&2
  GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$OUT/bin" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
  echo "$KWOK_VERSION" > "$OUT/KWOK_VERSION"
fi
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
if ! have_helm; then
  echo "build-controlplane: building helm $HELM_VERSION" >&2
  helm_x="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in pkg/chartutil pkg/lint/rules; do
    helm_x="$helm_x -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1"
    helm_x="$helm_x -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$OUT/bin" \
    go install -trimpath -ldflags "-s -w $helm_x" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  echo "$HELM_VERSION" > "$OUT/HELM_VERSION"
fi
if have_kube; then
  echo "$OUT/bin"
  exit 0
fi

patch="${KUBE_VERSION##*.}"
staging_version="v0.${minor}.${patch}"

src="$OUT/src"
rm -rf "$src"; mkdir -p "$src" "$OUT/bin"
cd "$src"
export GOFLAGS="${GOFLAGS:--buildvcs=false} -mod=mod"
export CGO_ENABLED=0

echo "build-controlplane: fetching k8s.io/kubernetes@$KUBE_VERSION go.mod" >&2
modfile=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$modfile" ] || { echo "build-controlplane: could not download k8s.io/kubernetes@$KUBE_VERSION (Go module proxy reachable?)" >&2; exit 3; }
go_directive=$(awk '$1=="go"{print $2; exit}' "$modfile")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$modfile")
staging=$(grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" | awk '{print $1}')

{
  echo "module tessera.local/controlplane"
  echo
  echo "go $go_directive"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $KUBE_VERSION"
  echo "	go.etcd.io/etcd/server/v3 $etcd_version"
  echo ")"
  echo
  echo "replace ("
  for m in $staging; do echo "	$m => $m $staging_version"; done
  echo ")"
} > go.mod

mkdir -p cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubectl cmd/etcd
cat > cmd/kube-apiserver/main.go <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
GO
cat > cmd/kube-scheduler/main.go <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() { os.Exit(cli.Run(app.NewSchedulerCommand())) }
GO
cat > cmd/kube-controller-manager/main.go <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }
GO
cat > cmd/kubectl/main.go <<'GO'
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
GO
cat > cmd/etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO

echo "build-controlplane: resolving modules (Kubernetes $KUBE_VERSION, etcd $etcd_version)" >&2
go mod tidy >&2

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
for b in "${BINARIES[@]}"; do
  if [ ! -x "$OUT/bin/$b" ]; then
    echo "build-controlplane: building $b (a cold build takes many minutes on 2 cores)" >&2
    go build -trimpath -ldflags "$ldflags" -o "$OUT/bin/$b.tmp" "./cmd/$b" >&2
    mv "$OUT/bin/$b.tmp" "$OUT/bin/$b"
  fi
done
echo "$KUBE_VERSION etcd=$etcd_version go=$(go version | awk '{print $3}')" > "$OUT/VERSIONS"
echo "$OUT/bin"
