"""Node and pod lifecycle without kubelets: KWOK's configuration for the dev cluster (pure).

KWOK (sigs.k8s.io/kwok) watches the nodes it manages and the pods bound to them, and applies
*Stages*: a selector over the object and the status it moves to. The fake GPU nodes keep alive
as a kubelet with node leases does (its defaults, pkg/kubelet/apis/config/v1beta1/defaults.go):
KWOK renews each node's Lease in ``kube-node-lease`` every quarter of its 40 s duration (its
``--node-lease-duration-seconds`` mode), and our node stages report the node's status once it
is handed over, then every 5 minutes (``nodeStatusReportFrequency``) when nothing changes. The
node lifecycle controller counts a renewed Lease as a heartbeat (``pkg/controller/
nodelifecycle``, tryUpdateNodeHealth), so it taints a node only when KWOK stops, as it would a
dead kubelet's. (Before leases the dev cluster rewrote every node's status every 10-12 s, a
load on the API server, etcd and every node watcher that no cluster with kubelets carries:
docs/benchmarks.md, issue 13.) KWOK's lease mode takes up only nodes whose first event it
sees carries the managing annotation (v0.7.0 ``NodeController.watchResources``: a lease is
tried on ADDED, never on MODIFIED), so the harness registers each node in one create with
that annotation (devcluster/nodes.py).
The pod stages make the dev cluster behave like a cluster whose pods run and end:

* a bound pod becomes Running (podIP, conditions, container states), as a kubelet reports it;
  a pod bound for HAMi's device plugin (it carries :data:`HAMI_BIND_PHASE`) only once the
  plugin's Allocate said ``success`` (the stand-in, devcluster/hami_node.py): kubelet starts
  no container before its device plugins' Allocate answers;
* a pod owned by a Job, or any pod annotated with :data:`RUN_FOR_ANNOTATION`, turns Succeeded
  after the annotation's duration (Job pods without it: the cluster's default run time);
* a pod being deleted is removed (a kubelet confirms a graceful deletion the same way).

Stage schema: kwok.x-k8s.io/v1alpha1 ``Stage`` (pkg/apis/v1alpha1/stage_types.go, v0.7.0);
template functions (``Now``, ``NodeIPWith``, ``PodIPWith``, ``Quote``) from
pkg/utils/gotpl/funcs.go and pkg/kwok/controllers; the delay annotation key is the one
KWOK's own "general" pod stages read (kustomize/stage/pod/general/pod-complete.yaml).
"""

from __future__ import annotations

from typing import Any

#: Nodes with this annotation are managed by KWOK (``--manage-nodes-with-annotation-selector``).
MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_VALUE = "fake"
#: A Go duration ("30s", "2m"): the pod runs this long, then Succeeds.
RUN_FOR_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
#: The user KWOK authenticates as (client certificate CN); bound by :func:`rbac_documents`.
USER = "tessera-devcluster:kwok"

_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'
#: Every status report rewrites the conditions KWOK reports (``NodeConditions``: Ready and the
#: pressure conditions), keeping their transition times.
_CONDITIONS = """\
{{ $now := Now }}
{{ $since := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
{{ end }}
"""
#: The node comes up: conditions, its address, and phase Running; the capacity we set stays.
_INITIALIZED = _CONDITIONS + """\
addresses:
- type: InternalIP
  address: {{ NodeIP | Quote }}
phase: Running
"""
_RUNNING = {"key": ".status.phase", "operator": "In", "values": ["Running"]}
#: HAMi's bind phase (allocator/hami/codec.py); volcano-vgpu's key is held the same way.
HAMI_BIND_PHASE = "hami.io/bind-phase"
VOLCANO_BIND_PHASE = "volcano.sh/bind-phase"
_NO_HAMI = [{"key": f'.metadata.annotations["{k}"]', "operator": "DoesNotExist"}
            for k in (HAMI_BIND_PHASE, VOLCANO_BIND_PHASE)]

_READY_STATUS = """\
{{ $now := Now }}
conditions:
- type: Initialized
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""

_SUCCEEDED_STATUS = """\
{{ $now := Now }}
conditions:
- type: Ready
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      reason: Completed
      finishedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
"""


def _stage(name: str, selector: list[dict[str, Any]], next_: dict[str, Any],
           delay: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": selector},
        "next": next_,
    }
    if delay is not None:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
            "spec": spec}


#: A kubelet's ``nodeLeaseDurationSeconds``; KWOK renews the Lease every quarter of it.
LEASE_SECONDS = 40
#: A kubelet's ``nodeStatusReportFrequency``: the status is posted this often when unchanged.
STATUS_REPORT_SECONDS = 300.0


def node_stages(report_seconds: float = STATUS_REPORT_SECONDS) -> list[dict[str, Any]]:
    """Ready once handed to KWOK, then the status reported every ``report_seconds`` (plus up
    to a tenth of it, so that the nodes do not all report at once)."""
    def stage(name: str, selector: list[dict[str, Any]], template: str,
              delay: dict[str, Any] | None = None) -> dict[str, Any]:
        doc = _stage(name, selector, {"statusTemplate": template}, delay)
        doc["spec"]["resourceRef"]["kind"] = "Node"
        return doc

    every = int(report_seconds * 1000)
    return [
        stage("node-initialize", [{"key": _READY, "operator": "NotIn", "values": ["True"]}],
              _INITIALIZED),
        stage("node-status-report",
              [{"key": ".status.phase", "operator": "In", "values": ["Running"]},
               {"key": _READY, "operator": "In", "values": ["True"]}],
              _CONDITIONS,
              {"durationMilliseconds": every, "jitterDurationMilliseconds": every + every // 10}),
    ]


def pod_stages(job_run_seconds: float) -> list[dict[str, Any]]:
    """Running on bind; Succeeded after the run time (Job pods, annotated pods); deleted."""
    run_for = {
        "durationMilliseconds": int(job_run_seconds * 1000),
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{RUN_FOR_ANNOTATION}"]'},
    }
    succeed = {"statusTemplate": _SUCCEEDED_STATUS}
    return [
        _stage("pod-ready", [_NOT_DELETED, {"key": ".status.podIP", "operator": "DoesNotExist"},
                             *_NO_HAMI],
               {"statusTemplate": _READY_STATUS}),
        *(_stage(f"pod-ready-{name}",
                 [_NOT_DELETED, {"key": ".status.podIP", "operator": "DoesNotExist"},
                  {"key": f'.metadata.annotations["{key}"]', "operator": "In",
                   "values": ["success"]}],
                 {"statusTemplate": _READY_STATUS})
          for name, key in (("hami", HAMI_BIND_PHASE), ("volcano-vgpu", VOLCANO_BIND_PHASE))),
        _stage("pod-complete-job",
               [_NOT_DELETED, _RUNNING,
                {"key": ".metadata.ownerReferences.[].kind", "operator": "In",
                 "values": ["Job"]}],
               succeed, run_for),
        _stage("pod-complete-annotated",
               [_NOT_DELETED, _RUNNING,
                {"key": f'.metadata.annotations["{RUN_FOR_ANNOTATION}"]',
                 "operator": "Exists"}],
               succeed, run_for),
        _stage("pod-delete", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
               {"finalizers": {"empty": True}, "delete": True}),
    ]


def rbac_documents(user: str = USER) -> list[dict[str, Any]]:
    """What KWOK writes as the kubelets' stand-in: node status and leases, pod status,
    and the final delete of a terminating pod."""
    rules = [
        {"apiGroups": [""], "resources": ["nodes"],
         "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"],
         "verbs": ["get", "list", "watch", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "list", "watch", "create", "update", "patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
         "verbs": ["create", "patch", "update"]},
    ]
    name = "tessera-devcluster-kwok"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
    ]
