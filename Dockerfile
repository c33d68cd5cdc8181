# Tessera: one image for both services; the Deployments choose the subcommand
# (`tessera webhook`, `tessera allocator`, `tessera certs ...`).
#
# Built and run by tests/e2e/test_image.py (docs/deploy.md, "The image"), which passes
# PYTHON_IMAGE: no image registry is reachable from the project's machines, so it builds a
# stand-in for python:3.11-slim from Debian's packages (devcluster/image.py). Every other step
# is the one users run.

# The base of both stages: the official slim Python image unless a build argument says otherwise.
ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: a virtualenv holding Tessera and its runtime dependencies only (no dev extras)
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/tessera

WORKDIR /src
# Metadata first, then the packages: setuptools reads pyproject.toml and README.md.
COPY pyproject.toml README.md ./
COPY tessera ./tessera
COPY webhook ./webhook
COPY allocator ./allocator
COPY certs ./certs
COPY kubectl_tessera ./kubectl_tessera
# `.` is this checkout; its dependencies are the [project] dependencies of pyproject.toml.
RUN /opt/tessera/bin/pip install --no-compile . \
    && /opt/tessera/bin/python -m compileall -q /opt/tessera/lib

# ---- runtime: the same slim base, the virtualenv, a non-root user, nothing else
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="tessera" \
      org.opencontainers.image.description="Fractional GPUs for Kubernetes: admission webhook and scheduler extender" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed uid/gid that matches runAsUser/runAsGroup in manifests/base.
RUN groupadd --system --gid 10001 tessera \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin tessera

COPY --from=build /opt/tessera /opt/tessera

# The root filesystem is mounted read-only: no bytecode writes; logs go to stderr unbuffered.
ENV PATH=/opt/tessera/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:10001
EXPOSE 8443

ENTRYPOINT ["tessera"]
CMD ["--help"]
