#!/usr/bin/env bash
# Build the krew archive of `kubectl tessera` (plugins/kubectl-tessera, the launcher) and print
# its path and sha256. The archive is byte-for-byte reproducible (fixed mtime, owner, mode,
# gzip header), so plugins/tessera.yaml can carry its sha256 and a test can check it.
#   bash hack/krew-archive.sh [OUT_DIR]     (default: dist/)
#   kubectl krew install --manifest=plugins/tessera.yaml --archive=dist/kubectl-tessera.tar.gz
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-dist}"
mkdir -p "$out"
python3 - "$out/kubectl-tessera.tar.gz" <<'PY'
import gzip, hashlib, io, sys, tarfile
path = sys.argv[1]
data = open("plugins/kubectl-tessera", "rb").read()
raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    info = tarfile.TarInfo("kubectl-tessera")
    info.size, info.mode, info.mtime = len(data), 0o755, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))
packed = gzip.compress(raw.getvalue(), mtime=0)
open(path, "wb").write(packed)
print(path, hashlib.sha256(packed).hexdigest())
PY
