"""A pod's container run with podman the way the kubelet runs it, on the host's network (pure).

The translation of a rendered pod spec into ``podman run`` flags: the image, the args with
``$(VAR)`` expanded from the container's env, the env (``fieldRef`` values resolved), the
user and group of the securityContext, a read-only root, dropped capabilities, no privilege
escalation, the memory limit, Secret volumes and the ServiceAccount token at their mount
paths, and memory-backed emptyDirs. Whatever of a pod spec it does not know how to run is
refused, so a chart change is never silently ignored.

There is no pod network here: containers share the host's, so two pods cannot both listen on
8443. ``replacements`` localise addresses (exact substrings of args and exec commands, e.g.
``--port=8443`` to a free port), the one liberty taken, as tests/deploy takes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster import DevClusterError

#: Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

Obj = dict[str, Any]


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` as the kubelet expands it in args (unknown variables are left as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)),
                  text)


def localise(args: Iterable[str], replacements: Mapping[str, str],
             env: Mapping[str, str] | None = None) -> list[str]:
    """Arguments with ``$(VAR)`` expanded and in-cluster addresses replaced (exact
    substrings)."""
    result = []
    for arg in args:
        arg = expand(arg, env or {})
        for old, new in replacements.items():
            arg = arg.replace(old, new)
        result.append(arg)
    return result


_MEMORY = re.compile(r"^(\d+)(Ki|Mi|Gi)?$")
_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def memory_bytes(quantity: str) -> int:
    """A memory quantity of the forms the chart uses (plain bytes, Ki, Mi, Gi)."""
    match = _MEMORY.match(str(quantity))
    if match is None:
        raise DevClusterError(f"memory quantity {quantity!r} is not one this runner reads")
    return int(match[1]) * _UNITS[match[2]]


@dataclass(frozen=True)
class PodContext:
    """What the kubelet knows about the pod besides its spec."""

    name: str
    namespace: str
    #: The API server as the kubelet's service env gives it (KUBERNETES_SERVICE_HOST/PORT).
    api_host: str
    api_port: int
    #: Host directories holding each Secret volume's files, by Secret name.
    secrets: Mapping[str, Path] = field(default_factory=dict)
    #: The host directory with ``token``, ``ca.crt`` and ``namespace`` (projected token).
    service_account: Path | None = None


@dataclass(frozen=True)
class ContainerRun:
    """One container of a pod, ready for ``podman run`` (see :meth:`podman_args`)."""

    name: str
    image: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    user: str
    groups: tuple[int, ...]
    read_only_root: bool
    drop_all_capabilities: bool
    no_new_privileges: bool
    memory_limit: int | None
    #: (host path, container path) read-only bind mounts.
    mounts: tuple[tuple[Path, str], ...]
    #: (container path, size in bytes) memory-backed emptyDirs.
    tmpfs: tuple[tuple[str, int], ...]

    def podman_args(self, ulimits: Iterable[str]) -> list[str]:
        """``podman run`` arguments (after ``run``) that start this container attached."""
        argv = ["--name", self.name, "--network=host", "--pull=never", "--http-proxy=false",
                *ulimits, f"--user={self.user}",
                *(f"--group-add={g}" for g in self.groups)]
        if self.read_only_root:
            # Podman would otherwise add writable tmpfs at /tmp, /run and /var/tmp; the kubelet
            # adds none, so only the pod's own volumes are writable.
            argv += ["--read-only", "--read-only-tmpfs=false"]
        if self.drop_all_capabilities:
            argv.append("--cap-drop=all")
        if self.no_new_privileges:
            argv.append("--security-opt=no-new-privileges")
        if self.memory_limit is not None:
            argv.append(f"--memory={self.memory_limit}")
        argv += [f"--volume={host}:{path}:ro" for host, path in self.mounts]
        argv += [f"--tmpfs={path}:rw,size={size},mode=1777" for path, size in self.tmpfs]
        argv += [f"--env={k}={v}" for k, v in self.env]
        return [*argv, self.image, *self.args]


def _env(container: Obj, pod: PodContext) -> list[tuple[str, str]]:
    fields = {"metadata.name": pod.name, "metadata.namespace": pod.namespace}
    # The kubelet's service environment for the default "kubernetes" Service, which in-cluster
    # clients read (client-go's rest.InClusterConfig, the Python client's load_incluster_config).
    env = [("KUBERNETES_SERVICE_HOST", pod.api_host),
           ("KUBERNETES_SERVICE_PORT", str(pod.api_port))]
    for entry in container.get("env") or []:
        if "value" in entry:
            env.append((entry["name"], str(entry["value"])))
            continue
        ref = (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
        if ref not in fields:
            raise DevClusterError(f"env {entry['name']}: {entry.get('valueFrom')} not supported")
        env.append((entry["name"], fields[ref]))
    return env


def _volumes(spec: Obj, container: Obj, pod: PodContext
             ) -> tuple[list[tuple[Path, str]], list[tuple[str, int]]]:
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    mounts: list[tuple[Path, str]] = []
    tmpfs: list[tuple[str, int]] = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if mount.get("subPath"):
            raise DevClusterError(f"volume mount {mount['name']}: subPath not supported")
        if "secret" in volume:
            secret = volume["secret"]["secretName"]
            if secret not in pod.secrets:
                raise DevClusterError(f"Secret {secret} of volume {mount['name']} not given")
            mounts.append((pod.secrets[secret], mount["mountPath"]))
        elif "emptyDir" in volume and (volume["emptyDir"] or {}).get("medium") == "Memory":
            tmpfs.append((mount["mountPath"], memory_bytes(volume["emptyDir"]["sizeLimit"])))
        else:
            raise DevClusterError(f"volume {mount['name']}: only Secrets and memory emptyDirs")
    if spec.get("automountServiceAccountToken", True):
        if pod.service_account is None:
            raise DevClusterError(f"{pod.name} mounts a ServiceAccount token; none given")
        mounts.append((pod.service_account, SERVICE_ACCOUNT_DIR))
    return mounts, tmpfs


def container_run(spec: Obj, container: Obj, pod: PodContext,
                  replacements: Mapping[str, str]) -> ContainerRun:
    """The container ``container`` of pod spec ``spec`` as the kubelet would run it here."""
    if "command" in container:
        raise DevClusterError(f"{container['name']}: command overrides the ENTRYPOINT")
    security = {**(spec.get("securityContext") or {}), **(container.get("securityContext") or {})}
    uid, gid = security.get("runAsUser"), security.get("runAsGroup")
    if uid is None or gid is None:
        raise DevClusterError(f"{container['name']}: runAsUser and runAsGroup must be set")
    capabilities = security.get("capabilities") or {}
    if capabilities.get("add"):
        raise DevClusterError(f"{container['name']}: added capabilities are not supported")
    env = _env(container, pod)
    mounts, tmpfs = _volumes(spec, container, pod)
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    fs_group = (spec.get("securityContext") or {}).get("fsGroup")
    return ContainerRun(
        name=f"{pod.name}-{container['name']}",
        image=container["image"],
        args=tuple(localise(container.get("args") or [], replacements, dict(env))),
        env=tuple(env),
        user=f"{uid}:{gid}",
        groups=(fs_group,) if fs_group is not None else (),
        read_only_root=bool(security.get("readOnlyRootFilesystem")),
        drop_all_capabilities="ALL" in (capabilities.get("drop") or []),
        no_new_privileges=security.get("allowPrivilegeEscalation") is False,
        memory_limit=memory_bytes(limit) if limit is not None else None,
        mounts=tuple(mounts),
        tmpfs=tuple(tmpfs),
    )


def exec_probe(container: Obj, kind: str, replacements: Mapping[str, str]) -> list[str] | None:
    """The command of an exec probe (``readinessProbe``/``livenessProbe``), localised."""
    probe = container.get(kind) or {}
    command = (probe.get("exec") or {}).get("command")
    return localise(command, replacements) if command else None


def http_probe(container: Obj, kind: str) -> tuple[str, str, int] | None:
    """(scheme, path, container port) of an httpGet probe, the named port resolved."""
    get = (container.get(kind) or {}).get("httpGet")
    if not get:
        return None
    port = get["port"]
    if isinstance(port, str):
        port = next(p["containerPort"] for p in container.get("ports") or []
                    if p.get("name") == port)
    return get.get("scheme", "HTTP").lower(), get["path"], int(port)
