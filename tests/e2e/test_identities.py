"""Every component has its own identity, and the allocator's is bound by exactly our RBAC."""

from __future__ import annotations

import subprocess

import pytest

from devcluster.cluster import DevCluster

pytestmark = pytest.mark.e2e

ALLOCATOR = "system:serviceaccount:tessera-system:tessera-allocator"


def kubectl(cluster: DevCluster, identity: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.binaries.kubectl),
         f"--kubeconfig={cluster.control_plane.kubeconfig_path(identity)}", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.mark.parametrize(
    ("identity", "user"),
    [("admin", "tessera-admin"), ("kube-scheduler", "system:kube-scheduler"),
     ("tessera-allocator", ALLOCATOR)],
)
def test_each_component_talks_to_the_api_server_as_itself(
    cluster: DevCluster, identity: str, user: str
) -> None:
    result = kubectl(cluster, identity, "auth", "whoami",
                     "-o", "jsonpath={.status.userInfo.username}")
    assert result.returncode == 0, result.stderr
    assert result.stdout == user


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (["watch", "pods", "--all-namespaces"], True),
        (["patch", "pods", "-n", "default"], True),
        (["create", "pods", "--subresource=binding", "-n", "default"], True),
        (["list", "nodes"], True),
        (["update", "leases/tessera-allocator", "-n", "tessera-system"], True),
        (["update", "leases/someone-else", "-n", "tessera-system"], False),
        (["delete", "pods", "-n", "default"], False),
        (["update", "pods", "-n", "default"], False),
        (["patch", "nodes"], False),
        (["get", "secrets", "--all-namespaces"], False),
        (["create", "events.events.k8s.io", "-n", "default"], True),
        (["patch", "events.events.k8s.io", "-n", "default"], True),
        (["list", "events.events.k8s.io", "-n", "default"], False),
        (["delete", "events.events.k8s.io", "-n", "default"], False),
        (["create", "events", "-n", "default"], False),
        # Preemption, on by default (docs/preemption.md): evict, nominate, weigh budgets.
        (["create", "pods", "--subresource=eviction", "-n", "default"], True),
        (["patch", "pods", "--subresource=status", "-n", "default"], True),
        (["list", "poddisruptionbudgets.policy", "--all-namespaces"], True),
        (["delete", "poddisruptionbudgets.policy", "-n", "default"], False),
    ],
)
def test_the_allocator_can_do_what_its_shipped_rbac_grants_and_nothing_else(
    cluster: DevCluster, args: list[str], allowed: bool
) -> None:
    result = kubectl(cluster, "tessera-allocator", "auth", "can-i", *args)
    assert result.stdout.strip() == ("yes" if allowed else "no"), result.stderr
