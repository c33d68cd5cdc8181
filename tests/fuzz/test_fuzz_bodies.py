"""Fuzz both services through their app factories with hostile bodies (issue 9).

Bodies are drawn by hypothesis: raw bytes, arbitrary JSON, and — most of them — reviews and
extender arguments shaped like the real thing with hostile values in the places Tessera reads
(dialect keys, Genius labels, our annotations, metadata of the wrong type, deep nesting, huge
numbers, Unicode digits). Every reply must honour its contract:

- webhook: a 200 AdmissionReview echoing apiVersion, kind and request.uid, with a decodable
  JSON Patch when it patches and our own reason (code 422) when it refuses; or a 400/413
  ``{code, message}``. A pod it patched, admitted again, needs no patch (mutation is
  idempotent).
- allocator: 200 with the verb's reply shape (filter and bind: ``Error``; prioritize: scores
  0-10 for names that were sent), or a 413 ``{code, message}``.

Nowhere a status >= 500, an "internal error", or an ERROR log record (the app-wide handlers
and the verbs log bugs at ERROR).

Seeded and sized by environment: ``TESSERA_FUZZ_EXAMPLES`` per test (default 500; the test
command runs 4 such tests and a bind test with a quarter as many) and ``TESSERA_FUZZ_SEED``
(default 9). The long run documented in
docs/security.md: ``TESSERA_FUZZ_EXAMPLES=25000 .venv/bin/pytest -q tests/fuzz``.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from tessera.dialects import GENIUS_LABELS, KAI_ANNOTATIONS, Dialect, DialectConfig
from tessera.vocabulary import Vocabulary
from webhook.app import create_app as create_webhook
from webhook.config import WebhookConfig
from webhook.mutation import MutationConfig

EXAMPLES = int(os.environ.get("TESSERA_FUZZ_EXAMPLES", "500"))
SEED = int(os.environ.get("TESSERA_FUZZ_SEED", "9"))
VOCAB = Vocabulary()
#: Small cap, so that some drawn bodies exceed it.
MAX_BODY = 64 * 1024

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a shared 2-core machine; time is not the property under test
    database=None,  # no example database: the seed alone decides the run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)

# ----------------------------------------------------------------------------- strategies

ALL_DIALECTS = DialectConfig.from_env({"TESSERA_DIALECTS": ",".join(Dialect)})
RESOURCE_KEYS = [*sorted(ALL_DIALECTS.resource_keys), "cpu", "memory"]
ANNOTATION_KEYS = [VOCAB.request_annotation, VOCAB.allocation_annotation,
                   VOCAB.model_annotation, VOCAB.policy_annotation, *KAI_ANNOTATIONS,
                   "other/x"]
LABEL_KEYS = [*GENIUS_LABELS, VOCAB.gpu_pod_label, VOCAB.mode_label, "app"]

hostile_text = st.sampled_from([
    "", " ", "0", "1", "25", "0.25", "0.5", "1.5", "2", "99", "100", "150", "200", "-1",
    "1e3", "1e400", "1e-400", "NaN", "Infinity", "9" * 400, "²", "\u0661", "\U0001d7d9",
    "2Gi", "100m", "5GB", "0x10", "1_000", "\x00", "[" * 3000, "{" * 100, "a" * 300,
    "T4|A100", "binpack", "no-such-policy", "BinPack", "\u202e",
])
#: The records our codecs read, valid and hostile.
record_text = st.one_of(
    st.sampled_from([
        '{"v":1,"containers":[{"name":"main","corePercent":25,"memoryPercent":25}]}',
        '{"v":1,"containers":[{"name":"main","cards":1}]}',
        '{"v":1,"containers":[{"name":"main","cards":1000000000}]}',
        '{"v":1,"containers":[{"name":"main","corePercent":25,"memoryMiB":'
        + "9" * 400 + "}]}",
        '{"v":1,"node":"n1","at":' + "9" * 400 + ',"containers":[{"name":"main","cards":[0]}]}',
        '{"v":1,"node":"n1","at":1e999,"containers":[{"name":"main","cards":[0]}]}',
        '{"v":1,"node":"n1","containers":[{"name":"main","cards":[99999999999]}]}',
        '{"v":2}', "null", "[]", '"x"',
    ]),
    hostile_text,
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**300),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), hostile_text,
)
any_json = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8,
)


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each ``weight`` times as likely (``one_of`` folds repeated
    strategies into one, so repeating a strategy does not weigh it)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(table).flatmap(lambda strategy: strategy)


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually ``valid`` (what the API server sends), one time in twenty anything at all: a
    body gets past the first checks often enough to reach the code behind them."""
    return weighted((19, valid), (1, any_json))


quantity = st.one_of(st.sampled_from(["10", "25", "50", "100", "200", "0.25", "1024"]),
                     st.integers(-5, 300).map(str), hostile_text, any_json)
resources = st.fixed_dictionaries(
    {"limits": mostly(st.dictionaries(st.sampled_from(RESOURCE_KEYS), quantity, min_size=1,
                                      max_size=4))},
    optional={"requests": mostly(st.dictionaries(st.sampled_from(RESOURCE_KEYS), quantity,
                                                 max_size=3))},
)
container = st.fixed_dictionaries(
    {"name": mostly(st.sampled_from(["main", "side", "init"])), "resources": mostly(resources)},
    optional={"image": st.just("busybox")},
)
string_map = st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=2)
metadata = st.fixed_dictionaries(
    {"name": mostly(st.sampled_from(["p", "q"])),
     "uid": mostly(st.sampled_from(["u-1", "u-2", "uid-holder"]))},
    optional={
        "namespace": mostly(st.just("default")),
        "labels": mostly(st.one_of(
            st.dictionaries(st.sampled_from(LABEL_KEYS), hostile_text, max_size=3),
            string_map)),
        "annotations": mostly(st.dictionaries(st.sampled_from(ANNOTATION_KEYS), record_text,
                                              max_size=3)),
    },
)
pod = st.fixed_dictionaries(
    {"metadata": mostly(metadata),
     "spec": mostly(st.fixed_dictionaries(
         {"containers": mostly(st.lists(container, min_size=1, max_size=3))},
         optional={"initContainers": mostly(st.lists(container, max_size=2)),
                   "nodeName": mostly(st.sampled_from(["", "n1"]))}))},
    optional={
        "apiVersion": st.just("v1"),
        "kind": st.just("Pod"),
        "status": mostly(st.fixed_dictionaries({}, optional={
            "phase": st.sampled_from(["Pending", "Running", "Succeeded"])})),
    },
)
#: Requests a user may write, one per dialect shape: most admitted pods are patched, and a
#: patched pod is what the idempotence check needs.
VALID_LIMITS = [
    {"elasticgpu.io/gpu": "0.25"}, {"elasticgpu.io/gpu": "2"},
    {"elasticgpu.io/gpu-percent": "30"}, {"nano-gpu/gpu-percent": "50"},
    {"elasticgpu.io/gpu-core": "25", "elasticgpu.io/gpu-memory": "1024"},
    {"elasticgpu.io/gpu-core": "200"}, {"elasticgpu.com/gpu-memory": "2048"},
    {"nano-gpu.io/gpu-core": "20", "nano-gpu.io/gpu-memory": "1"},
    {"aliyun.com/gpu-mem": "3"},
    {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20", "nvidia.com/gpumem-percentage": "50"},
    {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"},
    {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "50",
     "volcano.sh/vgpu-memory-percentage": "30"},
    {"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "30"},
    {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "30"},
]
gpu_container = st.fixed_dictionaries({
    "name": st.sampled_from(["main", "side"]),
    "resources": st.fixed_dictionaries({"limits": st.sampled_from(VALID_LIMITS)},
                                       optional={"requests": st.sampled_from(VALID_LIMITS)}),
})
gpu_pod = st.fixed_dictionaries({
    "metadata": metadata,
    "spec": st.fixed_dictionaries({"containers": st.lists(
        gpu_container, min_size=1, max_size=2, unique_by=lambda c: c["name"])}),
})


def nested(depth: int) -> Any:
    return json.loads("[" * depth + "]" * depth)


review = st.fixed_dictionaries({
    "apiVersion": mostly(st.just("admission.k8s.io/v1")),
    "kind": mostly(st.just("AdmissionReview")),
    "request": mostly(st.fixed_dictionaries({
        "uid": mostly(st.sampled_from(["r-1", "r-2"])),
        "kind": mostly(st.fixed_dictionaries({
            "group": st.just(""), "version": st.just("v1"),
            "kind": weighted((9, st.just("Pod")), (1, st.just("Deployment")))})),
        "operation": mostly(weighted((8, st.just("CREATE")), (1, st.just("UPDATE")),
                                     (1, st.just("DELETE")))),
        "namespace": st.just("default"),
        "object": weighted((5, gpu_pod), (4, pod), (1, any_json)),
    }, optional={"dryRun": st.booleans(), "subResource": st.sampled_from(["", "status"]),
                 "deep": st.integers(1, 200).map(nested)})),
})
extender_args = st.fixed_dictionaries({
    "Pod": weighted((5, gpu_pod), (4, pod), (1, any_json)),
    "NodeNames": mostly(st.lists(st.sampled_from(["n1", "n2", "ghost"]), min_size=1, max_size=3,
                                 unique=True)),
}, optional={"Nodes": mostly(st.one_of(st.none(), st.fixed_dictionaries(
    {"items": st.lists(st.fixed_dictionaries({"metadata": mostly(metadata)}), max_size=3)})))})
binding_args = st.fixed_dictionaries({}, optional={
    "PodName": mostly(st.sampled_from(["p", "q", "holder"])),
    "PodNamespace": mostly(st.just("default")),
    "PodUID": mostly(st.sampled_from(["u-1", "uid-holder", ""])),
    "Node": mostly(st.sampled_from(["n1", "n2", "ghost"])),
})


def encoded(documents: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """JSON text of a document, sometimes cut short or padded past the body cap; now and
    then raw bytes."""
    def dump(doc: Any) -> bytes:
        try:
            return json.dumps(doc).encode()
        except (ValueError, OverflowError):  # ints json.dumps refuses to print
            return b"{}"

    text = documents.map(dump)
    return weighted(
        (1, st.binary(max_size=64)),
        (1, st.just(b"[" * 50_000)),  # under the cap: json.loads recurses into it
        (1, text.map(lambda b: b + b" " * MAX_BODY)),  # over the cap
        (1, st.tuples(text, st.integers(1, 64)).map(lambda t: t[0][: -t[1]])),  # cut short
        (16, text),
    )


# ----------------------------------------------------------------------------- harness


class Errors(logging.Handler):
    """ERROR records of the services' loggers (bugs are logged there)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def errors() -> Iterator[Errors]:
    handler = Errors()
    loggers = [logging.getLogger(name) for name in ("webhook", "allocator", "tessera")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


def no_errors(errors: Errors) -> None:
    found, errors.records[:] = list(errors.records), []
    assert not found, "ERROR logged: " + "; ".join(
        f"{r.name}: {r.getMessage()}" for r in found)


# ----------------------------------------------------------------------------- webhook

WEBHOOK_CONFIGS = {
    "default": WebhookConfig(max_body_bytes=MAX_BODY),
    "all-dialects": WebhookConfig(MutationConfig(ALL_DIALECTS), max_body_bytes=MAX_BODY),
}


def check_admission(client: Any, body: bytes) -> dict[str, Any] | None:
    """Post ``body``; check the reply's contract; the patched pod when there is a patch."""
    response = client.post("/mutate", data=body, content_type="application/json")
    assert response.status_code in (200, 400, 413), response.status_code
    answer = response.get_json()
    assert isinstance(answer, dict)
    reply = answer.get("response") or {}
    event(str(response.status_code) if response.status_code != 200
          else "patched" if "patch" in reply else "allowed" if reply.get("allowed")
          else "refused")
    if response.status_code != 200:
        assert answer["code"] == response.status_code
        assert isinstance(answer["message"], str) and answer["message"]
        return None
    sent = json.loads(body)
    assert answer["apiVersion"] == sent["apiVersion"] and answer["kind"] == sent["kind"]
    reply = answer["response"]
    assert reply["uid"] == sent["request"]["uid"]
    assert isinstance(reply["allowed"], bool)
    if not reply["allowed"]:
        assert reply["status"]["code"] == 422, reply
        assert reply["status"]["message"].startswith("tessera: ")
        return None
    if "patch" not in reply:
        return None
    assert reply["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(reply["patch"]))
    patched: dict[str, Any] = jsonpatch.apply_patch(
        copy.deepcopy(sent["request"]["object"]), ops)
    return patched


@pytest.fixture(scope="module")
def webhook_clients() -> dict[str, Any]:
    return {name: create_webhook(config).test_client()
            for name, config in WEBHOOK_CONFIGS.items()}


@pytest.mark.parametrize("dialects", list(WEBHOOK_CONFIGS))
@seed(SEED)
@FUZZ
@given(body=encoded(review))
def test_fuzzed_admission_reviews_always_get_their_contract(
    errors: Errors, webhook_clients: dict[str, Any], dialects: str, body: bytes,
) -> None:
    client = webhook_clients[dialects]
    patched = check_admission(client, body)
    if patched is not None:
        # Mutating the mutated pod changes nothing (issue 9, item 6).
        again = json.loads(body)
        again["request"]["object"] = patched
        reply = client.post("/mutate", json=again).get_json()["response"]
        assert reply["allowed"] and "patch" not in reply, reply
    no_errors(errors)


# ----------------------------------------------------------------------------- allocator


@pytest.fixture(scope="module")
def allocator_client() -> Any:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "allocator"))
    from alloc_harness import make_app
    from builders import make_gpu_pod, make_node, request, whole
    from fake_kube import FakeKube

    fake = FakeKube()
    fake.add_node(make_node("n1", count=2, memory_mib=16000))
    fake.add_node(make_node("n2", count=1, memory_mib=16000))
    fake.add_pod(make_gpu_pod("holder", request(whole())))
    app, rt = make_app(fake, max_body_bytes=MAX_BODY)
    rt.allocator.bind("default", "holder", "uid-holder", "n2")
    # Filters that find no room remember the pod, by its uid, to ask it again on a release
    # (allocator/verbs/requeue.py).
    assert rt.allocator.requeue is not None
    return app.test_client()


def outcome(status: int, reply: Any) -> str:
    """A coarse label of a verb's reply, for hypothesis' statistics."""
    if status != 200:
        return str(status)
    if isinstance(reply, list):
        return "scored" if reply else "no hosts"
    if reply.get("Error"):
        return "Error"
    if "NodeNames" not in reply:
        return "bound"
    if reply["NodeNames"]:
        return "a node fits"
    return "unresolvable" if reply["FailedAndUnresolvableNodes"] else "no node fits"


def check_verb(client: Any, verb: str, body: bytes) -> None:
    response = client.post(f"/scheduler/{verb}", data=body, content_type="application/json")
    assert response.status_code in (200, 413), response.status_code
    reply = response.get_json()
    event(f"{verb}: {outcome(response.status_code, reply)}")
    text = json.dumps(reply)
    assert "internal error" not in text, text
    if response.status_code == 413:
        assert set(reply) == {"code", "message"} and reply["code"] == 413
        return
    if verb == "filter":
        assert set(reply) == {"Nodes", "NodeNames", "FailedNodes",
                              "FailedAndUnresolvableNodes", "Error"}
        assert isinstance(reply["Error"], str) and isinstance(reply["NodeNames"], list)
        if reply["NodeNames"]:
            sent = json.loads(body)["NodeNames"]
            assert set(reply["NodeNames"]) <= set(sent)
    elif verb == "prioritize":
        assert isinstance(reply, list)
        for entry in reply:
            assert set(entry) == {"Host", "Score"} and 0 <= entry["Score"] <= 10
    else:
        assert set(reply) == {"Error"} and isinstance(reply["Error"], str)


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@seed(SEED)
@FUZZ
@given(body=encoded(extender_args))
def test_fuzzed_extender_args_always_get_their_contract(
    errors: Errors, allocator_client: Any, verb: str, body: bytes,
) -> None:
    check_verb(allocator_client, verb, body)
    no_errors(errors)


@seed(SEED)
@settings(FUZZ, max_examples=max(EXAMPLES // 4, 50))
@given(body=encoded(binding_args))
def test_fuzzed_binding_args_always_get_their_contract(
    errors: Errors, allocator_client: Any, body: bytes,
) -> None:
    check_verb(allocator_client, "bind", body)
    no_errors(errors)
