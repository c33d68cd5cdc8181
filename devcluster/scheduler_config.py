"""The KubeSchedulerConfiguration the dev cluster runs: the shipped file, with only addresses
and credentials substituted (and the variants docs/deploy.md describes: fewer nodes to score,
no CPU-only scoring, another agent's managed resources). Pure but for reading the file."""

from __future__ import annotations

import base64
import copy
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from certs.builder import KeyPair
from devcluster import DevClusterError
from tessera.agent_profiles import ManagedResource

#: The KubeSchedulerConfiguration Tessera ships for a cluster's own kube-scheduler; the dev
#: cluster runs it with only addresses and credentials substituted.
SCHEDULER_CONFIG = Path("manifests/scheduler/kube-scheduler-config.yaml")
#: The verb of the shipped entry that scores CPU-only pods; docs/deploy.md turns it off by
#: deleting that entry, and so does :func:`without_cpu_only_scoring`.
CPU_ONLY_SCORING_VERB = "prioritize-cpu-only"
#: The GPU entry's ``preemptVerb``: named in every shipped configuration whatever the
#: allocator's preemption setting (off, it answers kube-scheduler's proposal unchanged), so
#: the dev cluster runs it as shipped in both (docs/decisions/0021-preempt-verb.md).
PREEMPT_VERB = "preempt"
#: kube-scheduler's client towards the API server in the dev cluster. ``clientConnection`` is
#: the host's own block (the shipped file says "keep whatever your kube-scheduler uses today"):
#: the dev cluster puts its kubeconfig there and raises upstream's qps 50 / burst 100, so that
#: on loopback the scheduler's DefaultBinder (the no-extender baseline of
#: bench/speed/e2e_throughput.py, CPU-only pods) is not throttled by its own client; the same
#: values in every mode keep the baseline comparable.
SCHEDULER_CLIENT_QPS = 200
SCHEDULER_CLIENT_BURST = 400


@dataclass(frozen=True)
class ExtenderAddress:
    """Where kube-scheduler finds the allocator, and the TLS material to reach it: what the
    dev cluster substitutes in every extender entry of the shipped configuration."""

    #: scheme, host and port (``https://127.0.0.1:<port>``); the shipped path is kept.
    base_url: str
    #: ``tlsConfig`` in place of the shipped files and serverName (restclient.TLSClientConfig
    #: field names: ``caData``, ``certData``, ``keyData``, or the ``*File`` ones).
    tls: dict[str, str]


def tls_data(ca_pem: bytes, client: KeyPair, server_name: str) -> dict[str, str]:
    """``tlsConfig`` carrying our CA (without one kube-scheduler does not verify the extender:
    pkg/scheduler/extender.go makeTransport) and the mTLS client certificate inline."""
    return {
        "serverName": server_name,
        "caData": base64.b64encode(ca_pem).decode(),
        "certData": base64.b64encode(client.cert_pem).decode(),
        "keyData": base64.b64encode(client.key_pem).decode(),
    }


def load_scheduler_configuration(path: Path) -> dict[str, Any]:
    """A shipped KubeSchedulerConfiguration (``path`` relative to the repository)."""
    from devcluster.binaries import repo_root

    full = repo_root() / path
    if not full.is_file():
        raise DevClusterError(f"{full} is missing; the dev cluster runs it as shipped")
    doc = yaml.safe_load(full.read_text())
    if not isinstance(doc, dict) or doc.get("kind") != "KubeSchedulerConfiguration":
        raise DevClusterError(f"{full} is not a KubeSchedulerConfiguration")
    return doc


def localise_scheduler_configuration(
    shipped: dict[str, Any], client_connection: dict[str, Any],
    extender: ExtenderAddress | None,
) -> dict[str, Any]:
    """``shipped`` with only addresses and credentials substituted (pure): the whole
    ``clientConnection`` (the host's own), and in every extender entry the scheme, host and
    port of ``urlPrefix`` and the ``tlsConfig``. ``extender`` None: no extenders at all (a
    plain control plane, the baseline of the speed benchmark)."""
    config = copy.deepcopy(shipped)
    config["clientConnection"] = dict(client_connection)
    if extender is None:
        config.pop("extenders", None)
        return config
    for entry in config.get("extenders") or []:
        path = urllib.parse.urlsplit(entry["urlPrefix"]).path
        entry["urlPrefix"] = extender.base_url.rstrip("/") + path
        entry["tlsConfig"] = dict(extender.tls)
    return config


def with_nodes_to_score(shipped: dict[str, Any], percentage: int) -> dict[str, Any]:
    """``shipped`` with kube-scheduler's ``percentageOfNodesToScore`` set to ``percentage``
    (pure): what a cluster that lowers it runs (docs/deploy.md); 0 is upstream's adaptive
    default. The range is checked where it is asked for (:class:`devcluster.options.Options`)."""
    config = copy.deepcopy(shipped)
    config["percentageOfNodesToScore"] = percentage
    return config


def without_cpu_only_scoring(shipped: dict[str, Any]) -> dict[str, Any]:
    """``shipped`` without its CPU-only scoring entry (pure): what a cluster that turns it off
    runs (docs/deploy.md, "Scoring CPU-only pods")."""
    config = copy.deepcopy(shipped)
    config["extenders"] = [e for e in config.get("extenders") or []
                           if e.get("prioritizeVerb") != CPU_ONLY_SCORING_VERB]
    return config


def scheduler_client_connection(kubeconfig: Path) -> dict[str, Any]:
    return {"kubeconfig": str(kubeconfig), "qps": SCHEDULER_CLIENT_QPS,
            "burst": SCHEDULER_CLIENT_BURST}


def with_managed_resources(shipped: dict[str, Any],
                           resources: Sequence[ManagedResource]) -> dict[str, Any]:
    """``shipped`` with ``resources`` as the ``managedResources`` of the entry that has them
    (pure): the extender entry of another agent profile (charts/tessera ``agentProfile``)."""
    config = copy.deepcopy(shipped)
    for entry in config.get("extenders") or []:
        if entry.get("managedResources"):
            entry["managedResources"] = [
                {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                for r in resources]
    return config


def managed_resources(config: dict[str, Any]) -> set[str]:
    """Every resource an extender entry of ``config`` manages (pure)."""
    return {r["name"] for e in config.get("extenders") or []
            for r in e.get("managedResources") or []}
