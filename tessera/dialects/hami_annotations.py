"""HAMi's pod annotations (pure): each honoured with HAMi's meaning, or refused naming it.

A pod written for hami-scheduler may carry annotations that choose cards, nodes or a sharing
mode. Its author expects HAMi's meaning whatever Tessera's agent profile, so none is ever
ignored in silence: :func:`hami_card_choice` returns the cards the four card-choosing
annotations allow (as :class:`~tessera.vocabulary.PodRequest` fields, which the allocator's
``eligible`` applies), :func:`hami_policy` the placement policy the two policy
annotations name, and raises :class:`RequestError` listing every annotation Tessera cannot
honour yet, each with what to do instead. docs/hami.md ("HAMi's pod annotations") has the
table of meanings.

Keys and rules: Project-HAMi/HAMi v2.10.0.

- ``pkg/device/nvidia/device.go:45-53`` the NVIDIA keys; ``:61-63`` the modes ``mig``,
  ``hami-core``, ``mps``; ``:493-503`` ``checkType``: a card is skipped unless the
  ``vgpu-mode`` value *contains* the card's registered mode; ``:482-491`` ``assertNuma``:
  ``numa-bind`` is Go's ``strconv.ParseBool``, anything else is false.
- ``pkg/device/devices.go:693-738`` ``CheckUUID`` (exact UUIDs, comma-separated) and
  ``CheckType`` (a case-insensitive part of the card type); an empty value is no constraint.
- ``pkg/util/types.go:85-91`` the policy keys; ``pkg/scheduler/score.go:139-146`` and
  ``pkg/scheduler/policy/node_policy.go:48-54``: the node policy is spread only for
  ``spread``, else binpack; ``pkg/scheduler/policy/gpu_policy.go:77-127``: the card policy is
  binpack only for ``binpack``, else spread, and ``mutex``, ``topology-aware``, ``numa`` and
  comma-separated chains mean more. The defaults: ``cmd/scheduler/main.go:70-71``
  (``--node-scheduler-policy=binpack``, ``--gpu-scheduler-policy=spread``), as the chart's
  ``scheduler.defaultSchedulerPolicy`` (``charts/hami/values.yaml:76-78``).
- ``pkg/util/types.go:91``, ``pkg/util/device_scoring_weights.go:48``: a pod's own weights
  of a card's slot, core and memory use in its score.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from tessera.vocabulary import RequestError, Vocabulary

USE_GPU_TYPE: Final = "nvidia.com/use-gputype"
NO_USE_GPU_TYPE: Final = "nvidia.com/nouse-gputype"
USE_GPU_UUID: Final = "nvidia.com/use-gpuuuid"
NO_USE_GPU_UUID: Final = "nvidia.com/nouse-gpuuuid"
VGPU_MODE: Final = "nvidia.com/vgpu-mode"
NUMA_BIND: Final = "nvidia.com/numa-bind"
NODE_POLICY: Final = "hami.io/node-scheduler-policy"
GPU_POLICY: Final = "hami.io/gpu-scheduler-policy"
SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"

#: hami-scheduler's defaults when a pod names no policy (cmd/scheduler/main.go:70-71).
DEFAULT_NODE_POLICY: Final = "binpack"
DEFAULT_GPU_POLICY: Final = "spread"
#: The policy values Tessera honours, for the node and among a node's cards.
POLICY_VALUES: Final = ("binpack", "spread")
#: The one sharing mode Tessera places: HAMi-core's software share, the plugin's default.
HAMI_CORE: Final = "hami-core"
# Go's strconv.ParseBool.
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


#: Longest value quoted in a refusal (an annotation may hold 256 KiB); every value Tessera
#: honours is far shorter, so a cut value is refused all the same.
_QUOTED_CHARS: Final = 64


def _read(annotations: Mapping[str, Any], key: str) -> str:
    value = str(annotations[key])
    return value if len(value) <= _QUOTED_CHARS else value[:_QUOTED_CHARS] + "..."


def policy_name(node_policy: str, gpu_policy: str) -> str:
    """Tessera's placement policy reproducing HAMi's pair: ``hami-<node>-<gpu>``."""
    return f"hami-{node_policy}-{gpu_policy}"


#: Most values one card-choosing annotation may list, and the longest value: the lists go into
#: the pod's request record (an annotation may hold 256 KiB; a node has a few cards).
_MOST_VALUES: Final = 64
_LONGEST_VALUE: Final = 256
#: The card choice's fields of :class:`tessera.vocabulary.PodRequest`, by annotation.
CARD_CHOICE: Final = {USE_GPU_TYPE: "use_types", NO_USE_GPU_TYPE: "nouse_types",
                      USE_GPU_UUID: "use_uuids", NO_USE_GPU_UUID: "nouse_uuids"}


def _values(key: str, value: str, problems: list[str]) -> tuple[str, ...]:
    # Comma-separated and trimmed; empty parts name nothing (an empty value: no constraint).
    values = tuple(v for v in (part.strip() for part in value.split(",")) if v)
    if len(values) > _MOST_VALUES or any(len(v) > _LONGEST_VALUE for v in values):
        problems.append(f"{key}: at most {_MOST_VALUES} values of at most {_LONGEST_VALUE} "
                        f"characters each")
        return ()
    return values


def hami_card_choice(annotations: Mapping[str, Any],
                     uuids_known: bool) -> dict[str, tuple[str, ...]]:
    """HAMi's card choice as the :class:`~tessera.vocabulary.PodRequest` fields it fills
    (``use_types`` ...). ``uuids_known``: the cluster's node agent tells each card's UUID
    (HAMi's); without it a pod naming UUIDs is refused (:class:`RequestError`), since no
    card could be told to match."""
    problems: list[str] = []
    choice: dict[str, tuple[str, ...]] = {}
    for key, field in CARD_CHOICE.items():
        if key not in annotations:
            continue
        values = _values(key, str(annotations[key]), problems)
        if values and field.endswith("uuids") and not uuids_known:
            problems.append(f"{key}={_read(annotations, key)!r}: this cluster's node agent "
                            f"tells no card UUIDs (only the hami profile does); remove it")
            continue
        choice[field] = values
    if problems:
        raise RequestError("; ".join(f"pod annotation {p}" for p in problems))
    return choice


def _vgpu_mode(key: str, value: str, _model_key: str) -> str:
    if value.strip() == HAMI_CORE:
        return ""
    return (f"{key}={value!r}: Tessera places {HAMI_CORE} shares only (MIG and MPS not yet); "
            f"write {HAMI_CORE} or remove it")


def _numa_bind(key: str, value: str, _model_key: str) -> str:
    if value in _GO_FALSE:
        return ""
    if value in _GO_TRUE:
        return (f"{key}={value!r}: Tessera does not yet keep a container's cards on one NUMA "
                f"node; remove it or write false")
    return f"{key}={value!r} is not a boolean (HAMi reads it as false); write false or remove it"


def _scoring_weights(key: str, value: str, _model_key: str) -> str:
    return (f"{key}={value!r}: Tessera does not yet weigh a card's slots, cores and memory per "
            f"pod (HAMi's default, slot=1,core=1,memory=1, is what its hami-* policies use); "
            f"remove it")


#: The annotations that choose cards or a mode; an empty value is no constraint in HAMi.
_CHECKS: Final[Mapping[str, Callable[[str, str, str], str]]] = {
    VGPU_MODE: _vgpu_mode,
    NUMA_BIND: _numa_bind,
    SCORING_WEIGHTS: _scoring_weights,
}


def _policy_value(annotations: Mapping[str, Any], key: str, default: str,
                  problems: list[str]) -> str:
    if key not in annotations:
        return default
    value = _read(annotations, key)
    if value in POLICY_VALUES:
        return value
    more = (" (topology-aware, mutex, numa and comma-separated chains are not honoured yet)"
            if key == GPU_POLICY else "")
    problems.append(f"{key}={value!r}: Tessera honours {' or '.join(POLICY_VALUES)}{more}; "
                    f"write one of them or remove it")
    return default


def _policy(annotations: Mapping[str, Any], problems: list[str]) -> str | None:
    if NODE_POLICY not in annotations and GPU_POLICY not in annotations:
        return None
    node = _policy_value(annotations, NODE_POLICY, DEFAULT_NODE_POLICY, problems)
    gpu = _policy_value(annotations, GPU_POLICY, DEFAULT_GPU_POLICY, problems)
    return policy_name(node, gpu)


def hami_policy(annotations: Mapping[str, Any], vocabulary: Vocabulary,
                policy: str | None) -> str | None:
    """The pod's placement policy: ``policy`` (from Tessera's own policy annotation), else the
    one HAMi's policy annotations name, else None. Raises :class:`RequestError` naming every
    HAMi annotation Tessera cannot honour, and a Tessera policy that contradicts HAMi's."""
    policy_key, model_key = vocabulary.policy_annotation, vocabulary.model_annotation
    problems: list[str] = []
    for key, check in _CHECKS.items():
        if key not in annotations:
            continue
        value = _read(annotations, key)
        problem = check(key, value, model_key)
        if problem:
            problems.append(problem)
    hami = _policy(annotations, problems)
    if hami is not None and policy is not None and policy != hami:
        problems.append(f"{policy_key}={policy!r} contradicts HAMi's policy annotations "
                        f"({hami}); keep one")
    if problems:
        raise RequestError("; ".join(f"pod annotation {p}" for p in problems))
    return policy if policy is not None else hami
