"""The Helm chart (charts/tessera) against the Kustomize overlays, with a real ``helm``
(built from Go modules by hack/build-controlplane.sh, found through the harness).

1. For every variant, ``helm template`` renders exactly the objects ``kubectl kustomize``
   renders for the matching overlay, but for what Helm adds by design (its four standard
   labels), how each tool rolls the scheduler on a changed configuration (Kustomize: a hash
   in the ConfigMap's name; Helm: a checksum annotation on the pod template), and the line
   breaks of CEL expressions (Kustomize re-folds ``>-`` scalars whose lines are indented
   deeper, adding a blank line; whitespace means nothing in CEL).
2. ``helm install``'s equivalent passes for every variant: the rendered chart is applied
   with ``--server-side --dry-run=server`` to a real kube-apiserver.
3. Values do what values.yaml says, and a wrong one is refused at render time.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import (
    MANIFESTS,
    NAMESPACE,
    Doc,
    combined_overlay,
    container,
    kustomize,
    one,
    pod_spec,
    run_kubectl,
)

from devcluster.binaries import Binaries, repo_root
from tessera.agent_profiles import AgentProfile, NodeAgent
from tessera.dialects import DialectConfig
from tessera.vocabulary import Vocabulary
from webhook.config import WebhookConfig
from webhook.hami_extras import HamiAdmission
from webhook.registration import match_conditions

pytestmark = pytest.mark.e2e

CHART = repo_root() / "charts" / "tessera"
#: What Helm adds to every object's labels (templates/_helpers.tpl, tessera.labels).
HELM_LABELS = frozenset({"app.kubernetes.io/instance", "app.kubernetes.io/managed-by",
                         "app.kubernetes.io/version", "helm.sh/chart"})
#: Kustomize's configMapGenerator suffix: "-" and ten characters of the content's hash.
HASHED = re.compile(r"^(tessera-scheduler-config)-[a-z0-9]{10}$")


@pytest.fixture(scope="session")
def helm(binaries: Binaries) -> Path:
    return binaries.helm


def helm_template(helm: Path, *values: str, namespace: str = NAMESPACE) -> list[Doc]:
    sets = [f"--set={v}" for v in values]
    result = subprocess.run(
        [str(helm), "template", "tessera", str(CHART), f"--namespace={namespace}", *sets],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "HELM_CACHE_HOME": "/nonexistent-cache",
             "HELM_CONFIG_HOME": "/nonexistent-config", "HELM_DATA_HOME": "/nonexistent-data"},
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if isinstance(d, dict)]


def composed(overlay: str, *components: str) -> Callable[[Path], Path]:
    """An overlay with components added, as docs/deploy.md shows users composing them."""

    def make(tmp: Path) -> Path:
        directory = tmp / "composed"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            # kustomize accepts only relative paths to other kustomizations.
            "resources": [os.path.relpath(MANIFESTS / "overlays" / overlay, directory)],
            "components": [os.path.relpath(MANIFESTS / "components" / c, directory)
                           for c in components],
        }))
        return directory

    return make


def _overlay(name: str) -> Callable[[Path], Path]:
    return lambda _tmp: MANIFESTS / "overlays" / name


#: (variant, chart values, the Kustomize directory it must equal).
VARIANTS: list[tuple[str, tuple[str, ...], Callable[[Path], Path]]] = [
    ("self-signed", (), _overlay("self-signed")),
    ("cert-manager", ("tls.provider=cert-manager",), _overlay("cert-manager")),
    ("second-scheduler", ("secondScheduler.enabled=true",), _overlay("second-scheduler")),
    ("cert-manager+second-scheduler",
     ("tls.provider=cert-manager", "secondScheduler.enabled=true"),
     lambda tmp: combined_overlay(tmp / "combo")),
    ("self-signed+monitoring", ("monitoring.enabled=true",),
     composed("self-signed", "monitoring")),
    ("cert-manager+second-scheduler+monitoring",
     ("tls.provider=cert-manager", "secondScheduler.enabled=true", "monitoring.enabled=true"),
     composed("cert-manager", "second-scheduler", "monitoring")),
    *((f"self-signed+agent-{p}", (f"agentProfile={p}",), composed("self-signed", f"agent-{p}"))
      for p in ("nano-gpu", "aliyun", "hami", "volcano-vgpu")),
    *((f"second-scheduler+agent-{p}", ("secondScheduler.enabled=true", f"agentProfile={p}"),
       composed("self-signed", "second-scheduler", f"agent-{p}", f"agent-{p}/second-scheduler"))
      for p in ("nano-gpu", "hami")),
    ("self-signed+agent-hami-v2.8", ("agentProfile=hami", "hamiAgent=hami-v2.8"),
     composed("self-signed", "agent-hami", "agent-hami-v2.8")),
    ("self-signed+no-preemption", ("allocator.preemption=false",),
     composed("self-signed", "no-preemption")),
    ("self-signed+agent-hami+no-preemption", ("agentProfile=hami", "allocator.preemption=false"),
     composed("self-signed", "agent-hami", "no-preemption")),
]
IDS = [v[0] for v in VARIANTS]


def _cel_whitespace(value: Any) -> Any:
    """Every ``expression`` string with its whitespace collapsed, recursively."""
    if isinstance(value, dict):
        return {k: " ".join(v.split()) if k == "expression" and isinstance(v, str)
                else _cel_whitespace(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cel_whitespace(v) for v in value]
    return value


def normalise(docs: list[Doc]) -> dict[tuple[str, str, str], Doc]:
    """Objects by (kind, namespace, name), with the two tools' by-design differences taken
    out (module docstring); everything else must be equal."""
    out = {}
    for doc in _cel_whitespace(copy.deepcopy(docs)):
        meta = doc["metadata"]
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in HELM_LABELS}
        if labels:
            meta["labels"] = labels
        else:
            meta.pop("labels", None)
        meta["name"] = HASHED.sub(r"\1", meta["name"])
        if doc["kind"] == "Deployment":
            template = doc["spec"]["template"]
            annotations = template["metadata"].get("annotations") or {}
            annotations.pop("checksum/config", None)
            if not annotations:
                template["metadata"].pop("annotations", None)
            for volume in template["spec"].get("volumes") or []:
                if "configMap" in volume:
                    volume["configMap"]["name"] = HASHED.sub(r"\1", volume["configMap"]["name"])
        out[(doc["kind"], meta.get("namespace", ""), meta["name"])] = doc
    return out


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON-like values differ, as paths (for a readable failure)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: chart {a!r} != kustomize {b!r}"]


@pytest.mark.parametrize(("variant", "values", "overlay"), VARIANTS, ids=IDS)
def test_the_chart_renders_the_objects_of_the_matching_overlay(
    helm: Path, kubectl: Path, tmp_path: Path, variant: str, values: tuple[str, ...],
    overlay: Callable[[Path], Path],
) -> None:
    chart = normalise(helm_template(helm, *values))
    kustomized = normalise(kustomize(kubectl, overlay(tmp_path)))
    assert sorted(chart) == sorted(kustomized)
    found = {key: differences(chart[key], expected) for key, expected in kustomized.items()}
    assert {k: v for k, v in found.items() if v} == {}, variant


def test_the_comparison_bites_a_value_that_changes_an_object_shows(
    helm: Path, kubectl: Path
) -> None:
    chart = normalise(helm_template(helm, "webhook.replicas=3"))
    kustomized = normalise(kustomize(kubectl, MANIFESTS / "overlays" / "self-signed"))
    key = ("Deployment", NAMESPACE, "tessera-webhook")
    assert chart[key] != kustomized[key]
    assert {k for k in kustomized if chart[k] != kustomized[k]} == {key}


@pytest.mark.parametrize(("variant", "values", "overlay"), VARIANTS, ids=IDS)
def test_helm_install_equivalent_passes_a_server_side_dry_run(
    prepared: None, helm: Path, kubectl: Path, admin_kubeconfig: Path, variant: str,
    values: tuple[str, ...], overlay: Callable[[Path], Path],
) -> None:
    docs = helm_template(helm, *values)
    result = run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side",
                         "--dry-run=server", "--filename=-",
                         stdin=yaml.safe_dump_all(docs, sort_keys=False))
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(docs), result.stdout
    assert "PodSecurity" not in result.stderr, result.stderr


def test_values_set_the_image_replicas_resources_and_log_levels(helm: Path) -> None:
    docs = helm_template(helm, "image.repository=registry.example/tessera",
                         "image.tag=1.2.3", "allocator.replicas=3",
                         "allocator.resources.limits.memory=4Gi", "webhook.logLevel=DEBUG",
                         "secondScheduler.enabled=true",
                         "secondScheduler.image=registry.k8s.io/kube-scheduler:v1.33.2")
    allocator = one(docs, "Deployment", "tessera-allocator")
    assert allocator["spec"]["replicas"] == 3
    assert container(allocator)["image"] == "registry.example/tessera:1.2.3"
    assert container(allocator)["resources"]["limits"]["memory"] == "4Gi"
    webhook = container(one(docs, "Deployment", "tessera-webhook"))
    assert {"name": "TESSERA_LOG_LEVEL", "value": "DEBUG"} in webhook["env"]
    assert webhook["image"] == "registry.example/tessera:1.2.3"
    assert "--scheduler-name=tessera-scheduler" in webhook["args"]
    scheduler = one(docs, "Deployment", "tessera-scheduler")
    assert container(scheduler)["image"] == "registry.k8s.io/kube-scheduler:v1.33.2"
    for job in ("Job", "CronJob"):
        [found] = [d for d in docs if d["kind"] == job]
        assert container(found)["image"] == "registry.example/tessera:1.2.3"


def test_hamis_webhook_settings_reach_the_webhook_and_read_back_as_its_config(
        helm: Path) -> None:
    docs = helm_template(helm, "agentProfile=hami", "hamiWebhook.gpuCorePolicy=force",
                         "hamiWebhook.runtimeClassName=nvidia", "hamiWebhook.overwriteEnv=true")
    env = {e["name"]: e["value"]
           for e in container(one(docs, "Deployment", "tessera-webhook"))["env"]}
    config = WebhookConfig.from_env({**env, "TESSERA_AGENT_PROFILE": "hami"})
    assert config.mutation.hami == HamiAdmission("force", "nvidia", overwrite_env=True)
    defaults = container(one(helm_template(helm), "Deployment", "tessera-webhook"))["env"]
    assert not [e for e in defaults if e["name"].startswith("TESSERA_HAMI_")]


def test_preemption_is_on_by_default_with_its_permissions_and_false_takes_both_away(
        helm: Path) -> None:
    wanted = {"pods/eviction", "pods/status", "poddisruptionbudgets"}
    for values, on in (((), True), (("allocator.preemption=false",), False)):
        docs = helm_template(helm, "secondScheduler.enabled=true", *values)
        rules = one(docs, "ClusterRole", "tessera-allocator")["rules"]
        granted = {r for rule in rules for r in rule["resources"]}
        assert (wanted <= granted) is on and (wanted & granted == set()) is not on
        args = container(one(docs, "Deployment", "tessera-allocator"))["args"]
        assert ("--preemption=false" in args) is not on
        # The scheduler names the verb either way (off, the proposal comes back unchanged).
        config = yaml.safe_load(one(docs, "ConfigMap", "tessera-scheduler-config")["data"][
            "kube-scheduler-config.yaml"])
        assert config["profiles"] and config["extenders"][0]["preemptVerb"] == "preempt"


def test_a_changed_scheduler_configuration_rolls_the_scheduler(helm: Path) -> None:
    def checksum(*values: str, namespace: str = NAMESPACE) -> Any:
        docs = helm_template(helm, "secondScheduler.enabled=true", *values,
                             namespace=namespace)
        return one(docs, "Deployment", "tessera-scheduler")["spec"]["template"]["metadata"][
            "annotations"]["checksum/config"]

    assert checksum() == checksum("allocator.replicas=3")
    # The configuration names the allocator's Service and the Lease by namespace.
    assert checksum() != checksum(namespace="gpu-system")


def test_the_namespace_can_be_brought_and_a_wrong_provider_is_refused(helm: Path) -> None:
    docs = helm_template(helm, "namespace.create=false")
    assert not [d for d in docs if d["kind"] == "Namespace"]
    result = subprocess.run([str(helm), "template", "tessera", str(CHART),
                             "--set=tls.provider=vault"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode != 0
    assert 'tls.provider must be self-signed or cert-manager, not "vault"' in result.stderr


def test_pod_templates_carry_no_release_labels_so_an_upgrade_keeps_the_selectors(
    helm: Path,
) -> None:
    docs = helm_template(helm)
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job", "CronJob"):
            labels = (doc["spec"].get("template") or doc["spec"]["jobTemplate"]["spec"][
                "template"])["metadata"]["labels"]
            assert not HELM_LABELS & set(labels), doc["metadata"]["name"]
            assert pod_spec(doc)["securityContext"]["runAsNonRoot"] is True


def test_the_dry_run_refuses_a_misspelt_service_monitor_field(
    prepared: None, helm: Path, kubectl: Path, admin_kubeconfig: Path
) -> None:
    """The ServiceMonitor's dry run bites (tests/deploy/crds: a structural schema)."""
    monitor = one(helm_template(helm, "monitoring.enabled=true"), "ServiceMonitor",
                  "tessera-allocator")
    tls = monitor["spec"]["endpoints"][0]["tlsConfig"]
    tls["serverNam"] = tls.pop("serverName")
    result = run_kubectl(kubectl, admin_kubeconfig, "apply", "--server-side",
                         "--dry-run=server", "--filename=-",
                         stdin=yaml.safe_dump(monitor), check=False)
    assert result.returncode != 0
    assert "serverNam" in result.stderr


@pytest.mark.parametrize("profile", list(AgentProfile), ids=str)
def test_the_agent_profile_sets_both_services_the_managed_resources_and_the_conditions(
    helm: Path, profile: AgentProfile,
) -> None:
    docs = helm_template(helm, f"agentProfile={profile.value}", "secondScheduler.enabled=true")
    flag = f"--agent-profile={profile.value}"
    for name in ("tessera-webhook", "tessera-allocator"):
        args = container(one(docs, "Deployment", name))["args"]
        assert (flag in args) is (profile is not AgentProfile.ELASTIC), (name, args)
    config_map = one(docs, "ConfigMap", "tessera-scheduler-config")
    config = yaml.safe_load(config_map["data"]["kube-scheduler-config.yaml"])
    (entry,) = config["extenders"]
    assert entry["managedResources"] == [
        {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
        for r in NodeAgent(profile).managed_resources()]
    hook = one(docs, "MutatingWebhookConfiguration", "tessera")["webhooks"][0]
    assert hook["matchConditions"] == match_conditions(DialectConfig(agent_profile=profile))


@pytest.mark.parametrize(
    ("values", "words"),
    [("agentProfile=gpushare",
      "agentProfile must be elastic, nano-gpu, aliyun, hami or volcano-vgpu"),
     ("agentProfile=volcano-vgpu,hamiAgent=hami-v2.8",
      'hamiAgent must be "" or hami-v2.8 (with agentProfile hami)'),
     ("agentProfile=hami,hamiAgent=hami-v2.7", 'not "hami-v2.7"'),
     ("agentProfile=hami,allocator.hamiAgent=hami-v2.8", "allocator.hamiAgent is now hamiAgent")],
    ids=["unknown-profile", "hami-agent-without-hami", "unknown-hami-agent", "moved-value"],
)
def test_an_unknown_agent_setting_is_refused_at_render_time(
    helm: Path, values: str, words: str,
) -> None:
    result = subprocess.run(
        [str(helm), "template", "tessera", str(CHART), f"--namespace={NAMESPACE}",
         f"--set={values}"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert words in result.stderr


def test_the_hami_agent_reaches_both_services_as_one_flag(helm: Path) -> None:
    docs = helm_template(helm, "agentProfile=hami", "hamiAgent=hami-v2.8")
    for name in ("tessera-webhook", "tessera-allocator"):
        spec = container(one(docs, "Deployment", name))
        assert "--hami-agent=hami-v2.8" in spec["args"], name
        assert "TESSERA_HAMI_AGENT" not in {e["name"] for e in spec.get("env") or []}
    for name in ("tessera-webhook", "tessera-allocator"):
        args = container(one(helm_template(helm, "agentProfile=hami"), "Deployment", name))["args"]
        assert not any(a.startswith("--hami-agent") for a in args)


@pytest.mark.parametrize("profile", [p for p in AgentProfile if p is not AgentProfile.ELASTIC],
                         ids=str)
def test_each_profiles_second_scheduler_file_is_the_shipped_one_with_its_resources(
    profile: AgentProfile,
) -> None:
    from devcluster.scheduler_config import with_managed_resources

    shipped = yaml.safe_load(
        (MANIFESTS / "components" / "second-scheduler" / "kube-scheduler-config.yaml").read_text())
    mine = yaml.safe_load((MANIFESTS / "components" / f"agent-{profile.value}" /
                           "second-scheduler" / "kube-scheduler-config.yaml").read_text())
    assert mine == with_managed_resources(shipped, NodeAgent(profile).managed_resources())


def test_every_shipped_hami_scheduler_configuration_manages_hamis_task_priority(
        helm: Path) -> None:
    """A pod admitted without the webhook keeps ``nvidia.com/priority``, which no node
    advertises: the extender manages it and kube-scheduler's fit ignores it, as HAMi's chart
    does (Project-HAMi/HAMi v2.10.0 charts/hami/templates/_helpers.tpl:202)."""
    from devcluster.cluster import scheduler_setup
    from devcluster.options import Options
    from devcluster.scheduler_config import ExtenderAddress

    wanted = {"name": "nvidia.com/priority", "ignoredByScheduler": True}
    chart = yaml.safe_load(one(helm_template(helm, "agentProfile=hami",
                                             "secondScheduler.enabled=true"),
                               "ConfigMap", "tessera-scheduler-config")["data"][
        "kube-scheduler-config.yaml"])
    kustomize = yaml.safe_load((MANIFESTS / "components" / "agent-hami" / "second-scheduler" /
                                "kube-scheduler-config.yaml").read_text())
    devcluster, _ = scheduler_setup(Options(agent_profile=AgentProfile.HAMI), Vocabulary(),
                                    ExtenderAddress("https://127.0.0.1:1", {}))
    for config in (chart, kustomize, devcluster):
        [entry] = [e for e in config["extenders"] if e.get("managedResources")]
        assert wanted in entry["managedResources"]
    # Elsewhere no agent reads it: the webhook refuses it, so no configuration lists it.
    elastic = yaml.safe_load(one(helm_template(helm, "secondScheduler.enabled=true"),
                                 "ConfigMap", "tessera-scheduler-config")["data"][
        "kube-scheduler-config.yaml"])
    assert wanted not in elastic["extenders"][0]["managedResources"]
