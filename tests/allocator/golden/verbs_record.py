"""Record the extender's replies on seeded random clusters: every verb's bytes as
kube-scheduler reads them, and what each bind wrote on the pod.

The fixture beside this script (``verbs.json``) was recorded from main a282917, before the
node agent became a port (issue 45), and :mod:`test_verbs_golden` holds today's code to it:

    git archive a282917 | tar -x -C /tmp/a282917
    PYTHONPATH=/tmp/a282917:tests/allocator:tests \\
        .venv/bin/python tests/allocator/golden/verbs_record.py > tests/allocator/golden/verbs.json

Only what both versions have is used: the app factory, its WSGI verbs, the in-memory API.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any, Final

from builders import VOCAB, make_gpu_pod, make_node, request, share, whole
from fake_kube import FakeKube

from allocator.hami.codec import HAMI
from allocator.hami.register import RegisteredDevice, encode_register_json
from allocator.picture.requests import BOUND_ACTIVE_PODS, pod_usage
from allocator.service.app import EXTENSION, create_app
from allocator.service.config import Settings
from allocator.verbs.core import AllocatorConfig
from tessera.agent_profiles import AgentProfile
from tessera.dialects import DialectConfig
from tessera.vocabulary import Allocation, ContainerAllocation, PodRequest

NOW: Final = 1_700_000_000.0
#: (profile, seeds): the plain agent's three profiles and HAMi's.
CASES: Final = (("elastic", range(6)), ("nano-gpu", range(3)), ("aliyun", range(3)),
                ("hami", range(4)))
POLICIES: Final = ("binpack", "spread", "fgd", "fgd-cpu", "random", "usage")
PODS_PER_CLUSTER: Final = 14


def _node(rng: random.Random, name: str, profile: str) -> dict[str, Any]:
    count, memory = rng.choice([1, 2, 4, 8]), rng.choice([16000, 40000])
    cards = [{"index": i, "model": "T4", "memoryMiB": memory} for i in range(count)]
    node = make_node(name, count=count, memory_mib=memory, cards_annotation=cards)
    node["status"]["allocatable"]["cpu"] = str(rng.choice([8, 32, 64]))
    node["status"]["allocatable"]["memory"] = "256Gi"
    if profile == "hami":
        node["metadata"]["annotations"][HAMI.register_key] = encode_register_json([
            RegisteredDevice(f"GPU-{name}-{i}", i, rng.choice([2, 4, 10]), memory, 100,
                             "NVIDIA-T4") for i in range(count)])
    return node


def _bound(rng: random.Random, node: str, card: int, memory: int, uid: str) -> dict[str, Any]:
    pct = rng.choice([0, 25, 50])
    container = (ContainerAllocation("main", (card,)) if not pct else ContainerAllocation(
        "main", (card,), core_percent=pct, memory_mib=memory * pct // 100))
    pod = make_gpu_pod(uid, request(share(core=10)), uid=uid, node=node, phase="Running",
                       allocation=Allocation(node, (container,), pod_uid=uid))
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = str(rng.choice([1, 4]))
    return pod


def _request(rng: random.Random, profile: str) -> PodRequest:
    if profile in ("aliyun", "nano-gpu") or rng.random() < 0.6:
        return request(share(core=rng.choice([10, 30, 50]), mem=rng.choice([1000, 4000])))
    if rng.random() < 0.5:
        return request(whole(cards=rng.choice([1, 2, 4])))
    return request(share("a", core=20, mem=2000), share("b", core=40, mem=1000))


def _cluster(rng: random.Random, profile: str) -> tuple[FakeKube, list[str]]:
    fake = FakeKube()
    names = [f"n{i}" for i in range(rng.randint(3, 16))]
    for name in names:
        node = _node(rng, name, profile)
        fake.add_node(node)
        memory = json.loads(node["metadata"]["annotations"][VOCAB.node_cards_annotation]
                            )[0]["memoryMiB"]
        for card in range(len(json.loads(
                node["metadata"]["annotations"][VOCAB.node_cards_annotation]))):
            if rng.random() < 0.6:
                fake.add_pod(_bound(rng, name, card, memory, f"{name}-{card}"))
    return fake, names


def record(profile: str, seed: int) -> list[Any]:
    """Every reply of one cluster's run, in order."""
    rng = random.Random(f"{profile}-{seed}")
    fake, names = _cluster(rng, profile)
    core = AllocatorConfig(dialects=DialectConfig(agent_profile=AgentProfile(profile)),
                           default_policy=rng.choice(POLICIES), seed=seed,
                           filter_best=seed % 3 != 2)
    app = create_app(Settings(core=core, leader_election=False), api=fake, start=False,
                     clock=lambda: NOW)
    state = app.extensions[EXTENSION].state
    state.replace_nodes(fake.list_nodes()[0])
    state.replace_pods(fake.list_pods(VOCAB.gpu_pod_selector)[0])
    state.resources.replace_pods(fake.list_pods_by_field(BOUND_ACTIVE_PODS, pod_usage)[0])
    state.mark_synced()
    client = app.test_client()
    out: list[Any] = []
    for k in range(PODS_PER_CLUSTER):
        pod = make_gpu_pod(f"p{k}", _request(rng, profile), uid=f"u{k}")
        fake.add_pod(pod)
        asked = rng.sample(names, len(names))
        args = {"Pod": pod, "NodeNames": asked}
        filtered = client.post("/scheduler/filter", json=args).get_data(as_text=True)
        scored = client.post("/scheduler/prioritize", json=args).get_data(as_text=True)
        chosen = json.loads(filtered)["NodeNames"]
        bound, written = "", {}
        if chosen:
            bound = client.post("/scheduler/bind", json={
                "PodName": pod["metadata"]["name"], "PodNamespace": "default",
                "PodUID": pod["metadata"]["uid"], "Node": chosen[0]}).get_data(as_text=True)
            meta = fake.pods[("default", pod["metadata"]["name"])]["metadata"]
            written = {"annotations": meta.get("annotations") or {},
                       "labels": meta.get("labels") or {}}
            # HAMi's plugin gives the node's lock back after its Allocate.
            fake.nodes[chosen[0]]["metadata"]["annotations"].pop(HAMI.lock_key, None)
        out.append([filtered, scored, bound, written])
    return out


def main() -> None:
    doc = {f"{profile}-{seed}": record(profile, seed)
           for profile, seeds in CASES for seed in seeds}
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
