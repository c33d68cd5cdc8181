"""Where the plugin's objects come from: the API server, with the user's kubeconfig.

Nodes and the GPU pods are read directly (the label the allocator's own pod watch selects by),
so the plugin needs no access to the allocator's Service, only ``list`` on nodes and pods and
``get`` on the pod a ``why`` names; for preemption's word, ``why`` also lists the
PodDisruptionBudgets and the pod's Events (each optional: refused, it says so and goes on).
The transport is the allocator's adapter (:class:`allocator.kube.client.KubeClient`), so
``kubernetes`` is still imported in one place and every API failure arrives as an
:class:`allocator.errors.ApiError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from allocator.ports import Obj
from tessera.vocabulary import Vocabulary


class Reader(Protocol):
    """The reads the plugin makes (``allocator.ports.KubeApi`` satisfies it)."""

    def list_nodes(self) -> tuple[list[Obj], str]: ...

    def list_pods(self, label_selector: str) -> tuple[list[Obj], str]: ...

    def get_pod(self, namespace: str, name: str) -> Obj: ...

    def list_pod_disruption_budgets(self) -> list[Obj]: ...

    def list_pod_events(self, namespace: str, uid: str) -> list[Obj]: ...


@dataclass(frozen=True)
class Objects:
    nodes: list[Obj]
    pods: list[Obj]


def _dicts(items: list[Obj]) -> list[Obj]:
    # A list item that is not an object is not a Node or Pod: skipped, never a traceback.
    return [i for i in items if isinstance(i, dict)]


def read_cluster(api: Reader, vocabulary: Vocabulary) -> Objects:
    nodes, _ = api.list_nodes()
    pods, _ = api.list_pods(vocabulary.gpu_pod_selector)
    return Objects(_dicts(nodes), _dicts(pods))


def read_with_pod(api: Reader, vocabulary: Vocabulary, namespace: str,
                  name: str) -> tuple[Objects, Obj]:
    """The cluster and the named pod (:class:`allocator.errors.NotFound` when it does not
    exist). The pod is read on its own too: a pod admitted without the webhook has no GPU-pod
    label until it is bound."""
    pod = api.get_pod(namespace, name)
    objects = read_cluster(api, vocabulary)
    uid = (pod.get("metadata") or {}).get("uid")
    pods = [p for p in objects.pods if (p.get("metadata") or {}).get("uid") != uid]
    return Objects(objects.nodes, [*pods, pod]), pod
