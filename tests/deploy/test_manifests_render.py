"""Every overlay renders with ``kubectl kustomize`` and says what the deployment promises.

The API server's own verdict on the rendered objects is in test_manifests_apiserver.py; here
are the properties it does not check: replicas, hardening, probes, failurePolicy and scope of
the webhook, consistency of Secret names and scheduler names across objects, least privilege.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import (
    MANIFESTS,
    NAMESPACE,
    OVERLAYS,
    Doc,
    combined_overlay,
    container,
    find,
    kustomize,
    one,
    pod_spec,
)

from devcluster.scheduler_config import PREEMPT_VERB
from tessera.dialects import DialectConfig
from webhook.registration import match_conditions

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                  "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}


@pytest.fixture(scope="module")
def rendered(kubectl: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    result = {name: kustomize(kubectl, MANIFESTS / "overlays" / name) for name in OVERLAYS}
    combo = combined_overlay(tmp_path_factory.mktemp("combo") / "cert-manager-second-scheduler")
    result["cert-manager+second-scheduler"] = kustomize(kubectl, combo)
    return result


ALL = [*OVERLAYS, "cert-manager+second-scheduler"]


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] in ("Deployment", "Job", "CronJob")]


@pytest.mark.parametrize("overlay", ALL)
def test_every_namespaced_object_lands_in_our_namespace(rendered: dict[str, list[Doc]],
                                                        overlay: str) -> None:
    for doc in rendered[overlay]:
        where = doc["metadata"].get("namespace")
        if doc["kind"] in CLUSTER_SCOPED:
            assert where is None, doc["metadata"]["name"]
        elif doc["metadata"]["name"].endswith("extension-apiserver-authentication-reader"):
            assert where == "kube-system"  # that Role lives there (upstream)
        else:
            assert where == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"


@pytest.mark.parametrize("overlay", ALL)
def test_the_webhook_sees_only_pod_creates_outside_system_namespaces(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    (hook,) = one(rendered[overlay], "MutatingWebhookConfiguration", "tessera")["webhooks"]
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""],
                              "apiVersions": ["v1"], "resources": ["pods"],
                              "scope": "Namespaced"}]
    assert hook["namespaceSelector"]["matchExpressions"] == [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["kube-system", NAMESPACE]}]
    assert hook["failurePolicy"] == "Fail"
    assert 1 <= hook["timeoutSeconds"] < 10
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["clientConfig"]["service"] == {"name": "tessera-webhook",
                                               "namespace": NAMESPACE, "path": "/mutate",
                                               "port": 443}
    # Never shipped: re-applying must not wipe what the Job or cainjector filled in.
    assert "caBundle" not in hook["clientConfig"]
    # Generated from the default dialects (webhook/registration.py), in every overlay.
    assert hook["matchConditions"] == match_conditions(DialectConfig())


@pytest.mark.parametrize("overlay", ALL)
@pytest.mark.parametrize("name", ["tessera-webhook", "tessera-allocator"])
def test_both_services_run_two_hardened_replicas_with_probes_and_limits(
    rendered: dict[str, list[Doc]], overlay: str, name: str
) -> None:
    deployment = one(rendered[overlay], "Deployment", name)
    assert deployment["spec"]["replicas"] == 2
    spec = pod_spec(deployment)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    main = container(deployment)
    assert main["image"] == "tessera:0.1.0"
    assert main["securityContext"] == {"allowPrivilegeEscalation": False,
                                       "readOnlyRootFilesystem": True,
                                       "capabilities": {"drop": ["ALL"]}}
    assert main["resources"]["requests"].keys() >= {"cpu", "memory"}
    assert "memory" in main["resources"]["limits"]
    assert main["readinessProbe"] and main["livenessProbe"]
    mounts = {m["mountPath"] for m in main["volumeMounts"]}
    assert {"/etc/tessera/tls", "/tmp"} <= mounts


@pytest.mark.parametrize("overlay", ALL)
def test_every_overlay_serves_the_extender_to_client_certificates_of_our_ca_only(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    deployment = one(rendered[overlay], "Deployment", "tessera-allocator")
    main = container(deployment)
    args = main["args"]
    assert "--tls-client-ca=/etc/tessera/tls/ca.crt" in args
    assert "--allow-unauthenticated" not in args
    assert not any(e["name"] == "TESSERA_ALLOCATOR_ALLOW_UNAUTHENTICATED"
                   for e in main.get("env") or [])
    # The probes present the scheduler's client certificate (an HTTPS probe has none).
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    assert volumes["probe-tls"]["secret"]["secretName"] == "tessera-scheduler-client-tls"
    for probe in (main["readinessProbe"], main["livenessProbe"]):
        assert "/etc/tessera/probe-tls/tls.crt" in probe["exec"]["command"][2]


@pytest.mark.parametrize("overlay", ALL)
def test_the_webhook_has_a_disruption_budget_and_the_allocator_none(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    docs = rendered[overlay]
    budget = one(docs, "PodDisruptionBudget", "tessera-webhook")
    labels = pod_spec_labels(one(docs, "Deployment", "tessera-webhook"))
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["minAvailable"] == 1
    # Only the allocator leader is Ready: a budget would block every drain (allocator.yaml).
    assert find(docs, "PodDisruptionBudget", "tessera-allocator") == []
    assert one(docs, "Deployment", "tessera-allocator")["spec"]["strategy"] == {
        "type": "Recreate"}


def pod_spec_labels(workload: Doc) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def secrets_provided(docs: list[Doc]) -> set[str]:
    """Secrets the overlay creates: by the certs Job's flags or by Certificates."""
    names = {d["spec"]["secretName"] for d in find(docs, "Certificate")}
    for job in find(docs, "Job"):
        for arg in container(job).get("args", []):
            if arg.startswith(("--server=", "--client=")):
                names.add(arg.split("=", 2)[1])
            if arg.startswith("--ca-secret="):
                names.add(arg.split("=", 1)[1])
    return names


@pytest.mark.parametrize("overlay", ALL)
def test_every_secret_a_pod_mounts_is_created_by_the_overlay(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    docs = rendered[overlay]
    provided = secrets_provided(docs)
    for workload in workloads(docs):
        for volume in pod_spec(workload).get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in provided, (
                    f"{workload['metadata']['name']} mounts {volume['secret']['secretName']}")


def test_the_cert_manager_overlay_injects_the_ca_of_the_webhook_certificate(
    rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered["cert-manager"]
    mwc = one(docs, "MutatingWebhookConfiguration", "tessera")
    source = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    namespace, name = source.split("/")
    cert = one(docs, "Certificate", name)
    assert namespace == cert["metadata"]["namespace"] == NAMESPACE
    assert cert["spec"]["secretName"] == "tessera-webhook-tls"
    assert "tessera-webhook.tessera-system.svc" in cert["spec"]["dnsNames"]
    # The chain: self-signed Issuer -> CA Certificate -> CA Issuer -> leaves.
    ca = one(docs, "Certificate", "tessera-ca")
    assert ca["spec"]["isCA"] is True
    assert one(docs, "Issuer", ca["spec"]["issuerRef"]["name"])["spec"] == {"selfSigned": {}}
    ca_issuer = one(docs, "Issuer", cert["spec"]["issuerRef"]["name"])
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}


def test_the_self_signed_job_and_its_renewal_cronjob_run_the_same_command(
    rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered["self-signed"]
    job = container(one(docs, "Job", "tessera-certs"))
    cron = container(one(docs, "CronJob", "tessera-certs-renew"))
    assert job["args"] == cron["args"]
    assert job["args"][:2] == ["certs", "secret"]


@pytest.mark.parametrize("overlay", ["second-scheduler", "cert-manager+second-scheduler"])
def test_the_second_scheduler_is_the_one_the_webhook_names(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    docs = rendered[overlay]
    webhook_args = container(one(docs, "Deployment", "tessera-webhook"))["args"]
    assert "--scheduler-name=tessera-scheduler" in webhook_args
    scheduler = one(docs, "Deployment", "tessera-scheduler")
    assert scheduler["spec"]["replicas"] == 2
    main = container(scheduler)
    assert main["image"] == "registry.k8s.io/kube-scheduler:v1.34.4"
    (config_volume,) = [v for v in pod_spec(scheduler)["volumes"] if "configMap" in v]
    config_map = one(docs, "ConfigMap", config_volume["configMap"]["name"])
    config = yaml.safe_load(config_map["data"]["kube-scheduler-config.yaml"])
    assert [p["schedulerName"] for p in config["profiles"]] == ["tessera-scheduler"]
    assert config["leaderElection"]["resourceName"] == "tessera-scheduler"
    lease_role = one(docs, "Role", "tessera-scheduler-lease")
    assert lease_role["rules"][0]["resourceNames"] == ["tessera-scheduler"]
    bound = {b["roleRef"]["name"] for b in find(docs, "ClusterRoleBinding")
             if any(s["name"] == "tessera-scheduler" for s in b["subjects"])}
    assert bound == {"system:kube-scheduler", "system:volume-scheduler"}
    # Mutual TLS: the allocator demands a client certificate of our CA.
    allocator_args = container(one(docs, "Deployment", "tessera-allocator"))["args"]
    assert "--tls-client-ca=/etc/tessera/tls/ca.crt" in allocator_args


def _comparable(entry: dict[str, Any]) -> dict[str, Any]:
    """An extender entry with its TLS files reduced to their names (the paths differ)."""
    entry = {**entry, "tlsConfig": dict(entry["tlsConfig"])}
    for key in ("caFile", "certFile", "keyFile"):
        entry["tlsConfig"][key] = Path(entry["tlsConfig"][key]).name
    return entry


def _seconds(duration: str) -> float:
    """A metav1.Duration as the shipped files write it ("1s", "10s")."""
    assert re.fullmatch(r"\d+s", duration), duration
    return float(duration[:-1])


def _shipped_configurations() -> tuple[dict[str, Any], dict[str, Any]]:
    snippet = yaml.safe_load((MANIFESTS / "scheduler" / "kube-scheduler-config.yaml").read_text())
    second = yaml.safe_load(
        (MANIFESTS / "components" / "second-scheduler" / "kube-scheduler-config.yaml").read_text())
    return snippet, second


def test_both_shipped_scheduler_configurations_place_gpu_pods_through_the_same_entry() -> None:
    snippet, second = _shipped_configurations()
    # The second scheduler only ever sees GPU pods: the GPU entry alone.
    (gpu_entry,) = second["extenders"]
    assert _comparable(snippet["extenders"][0]) == _comparable(gpu_entry)
    for config in (snippet, second):
        assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
        assert config["percentageOfNodesToScore"] == 100
        entry = config["extenders"][0]
        assert (entry["filterVerb"], entry["bindVerb"]) == ("filter", "bind")
        assert entry["preemptVerb"] == PREEMPT_VERB  # on or off: docs/preemption.md
        # Filter answers with the best nodes only (the allocator's --filter-best default):
        # nothing left to score, so no prioritize and no weight.
        assert not {"prioritizeVerb", "weight"} & set(entry)
        assert entry["nodeCacheCapable"] is True
        assert entry["ignorable"] is False  # GPU pods wait for the allocator
        assert entry["enableHTTPS"] is True
        assert entry["tlsConfig"]["caFile"]  # else the scheduler does not verify us
        assert {r["name"] for r in entry["managedResources"]} == {
            "elasticgpu.io/gpu-core", "elasticgpu.io/gpu-memory"}
        assert all(r["ignoredByScheduler"] is True for r in entry["managedResources"])


def test_the_shipped_snippet_scores_cpu_only_pods_through_an_ignorable_quick_entry() -> None:
    snippet, _ = _shipped_configurations()
    gpu_entry, cpu_entry = snippet["extenders"]
    # Prioritize only, for every pod (no managedResources), never in the way of a pod.
    assert cpu_entry["prioritizeVerb"] == "prioritize-cpu-only"
    assert not {"filterVerb", "bindVerb", "preemptVerb", "managedResources"} & set(cpu_entry)
    assert cpu_entry["ignorable"] is True and cpu_entry["nodeCacheCapable"] is True
    assert cpu_entry["weight"] == 10
    # Every pod of the cluster waits for it: a short timeout, well under the GPU entry's.
    assert 0 < _seconds(cpu_entry["httpTimeout"]) <= 2 < _seconds(gpu_entry["httpTimeout"])
    # The same allocator, reached the same way.
    for key in ("urlPrefix", "enableHTTPS", "tlsConfig"):
        assert cpu_entry[key] == gpu_entry[key]


@pytest.mark.parametrize("overlay", ALL)
def test_no_role_we_ship_uses_wildcards(rendered: dict[str, list[Doc]], overlay: str) -> None:
    for role in find(rendered[overlay], "Role") + find(rendered[overlay], "ClusterRole"):
        for rule in role["rules"]:
            for key in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(key, []), f"{role['metadata']['name']}: {rule}"


@pytest.mark.parametrize("overlay", ALL)
def test_the_webhook_has_no_api_access_at_all(rendered: dict[str, list[Doc]], overlay: str
                                              ) -> None:
    docs = rendered[overlay]
    account = one(docs, "ServiceAccount", "tessera-webhook")
    assert account["automountServiceAccountToken"] is False
    assert pod_spec(one(docs, "Deployment", "tessera-webhook"))[
        "automountServiceAccountToken"] is False
    for binding in find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding"):
        assert all(s["name"] != "tessera-webhook" for s in binding["subjects"])


def test_the_certs_job_may_touch_exactly_the_secrets_and_webhook_it_maintains(
    rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered["self-signed"]
    role = one(docs, "Role", "tessera-certs")
    named = next(r for r in role["rules"] if r.get("resourceNames"))
    assert set(named["resourceNames"]) == secrets_provided(docs)
    assert set(named["verbs"]) == {"get", "update"}
    assert [r["verbs"] for r in role["rules"] if not r.get("resourceNames")] == [["create"]]
    (rule,) = one(docs, "ClusterRole", "tessera-certs")["rules"]
    assert rule["resourceNames"] == ["tessera"]
    assert set(rule["verbs"]) == {"get", "patch"}


def test_the_pod_keys_policy_names_every_key_the_code_writes_and_the_allocators_identity(
) -> None:
    from allocator import agents
    from tessera.vocabulary import Vocabulary

    text = (MANIFESTS / "base" / "pod-keys-policy.yaml").read_text()
    v = Vocabulary()
    prefix, assumed = agents.elastic_keys(v)
    keys = [v.request_annotation, v.allocation_annotation, v.gpu_pod_label, v.mode_label,
            prefix, assumed, agents.NANO_CONTAINER.format(""), agents.NANO_ASSUME,
            *(k.rsplit("_", 1)[0] + "_" for k in (agents.ALIYUN_IDX, agents.ALIYUN_DEV,
                                                 agents.ALIYUN_POD, agents.ALIYUN_ASSIGNED))]
    assert [k for k in keys if f"'{k}" not in text] == []
    # A shaped pod of every agent profile may carry the request keys its webhook wrote.
    from tessera.agent_profiles import shape_markers
    policy = next(d for d in yaml.safe_load_all(text) if d)
    (listed,) = [var["expression"] for var in policy["spec"]["variables"]
                 if var["name"] == "gpuResources"]
    assert yaml.safe_load(listed) == list(shape_markers(v))
    rbac = list(yaml.safe_load_all((MANIFESTS / "base" / "allocator-rbac.yaml").read_text()))
    (namespace, account), = {(s["namespace"], s["name"]) for d in rbac if d
                             for s in d.get("subjects") or [] if s["kind"] == "ServiceAccount"}
    assert f"'system:serviceaccount:{namespace}:{account}'" in text
