# Sourced by hack/test.sh and hack/demo.sh: everything a fresh Debian machine with Python 3.11
# needs, installed only when missing. Idempotent and quiet when all is there.

# Python >= 3.11 with a working venv (Debian ships ensurepip separately, in python3-venv).
python3 -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 required"'
if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
  else
    echo "python3's venv support is missing: sudo apt-get install -y python3-venv" >&2; exit 2
  fi
fi
# bench extra too: the test command runs the openb replay's smoke test and type-checks it.
if [ ! -x .venv/bin/python ]; then
  echo "setup: installing Tessera and its Python dependencies into .venv (first run only;" \
       "a minute or two)" >&2
  python3 -m venv .venv
fi
.venv/bin/pip install --disable-pip-version-check -q -e '.[dev,bench]'

# Go >= 1.24 builds the upstream control plane (once; the binaries are cached). Debian's
# golang-go is too old, so a missing or old Go is replaced by the official toolchain zip from
# the Go module proxy named first in GOPROXY (the same artefact GOTOOLCHAIN=auto downloads),
# kept in the user cache.
TESSERA_GO_VERSION="${TESSERA_GO_VERSION:-1.24.13}"
go_ok() {
  command -v go >/dev/null 2>&1 || return 1
  local v; v=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || return 1
  [ "$(printf '%s\n1.24\n' "$v" | sort -V | head -n1)" = "1.24" ]
}
if ! go_ok; then
  go_root="${XDG_CACHE_HOME:-$HOME/.cache}/tessera/go$TESSERA_GO_VERSION"
  if [ ! -x "$go_root/bin/go" ]; then
    # GOPROXY is a list separated by ',' or '|'; 'direct' and 'off' name no proxy.
    proxy=$(printf '%s' "${GOPROXY:-}" | tr '|' ',' | cut -d, -f1)
    case "$proxy" in
      ""|direct|off)
        echo "setup: Go >= 1.24 is needed and missing, and GOPROXY names no Go module proxy" \
             "to fetch it from. Install Go >= 1.24, or set GOPROXY to your module proxy." >&2
        exit 2 ;;
    esac
    arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
    url="${proxy%/}/golang.org/toolchain/@v/v0.0.1-go$TESSERA_GO_VERSION.linux-$arch.zip"
    echo "setup: fetching Go $TESSERA_GO_VERSION from the module proxy in GOPROXY" >&2
    tmp=$(mktemp -d)
    .venv/bin/python - "$url" "$tmp" <<'PY'
import io, sys, urllib.request, zipfile
data = urllib.request.urlopen(sys.argv[1], timeout=600).read()
zipfile.ZipFile(io.BytesIO(data)).extractall(sys.argv[2])
PY
    src=$(find "$tmp" -mindepth 2 -maxdepth 2 -type d -name 'toolchain@*' | head -n1)
    mkdir -p "$(dirname "$go_root")" && rm -rf "$go_root" && mv "$src" "$go_root"
    chmod +x "$go_root"/bin/* "$go_root"/pkg/tool/*/* && rm -rf "$tmp"
  fi
  export PATH="$go_root/bin:$PATH"
fi
