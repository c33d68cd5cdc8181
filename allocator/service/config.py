"""Allocator configuration: one frozen value, read from ``TESSERA_*`` environment variables.

``tessera allocator`` maps its flags onto the same variables, so the CLI and a bare WSGI
server's target (``allocator.service.app:create_app()``) read configuration the same way.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from allocator import agents
from allocator.picture.measured import HOSTNAME_LABEL, MeasuredConfig
from allocator.ranking.policies import DEFAULT_POLICY, REGISTRY
from allocator.verbs.core import AllocatorConfig
from tessera.agent_profiles import AGENTS
from tessera.dialects import DialectConfig
from tessera.serving import DIALECT_ENV_HELP, OBJECT_NAME, EnvReader, Listener, ServingConfig
from tessera.vocabulary import ConfigError

#: ExtenderArgs with NodeNames for 5,000 nodes is ~100 KiB plus the pod; 8 MiB is far above
#: anything kube-scheduler sends (even without nodeCacheCapable) and bounds a hostile body.
DEFAULT_MAX_BODY_BYTES: Final = 8 * 1024 * 1024

#: The listener: ``TESSERA_ALLOCATOR_HOST``, ``_PORT``, ``_TLS_*``, ``_THREADS``. TLS is
#: optional (kube-scheduler may call over plain HTTP); 8443 is the default port with a
#: certificate. No ``workers``: always ONE worker process, see allocator/service/cli.py.
LISTENER: Final = Listener("TESSERA_ALLOCATOR", port=8080, tls_port=8443, threads=16,
                           clients="clients (kube-scheduler)")

ENV_VARS: Final = {
    **DIALECT_ENV_HELP,
    "TESSERA_DIALECTS": "request dialects read from pods without the canonical annotation "
    "(as the webhook's)",
    "TESSERA_ALIYUN_MEMORY_UNIT": "unit of aliyun.com/gpu-mem and of the gpushare agent: "
    "GiB (default) or MiB",
    "TESSERA_POLICY": f"cluster default placement policy (default {DEFAULT_POLICY}; "
    f"known: {', '.join(sorted(REGISTRY))})",
    "TESSERA_AGENT_DIALECTS": "removed: the node agent is TESSERA_AGENT_PROFILE (set alike "
    "on the webhook and the allocator); a value here is refused, naming the replacement",
    "TESSERA_SEED": "seed of the random policy (default 0)",
    "TESSERA_NODE_RESOURCES": "'true' (default) to track every node's free CPU and memory "
    "for the placement policies (watches every bound pod); 'false' to watch GPU pods only",
    "TESSERA_FILTER_BEST": "'true' (default): filter answers a GPU pod with the nodes the "
    "policy scores best only (the scheduler config then needs no prioritizeVerb); 'false': "
    "with every node it fits on, for prioritize to rank",
    "TESSERA_PREEMPTION": "'true' (default) to evict GPU pods of lower priority, through the "
    "Eviction API, for a GPU pod refused on every node for want of card room, and to answer "
    "kube-scheduler's preemptVerb with card-level victims; 'false': nobody is evicted, the "
    "preemptVerb answers kube-scheduler's own proposal (docs/preemption.md)",
    "TESSERA_ALLOCATOR_URL_PREFIX": "URL prefix of the extender verbs (default /scheduler)",
    "TESSERA_ALLOCATOR_MAX_BODY_BYTES": "largest request body accepted "
    f"(default {DEFAULT_MAX_BODY_BYTES})",
    "TESSERA_KUBECONFIG": "kubeconfig file (default: in-cluster config, then KUBECONFIG)",
    "TESSERA_LEADER_ELECTION": "'true' (default) to elect a leader through a Lease",
    "TESSERA_LEASE_NAME": "Lease name (default tessera-allocator)",
    "TESSERA_LEASE_NAMESPACE": "Lease namespace (default: POD_NAMESPACE, else tessera-system)",
    "TESSERA_IDENTITY": "this replica's identity in the Lease (default: hostname)",
    "TESSERA_PROMETHEUS_URL": "Prometheus base URL to read dcgm-exporter's GPU figures from "
    "(default: off; docs/metrics.md)",
    "TESSERA_PROMETHEUS_NODE_LABEL": f"label naming the node on dcgm-exporter's series "
    f"(default {HOSTNAME_LABEL})",
    "TESSERA_PROMETHEUS_SELECTOR": "extra PromQL label matchers for those series, e.g. "
    "job=\"dcgm-exporter\" (default none)",
    "TESSERA_PROMETHEUS_INTERVAL_SECONDS": "seconds between two queries (default 15)",
    "TESSERA_PROMETHEUS_STALE_SECONDS": "figures older than this are dropped (default 60)",
    "TESSERA_PROMETHEUS_SETTLE_SECONDS": "bookings younger than this at the sample count on "
    "top of it (default 120)",
    "TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED": "'true' to serve without client certificates "
    "(plain HTTP, or TLS without a client CA): anyone who reaches the port may bind pods",
    **LISTENER.env_help(),
}


@dataclass(frozen=True)
class Settings:
    core: AllocatorConfig = field(default_factory=AllocatorConfig)
    url_prefix: str = "/scheduler"
    serving: ServingConfig = field(default_factory=LISTENER.defaults)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    kubeconfig: str | None = None
    leader_election: bool = True
    lease_name: str = "tessera-allocator"
    lease_namespace: str = "tessera-system"
    identity: str = "tessera-allocator"
    #: Serve without client authentication (an explicit choice; see :meth:`check_serving`).
    allow_unauthenticated: bool = False
    #: Measured GPU figures from Prometheus (off by default; allocator/picture/measured.py).
    measured: MeasuredConfig = field(default_factory=MeasuredConfig)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate; a :class:`ConfigError` names every problem at once."""
        read = EnvReader(os.environ if env is None else env)
        # Read in this order, so that problems are named in it.
        dialects = read.collect(DialectConfig.from_env, DialectConfig())
        policy = _policy(read)
        _check_writer(read, dialects)
        prefix = _url_prefix(read)
        lease_name, lease_ns = _lease(read)
        kubeconfig = _kubeconfig(read)
        serving = _listener(read)
        settings = cls(
            core=AllocatorConfig(
                dialects=dialects,
                default_policy=policy,
                seed=read.integer("TESSERA_SEED", 0, 0, 2**63 - 1),
                node_resources=read.flag("TESSERA_NODE_RESOURCES", True),
                filter_best=read.flag("TESSERA_FILTER_BEST", True),
                preemption=read.flag("TESSERA_PREEMPTION", True),
            ),
            url_prefix=prefix,
            serving=serving,
            max_body_bytes=read.integer("TESSERA_ALLOCATOR_MAX_BODY_BYTES",
                                        DEFAULT_MAX_BODY_BYTES, 1024, 256 * 1024 * 1024),
            kubeconfig=kubeconfig,
            leader_election=read.flag("TESSERA_LEADER_ELECTION", True),
            lease_name=lease_name,
            lease_namespace=lease_ns,
            identity=read.text("TESSERA_IDENTITY") or socket.gethostname(),
            allow_unauthenticated=read.flag("TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED", False),
            measured=_measured(read),
        )
        read.check("invalid allocator configuration")
        return settings

    def check_serving(self) -> None:
        """What serving needs beyond a valid config: client authentication, unless turned off
        explicitly. Whoever can call ``bind`` places pods on cards (docs/security.md)."""
        if not self.serving.tls_client_ca and not self.allow_unauthenticated:
            raise ConfigError(
                "cannot serve the allocator: its extender verbs (bind) need client "
                "authentication: set --tls-cert, --tls-key and --tls-client-ca "
                "(TESSERA_ALLOCATOR_TLS_CERT/_KEY/_CLIENT_CA), or --allow-unauthenticated "
                "(TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED=true) to let anyone who reaches "
                "the port bind pods"
            )


def _policy(read: EnvReader) -> str:
    policy = read.text("TESSERA_POLICY") or DEFAULT_POLICY
    if policy not in REGISTRY:
        read.problem(f"TESSERA_POLICY={policy!r} is not one of {', '.join(sorted(REGISTRY))}")
        policy = DEFAULT_POLICY
    return policy


def _check_writer(read: EnvReader, dialects: DialectConfig) -> None:
    """The agent profile needs a writer of the keys its agent reads in this build."""
    profile = dialects.agent_profile
    if agents.writer(profile) is None:
        read.problem(f"TESSERA_AGENT_PROFILE={profile.value}: this build has no writer of the "
                     f"keys {AGENTS[profile].name} reads (known: "
                     f"{', '.join(p.value for p in agents.WRITERS)})")


def _url_prefix(read: EnvReader) -> str:
    """The verbs' URL prefix: "" or "/a/b"."""
    prefix = "/" + (read.text("TESSERA_ALLOCATOR_URL_PREFIX") or "/scheduler").strip("/")
    if not re.match(r"^/[A-Za-z0-9._~/-]*$", prefix):
        read.problem(f"TESSERA_ALLOCATOR_URL_PREFIX={prefix!r} is not a URL path")
    return "" if prefix == "/" else prefix


def _lease(read: EnvReader) -> tuple[str, str]:
    """(Lease name, Lease namespace)."""
    lease_name = read.text("TESSERA_LEASE_NAME") or "tessera-allocator"
    lease_ns = (read.text("TESSERA_LEASE_NAMESPACE") or read.text("POD_NAMESPACE")
                or "tessera-system")
    for name, value in (("TESSERA_LEASE_NAME", lease_name),
                        ("TESSERA_LEASE_NAMESPACE", lease_ns)):
        if not OBJECT_NAME.match(value):
            read.problem(f"{name}={value!r} is not a valid object name")
    return lease_name, lease_ns


def _measured(read: EnvReader) -> MeasuredConfig:
    url = (read.text("TESSERA_PROMETHEUS_URL") or "").strip()
    if url and not re.match(r"^https?://[^\s/?#]+(/[^\s?#]*)?$", url):
        read.problem(f"TESSERA_PROMETHEUS_URL={url!r} is not an http(s) base URL")
        url = ""
    node_label = read.text("TESSERA_PROMETHEUS_NODE_LABEL") or HOSTNAME_LABEL
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", node_label):
        read.problem(f"TESSERA_PROMETHEUS_NODE_LABEL={node_label!r} is not a label name")
        node_label = HOSTNAME_LABEL
    selector = (read.text("TESSERA_PROMETHEUS_SELECTOR") or "").strip()
    if selector and not re.match(r'^[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*"'
                                 r'(\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*")*$',
                                 selector):
        read.problem(f"TESSERA_PROMETHEUS_SELECTOR={selector!r} is not PromQL label matchers "
                     "(name=\"value\", comma-separated)")
        selector = ""
    interval = read.integer("TESSERA_PROMETHEUS_INTERVAL_SECONDS", 15, 1, 3600)
    return MeasuredConfig(
        url=url, node_label=node_label, selector=selector, interval_seconds=float(interval),
        stale_seconds=float(read.integer("TESSERA_PROMETHEUS_STALE_SECONDS",
                                         max(60, 3 * interval), interval, 86_400)),
        settle_seconds=float(read.integer("TESSERA_PROMETHEUS_SETTLE_SECONDS", 120, 0,
                                          86_400)),
    )


def _kubeconfig(read: EnvReader) -> str | None:
    kubeconfig = read.text("TESSERA_KUBECONFIG")
    if kubeconfig and not os.path.isfile(kubeconfig):
        read.problem(f"TESSERA_KUBECONFIG file {kubeconfig!r} does not exist")
    return kubeconfig


def _listener(read: EnvReader) -> ServingConfig:
    serving = read.listener(LISTENER)
    if bool(serving.tls_cert) != bool(serving.tls_key):
        read.problem("TLS needs both TESSERA_ALLOCATOR_TLS_CERT and _TLS_KEY")
    if serving.tls_client_ca and not serving.tls_cert:
        read.problem("mutual TLS (TESSERA_ALLOCATOR_TLS_CLIENT_CA) needs a serving cert")
    for problem in serving.missing_tls_files():
        read.problem(problem)
    return serving
