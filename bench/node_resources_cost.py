"""What tracking every node's CPU and memory costs the allocator (allocator/picture/resources.py).

In process, synthetic: N nodes and P bound pods as the API server would send them (JSON
text of a realistic Deployment pod: labels, owner reference, two containers, a service
account volume, status with conditions and container statuses; ``managedFields`` included,
as a list returns them). Measured:

- **memory kept**: ``tracemalloc`` around building :class:`NodeResources` from the reduced
  list (allocatable of every node, one compact record per pod) — what stays for the life of
  the process;
- **list traffic, time and peak**: the bytes of the list's JSON pages (500 pods a page, as
  ``allocator/kube/client.py`` asks), the CPU time (``time.process_time``: what the process spent,
  whatever else runs on the machine) to decode, reduce (``pod_usage``) and apply them
  (without ``tracemalloc``, which slows allocation many times), and the peak of
  ``tracemalloc`` while they are — full objects live only for one page;
- **watch events**: bytes of one MODIFIED event and the CPU time to decode and apply one.

Not measured here: the API server's side (it serves the same objects to kube-scheduler's own
pod informer, which watches every pod with a similar field selector).

Usage: ``.venv/bin/python -m bench.node_resources_cost [--nodes 5000] [--pods 150000]``
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from typing import Any

from allocator.picture.resources import NodeResources, PodUsage, pod_usage

PAGE = 500


def node_json(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"node-{i:05d}"},
            "status": {"allocatable": {"cpu": "95500m", "memory": "772346076Ki", "pods": "110",
                                       "ephemeral-storage": "1845753488193"}}}


def pod_json(i: int, nodes: int) -> dict[str, Any]:
    uid = f"{i:08x}-6f1c-4c7e-9a43-{i:012x}"
    name = f"web-7d9f8c6b5d-{i:05x}"
    container = {
        "name": "app", "image": "registry.example/team/app:1.42.0",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"},
                      "limits": {"cpu": "2", "memory": "4Gi"}},
        "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
    sidecar = {**container, "name": "proxy", "image": "registry.example/proxy:2.1",
               "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    return {
        "metadata": {
            "name": name, "generateName": "web-7d9f8c6b5d-", "namespace": f"team-{i % 40}",
            "uid": uid, "resourceVersion": str(1_000_000 + i),
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9f8c6b5d", "tier": "frontend"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": "web-7d9f8c6b5d", "uid": "3c2b9f7e-rs",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update",
                 "apiVersion": "v1", "time": "2026-11-20T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {
                     ".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:tier": {}}},
                     "f:spec": {"f:containers": {'k:{"name":"app"}': {
                         ".": {}, "f:image": {}, "f:name": {}, "f:resources": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-20T10:00:05Z", "fieldsType": "FieldsV1",
                 "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                                           "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
                                           "f:startTime": {}}}}]},
        "spec": {
            "containers": [container, sidecar], "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default",
            "nodeName": f"node-{i % nodes:05d}", "securityContext": {},
            "schedulerName": "default-scheduler", "priority": 0,
            "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {
                "defaultMode": 420, "sources": [{"serviceAccountToken": {
                    "expirationSeconds": 3607, "path": "token"}}]}}]},
        "status": {
            "phase": "Running", "hostIP": "10.0.3.17", "podIP": "10.244.3.99",
            "qosClass": "Burstable", "startTime": "2026-11-20T10:00:01Z",
            "conditions": [{"type": t, "status": "True",
                            "lastTransitionTime": "2026-11-20T10:00:05Z"}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                     "ContainersReady", "PodScheduled")],
            "containerStatuses": [
                {"name": n, "ready": True, "restartCount": 0, "started": True,
                 "image": "registry.example/team/app:1.42.0", "imageID": "sha256:" + "0" * 64,
                 "containerID": "containerd://" + "1" * 64,
                 "state": {"running": {"startedAt": "2026-11-20T10:00:04Z"}}}
                for n in ("app", "proxy")]},
    }


def sync(nodes: int, pages: list[bytes]) -> NodeResources:
    """The allocator's initial sync of node resources over these list pages."""
    resources = NodeResources()
    for i in range(nodes):
        resources.apply_node(f"node-{i:05d}", node_json(i))
    usages: list[PodUsage | None] = []
    for page in pages:  # what KubeClient._list_reduced does, page by page
        usages.extend(map(pod_usage, json.loads(page)["items"]))
    resources.replace_pods(usages)
    return resources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--skip-memory", action="store_true",
                        help="time only (the tracemalloc pass is slow)")
    args = parser.parse_args()
    pages = [json.dumps({"items": [pod_json(i, args.nodes)
                                   for i in range(start, min(start + PAGE, args.pods))]})
             .encode() for start in range(0, args.pods, PAGE)]
    list_bytes = sum(map(len, pages))
    gc.collect()
    t0 = time.process_time()
    resources = sync(args.nodes, pages)
    seconds = time.process_time() - t0
    del resources
    gc.collect()
    list_peak = kept = 0
    if not args.skip_memory:
        tracemalloc.start()
        resources = sync(args.nodes, pages)
        _, list_peak = tracemalloc.get_traced_memory()
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    else:
        resources = sync(args.nodes, pages)

    event = json.dumps({"type": "MODIFIED", "object": pod_json(7, args.nodes)}).encode()
    rounds = 5000
    t1 = time.process_time()
    for _ in range(rounds):
        resources.apply_pod(json.loads(event)["object"])
    per_event_us = (time.process_time() - t1) / rounds * 1e6

    nodes_known, pods_counted = resources.counts()
    print(f"nodes {nodes_known}, pods {pods_counted}")
    print(f"list: {len(pages)} pages, {list_bytes / 2**20:.1f} MiB of JSON "
          f"({list_bytes / args.pods:.0f} B a pod); decoded, reduced and applied in "
          f"{seconds:.1f} CPU s ({seconds / args.pods * 1e6:.0f} us a pod)")
    if kept:
        print(f"memory: peak while listing {list_peak / 2**20:.1f} MiB, kept "
              f"{kept / 2**20:.1f} MiB ({kept / args.pods:.0f} B a pod)")
    print(f"watch: {len(event)} B a MODIFIED event, decoded and applied in "
          f"{per_event_us:.0f} CPU us")


if __name__ == "__main__":
    main()
