"""Fixtures over the dev cluster: one real control plane per test session.

The binaries are built by hack/build-controlplane.sh when missing (a cold build takes long;
afterwards they are reused from the user cache). Each test gets its own namespace and its own
pool of fake nodes (selected by a node label), so tests on the shared cluster never compete
for cards. When any test fails, the cluster's work directory (all component logs) is kept and
its path printed.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dev_clusters import running

from devcluster.binaries import Binaries, ensure_binaries
from devcluster.cluster import DevCluster
from devcluster.nodes import GpuNodeSpec, delete_nodes
from devcluster.options import Options
from devcluster.workloads import delete_pods, ensure_namespace, list_objects
from tessera.dialects import Dialect

POOL_LABEL = "tessera.e2e/pool"
_counter = itertools.count()


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    return ensure_binaries()


#: Every dialect, the opt-in ones too, so each has its end-to-end test on the one cluster (the
#: webhook registers the matchConditions of these flags; the shipped defaults are proven against
#: the real API server in tests/deploy).
ALL_DIALECTS = f"--dialects={','.join(Dialect)}"


@pytest.fixture(scope="session")
def cluster(binaries: Binaries, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    base = os.environ.get("TESSERA_E2E_WORKDIR")
    workdir = Path(base) if base else None
    dev = DevCluster(binaries, workdir, Options(webhook_args=(ALL_DIALECTS,),
                                                allocator_args=(ALL_DIALECTS,)))
    with running(dev, request, "dev cluster"):
        yield dev


@pytest.fixture
def core_v1(cluster: DevCluster) -> Any:
    return cluster.core_v1()


@pytest.fixture
def namespace(cluster: DevCluster, core_v1: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace, deleted afterwards with everything in it.

    The namespace goes first: once it is Terminating nothing new may be created in it, so a
    test's Deployment or Job cannot replace the pods deleted next (at once, so that the next
    test's nodes never see them); the namespace controller finishes the rest.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40]
    name = f"e2e-{next(_counter)}-{slug}".rstrip("-")
    ensure_namespace(core_v1, name)
    yield name
    core_v1.delete_namespace(name)
    pods = list_objects(core_v1.list_namespaced_pod, name)
    delete_pods(core_v1, name, [p["metadata"]["name"] for p in pods])


NodePool = Callable[[list[GpuNodeSpec]], dict[str, str]]


@pytest.fixture
def pool(cluster: DevCluster, core_v1: Any, namespace: str) -> Iterator[NodePool]:
    """Create this test's nodes; returns the nodeSelector that confines pods to them.

    Node names get the namespace as prefix so they are unique across the session.
    """
    created: list[str] = []

    def make(specs: list[GpuNodeSpec]) -> dict[str, str]:
        labelled = [
            GpuNodeSpec(
                name=s.name,
                cards=s.cards,
                inventory=s.inventory,
                labels={**s.labels, POOL_LABEL: namespace},
                cpu=s.cpu,
                memory=s.memory,
                pods=s.pods,
                extra_resources=s.extra_resources,
            )
            for s in specs
        ]
        cluster.add_nodes(labelled)
        created.extend(s.name for s in labelled)
        return {POOL_LABEL: namespace}

    yield make
    delete_nodes(core_v1, created)
