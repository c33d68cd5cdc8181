#!/usr/bin/env bash
# Build the Dockerfile's image and run Tessera from it on the dev cluster as the chart deploys
# it (tests/e2e/test_image.py): the webhook and allocator containers, the certs Job's, the e2e
# smoke through them. A command of its own, beside the README's test command (hack/test.sh),
# because its first run on a fresh machine (podman, the stand-in base, the image's build) would
# push that past half an hour; docs/deploy.md ("The image") has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."

source hack/setup.sh

# Debian's podman with runc builds and runs the image; mmdebstrap makes the stand-in for
# python:3.11-slim from Debian's packages (no image registry is reachable). Installed only when
# missing, as root.
if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
    || ! command -v mmdebstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap >/dev/null
  else
    echo "test-image: podman, runc and mmdebstrap are missing (and building the stand-in base" \
         "needs root): sudo apt-get install -y podman runc mmdebstrap" >&2; exit 2
  fi
fi

# The dev cluster's control plane, as hack/test.sh builds it (once, then cached).
bash hack/build-controlplane.sh >/dev/null

.venv/bin/pytest -q -m image tests/e2e/test_image.py "$@"
