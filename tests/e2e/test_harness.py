"""The harness's own pure parts (no processes): the oracle must be able to fail."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from devcluster import DevClusterError, kwok
from devcluster.binaries import repo_root
from devcluster.checks import admission_problems, allocation_problems, fits_now
from devcluster.cluster import scheduler_setup
from devcluster.controlplane import kubeconfig_document
from devcluster.nodes import Card, GpuNodeSpec, Inventory, node_object, uniform
from devcluster.options import Options
from devcluster.pki import ClusterCA
from devcluster.scheduler_config import (
    ExtenderAddress,
    localise_scheduler_configuration,
    scheduler_client_connection,
    tls_data,
    with_nodes_to_score,
)
from devcluster.services import service_account_subject, webhook_configuration
from devcluster.workloads import quantities_as_strings
from kubectl_tessera.report import CardInfo, card_usage, node_cards, overcommitments
from tessera.vocabulary import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    PodRequest,
    Vocabulary,
    encode_allocation,
    encode_request,
)
from webhook.cli import dialects_from_args, parse_args
from webhook.registration import match_conditions

VOCAB = Vocabulary()
MANIFESTS = repo_root() / "manifests" / "scheduler"


def make_node(spec: GpuNodeSpec) -> dict[str, Any]:
    return node_object(spec, VOCAB)


def make_pod(
    name: str,
    containers: list[tuple[str, tuple[int, ...], int, int]],
    node: str | None = "n1",
    phase: str = "Pending",
    init: tuple[str, ...] = (),
) -> dict[str, Any]:
    """containers: (name, card indices, core %, memory MiB); 0/0 = whole cards."""
    allocation = Allocation(
        node="n1",
        containers=tuple(
            ContainerAllocation(c, idx, core, mem, init=c in init)
            for c, idx, core, mem in containers
        ),
        pod_uid=f"uid-{name}",
    )
    spec: dict[str, Any] = {"containers": [{"name": c[0]} for c in containers]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name, "namespace": "ns", "uid": f"uid-{name}",
            "annotations": {VOCAB.allocation_annotation: encode_allocation(allocation)},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


TWO_CARDS = uniform("n1", 2, "Tesla-T4", 16000)


@pytest.mark.parametrize(
    ("pods", "problem"),
    [
        ([make_pod("a", [("c", (0,), 0, 0)]), make_pod("b", [("c", (0,), 10, 100)])],
         "whole card shared"),
        ([make_pod("a", [("c", (1,), 60, 100)]), make_pod("b", [("c", (1,), 50, 100)])],
         "core 110% > 100%"),
        ([make_pod("a", [("c", (0,), 10, 9000)]), make_pod("b", [("c", (0,), 10, 9000)])],
         "memory 18000 > 16000 MiB"),
        ([make_pod("a", [("c", (5,), 10, 10)])], "card 5"),
        # The init container's share counts too, as the allocator reserves it.
        ([make_pod("a", [("init", (0,), 80, 100), ("c", (0,), 30, 100)], init=("init",))],
         "core 110% > 100%"),
    ],
)
def test_the_usage_oracle_reports_every_kind_of_overcommitment(
    pods: list[dict[str, Any]], problem: str
) -> None:
    found = overcommitments(card_usage([make_node(TWO_CARDS)], pods, VOCAB))
    assert any(problem in p for p in found), found


@pytest.mark.parametrize(
    "pods",
    [
        # An init container's share is held beside the others' (the agents never give it
        # back; the allocator reserves both): 40 + 40 + 20 is the whole card, not more.
        [make_pod("a", [("init", (0,), 40, 100), ("c", (0,), 40, 100)], init=("init",)),
         make_pod("b", [("c", (0,), 20, 100)])],
        # An unbound pod's record is a leftover of an interrupted bind; it holds nothing.
        [make_pod("a", [("c", (0,), 0, 0)], node=None), make_pod("b", [("c", (0,), 0, 0)])],
        # A finished pod has given its cards back.
        [make_pod("a", [("c", (0,), 0, 0)], phase="Succeeded"),
         make_pod("b", [("c", (0,), 0, 0)])],
    ],
)
def test_the_usage_oracle_counts_only_what_is_really_held(pods: list[dict[str, Any]]) -> None:
    assert overcommitments(card_usage([make_node(TWO_CARDS)], pods, VOCAB)) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (uniform("n", 2, "Tesla-T4", 15360),
         [CardInfo(0, "Tesla-T4", 15360), CardInfo(1, "Tesla-T4", 15360)]),
        (uniform("n", 2, "NVIDIA-A10", 24576, inventory=Inventory.GFD),
         [CardInfo(0, "NVIDIA-A10", 24576), CardInfo(1, "NVIDIA-A10", 24576)]),
        (GpuNodeSpec("n", (Card("A100", 81920), Card("T4", 15360)), inventory=Inventory.CARDS),
         [CardInfo(0, "A100", 81920), CardInfo(1, "T4", 15360)]),
    ],
)
def test_fake_nodes_describe_their_cards_in_each_inventory_form(
    spec: GpuNodeSpec, expected: list[CardInfo]
) -> None:
    node = make_node(spec)
    assert node_cards(node, VOCAB) == expected
    assert node["status"]["allocatable"][VOCAB.core_resource] == str(100 * len(spec.cards))
    assert node["status"]["capacity"] == node["status"]["allocatable"]


def test_gfd_labels_refuse_to_describe_mixed_cards() -> None:
    with pytest.raises(ValueError, match="identical cards"):
        node_object(GpuNodeSpec("n", (Card("A", 1), Card("B", 2)), inventory=Inventory.GFD),
                    VOCAB)


def _without_addresses(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` minus what the dev cluster may substitute (addresses and credentials)."""
    rest = {k: v for k, v in config.items() if k != "clientConnection"}
    rest["extenders"] = [
        {**{k: v for k, v in e.items() if k not in ("urlPrefix", "tlsConfig")},
         "path": urlsplit(e["urlPrefix"]).path}
        for e in config.get("extenders") or []]
    return rest


@pytest.mark.parametrize("score_cpu_only_pods", [False, True])
def test_the_dev_cluster_runs_the_shipped_scheduler_configuration_with_only_addresses_changed(
    score_cpu_only_pods: bool,
) -> None:
    ca = ClusterCA()
    client = ca.client("scheduler")
    address = ExtenderAddress("https://127.0.0.1:1", tls_data(ca.cert_pem, client, "127.0.0.1"))
    shipped, extender = scheduler_setup(Options(score_cpu_only_pods=score_cpu_only_pods), VOCAB,
                                        address)
    config = localise_scheduler_configuration(
        shipped, scheduler_client_connection(Path("/k.yaml")), extender)
    expected = yaml.safe_load((MANIFESTS / "kube-scheduler-config.yaml").read_text())
    if not score_cpu_only_pods:  # the shipped file minus its second entry, as docs/deploy.md says
        expected["extenders"] = expected["extenders"][:1]
    assert _without_addresses(config) == _without_addresses(expected)
    assert config["clientConnection"] == {"kubeconfig": "/k.yaml", "qps": 200, "burst": 400}
    assert [e.get("prioritizeVerb") for e in config["extenders"]] == (
        [None, "prioritize-cpu-only"] if score_cpu_only_pods else [None])
    for entry in config["extenders"]:
        assert entry["urlPrefix"] == "https://127.0.0.1:1/scheduler"
        tls = entry["tlsConfig"]
        assert set(tls) == {"serverName", "caData", "certData", "keyData"}
        assert base64.b64decode(tls["caData"]) == ca.cert_pem
        assert base64.b64decode(tls["certData"]) == client.cert_pem
        assert tls["serverName"] == "127.0.0.1"


@pytest.mark.parametrize("percentage", [0, 5, 100])
def test_the_dev_cluster_runs_another_share_of_nodes_only_when_told(percentage: int) -> None:
    address = ExtenderAddress("https://127.0.0.1:1", {})
    shipped, _ = scheduler_setup(Options(), VOCAB, address)
    told, _ = scheduler_setup(Options(nodes_to_score=percentage), VOCAB, address)
    assert shipped["percentageOfNodesToScore"] == 100
    assert told["percentageOfNodesToScore"] == percentage
    assert {k: v for k, v in told.items() if k != "percentageOfNodesToScore"} == {
        k: v for k, v in shipped.items() if k != "percentageOfNodesToScore"}


@pytest.mark.parametrize("percentage", [-1, 101])
def test_a_share_of_nodes_kube_scheduler_would_refuse_is_refused(percentage: int) -> None:
    with pytest.raises(DevClusterError, match="0-100"):
        Options(nodes_to_score=percentage)


def test_another_share_of_nodes_leaves_the_shipped_document_as_it_was() -> None:
    shipped = {"kind": "KubeSchedulerConfiguration", "percentageOfNodesToScore": 100}
    assert with_nodes_to_score(shipped, 0)["percentageOfNodesToScore"] == 0
    assert shipped["percentageOfNodesToScore"] == 100


def test_without_an_allocator_the_scheduler_runs_the_shipped_file_without_extenders() -> None:
    shipped, _ = scheduler_setup(Options(), VOCAB, None)
    config = localise_scheduler_configuration(
        shipped, scheduler_client_connection(Path("/k.yaml")), None)
    assert "extenders" not in config
    assert config["percentageOfNodesToScore"] == shipped["percentageOfNodesToScore"]


def test_a_vocabulary_the_shipped_entries_do_not_manage_is_refused() -> None:
    address = ExtenderAddress("https://127.0.0.1:1", {})
    with pytest.raises(DevClusterError, match="manages"):
        scheduler_setup(Options(), Vocabulary(domain="example.org"), address)


def test_the_shipped_webhook_registration_is_pointed_at_loopback_and_keeps_its_rules() -> None:
    shipped = {
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "tessera"},
        "webhooks": [{
            "name": "pods.example", "failurePolicy": "Fail", "rules": [{"operations": ["CREATE"]}],
            "clientConfig": {"service": {"name": "svc", "namespace": "ns", "path": "/mutate"}},
        }],
    }
    (hook,) = webhook_configuration(shipped, "https://127.0.0.1:9443", b"PEM")["webhooks"]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate",
                                    "caBundle": base64.b64encode(b"PEM").decode()}
    assert hook["rules"] == [{"operations": ["CREATE"]}] and hook["failurePolicy"] == "Fail"
    assert "matchConditions" not in hook
    assert "service" in shipped["webhooks"][0]["clientConfig"]  # the input is not modified


def test_the_dev_cluster_registers_the_match_conditions_of_its_webhook_flags() -> None:
    shipped = {"webhooks": [{"name": "pods.example", "matchConditions": [{"name": "old"}]}]}
    conditions = match_conditions(dialects_from_args(parse_args(["--dialects=kai"]), {}))
    (hook,) = webhook_configuration(shipped, "https://127.0.0.1:1", b"PEM", conditions)[
        "webhooks"]
    assert hook["matchConditions"] == conditions
    assert "'gpu-fraction'" in conditions[0]["expression"]
    assert shipped["webhooks"][0]["matchConditions"] == [{"name": "old"}]


@pytest.mark.parametrize(
    ("subjects", "expected"),
    [
        ([[{"kind": "ServiceAccount", "name": "a", "namespace": "ns"}],
          [{"kind": "ServiceAccount", "name": "a", "namespace": "ns"}, {"kind": "User",
                                                                         "name": "u"}]],
         ("ns", "a")),
        ([[{"kind": "ServiceAccount", "name": "a", "namespace": "ns"}],
          [{"kind": "ServiceAccount", "name": "b", "namespace": "ns"}]], None),
        ([[]], None),
    ],
)
def test_the_allocator_identity_is_the_one_service_account_its_rbac_binds(
    subjects: list[list[dict[str, str]]], expected: tuple[str, str] | None
) -> None:
    docs = [{"kind": "RoleBinding", "subjects": s} for s in subjects]
    if expected is None:
        with pytest.raises(DevClusterError, match="exactly one ServiceAccount"):
            service_account_subject(docs)
    else:
        assert service_account_subject(docs) == expected


def test_client_certificates_carry_the_user_as_cn_and_groups_as_o() -> None:
    pair = ClusterCA().client("alice", ("system:masters",))
    subject = x509.load_pem_x509_certificate(pair.cert_pem).subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters"]


def test_a_token_kubeconfig_carries_the_token_and_the_ca() -> None:
    doc = kubeconfig_document("https://127.0.0.1:6443", b"CA", "sa", token="t0k")
    assert doc["users"][0]["user"] == {"token": "t0k"}
    assert doc["clusters"][0]["cluster"]["certificate-authority-data"] == "Q0E="


def test_yaml_number_quantities_become_strings_as_the_api_stores_them() -> None:
    pod = {"spec": {"containers": [{"resources": {"limits": {"aliyun.com/gpu-mem": 5}}}]}}
    assert quantities_as_strings(pod)["spec"]["containers"][0]["resources"]["limits"] == {
        "aliyun.com/gpu-mem": "5"}


def bound_pod(request: PodRequest, allocation: Allocation, annotations: dict[str, str]
              ) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p", "uid": "u1", "labels": {VOCAB.gpu_pod_label: "true"},
            "annotations": {VOCAB.request_annotation: encode_request(request),
                            VOCAB.allocation_annotation: encode_allocation(allocation),
                            "elasticgpu.io/assumed": "true", **annotations},
        },
        "spec": {"nodeName": "n1"},
    }


@pytest.mark.parametrize(
    ("indices", "agent", "problem"),
    [
        ((0, 1), "0,1", None),
        ((0, 1), "0", "agent annotation"),
        ((0,), "0", "wants 2 whole cards"),
        ((0, 7), "0,7", "do not exist"),
    ],
)
def test_allocation_checks_catch_records_that_disagree_with_the_request_or_the_agent_keys(
    indices: tuple[int, ...], agent: str, problem: str | None
) -> None:
    request = PodRequest((ContainerRequest("main", cards=2),))
    allocation = Allocation("n1", (ContainerAllocation("main", indices),), pod_uid="u1")
    pod = bound_pod(request, allocation, {"elasticgpu.io/container-main": agent})
    cards = [CardInfo(0, "T4", 16000), CardInfo(1, "T4", 16000)]
    found = allocation_problems(pod, cards, VOCAB)
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found


@pytest.mark.parametrize(
    ("request_", "fits"),
    [
        (PodRequest((ContainerRequest("c", cards=1),)), False),  # the one card is shared
        (PodRequest((ContainerRequest("c", core_percent=50),)), True),
        (PodRequest((ContainerRequest("c", core_percent=70),)), False),
        (PodRequest((ContainerRequest("c", core_percent=50, memory_mib=9000),)), False),
        (PodRequest((ContainerRequest("c", memory_percent=50),)), True),
        (PodRequest((ContainerRequest("c", core_percent=10),), models=("A100",)), False),
    ],
)
def test_the_fit_oracle_sees_what_is_left_on_each_card(request_: PodRequest, fits: bool) -> None:
    one_card = uniform("n1", 1, "Tesla-T4", 16000)
    usage = card_usage([make_node(one_card)], [make_pod("a", [("c", (0,), 40, 8000)])], VOCAB)
    assert (fits_now(request_, usage) is not None) is fits


@pytest.mark.parametrize(
    ("stored", "problems"),
    [
        ({"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "3k"}, 0),  # canonical form
        ({"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "3000"}, 0),
        ({"elasticgpu.io/gpu-core": "50", "elasticgpu.io/gpu-memory": "2k"}, 1),
        ({"elasticgpu.io/gpu-core": "50"}, 1),
        ({"elasticgpu.io/gpu-core": "fifty", "elasticgpu.io/gpu-memory": "3k"}, 1),
    ],
)
def test_the_admission_oracle_compares_quantities_as_the_api_server_stores_them(
    stored: dict[str, str], problems: int
) -> None:
    request = PodRequest((ContainerRequest("main", core_percent=50, memory_mib=3000),))
    pod = {
        "metadata": {
            "labels": {VOCAB.gpu_pod_label: "true", VOCAB.mode_label: "shared"},
            "annotations": {VOCAB.request_annotation: encode_request(request)},
        },
        "spec": {"containers": [{"name": "main",
                                 "resources": {"limits": stored, "requests": stored}}]},
    }
    assert len(admission_problems(pod, VOCAB)) == problems


def test_a_fake_node_registers_in_one_create_with_its_capacity_and_handed_to_kwok() -> None:
    """KWOK's lease mode takes up only nodes whose first event carries its annotation."""
    node = node_object(uniform("n", 2, "T4", 16384), VOCAB)
    assert node["metadata"]["annotations"][kwok.MANAGED_ANNOTATION] == kwok.MANAGED_VALUE
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    assert node["status"]["allocatable"][VOCAB.core_resource] == "200"


def test_kwok_reports_an_unchanged_node_status_as_rarely_as_a_kubelet() -> None:
    """A kubelet's nodeStatusReportFrequency is 5 minutes (pkg/kubelet/apis/config/v1beta1)."""
    (initialize, report) = kwok.node_stages()
    assert "delay" not in initialize["spec"]
    delay = report["spec"]["delay"]
    assert delay["durationMilliseconds"] == 300_000
    assert delay["durationMilliseconds"] < delay["jitterDurationMilliseconds"]
