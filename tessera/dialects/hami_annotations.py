"""HAMi's pod annotations (pure): each honoured with HAMi's meaning, or refused naming it.

A pod written for hami-scheduler may carry annotations that choose cards, nodes or a sharing
mode. Its author expects HAMi's meaning whatever Tessera's agent profile, so none is ever
ignored in silence: :func:`hami_card_choice` returns the cards the card-choosing annotations
allow (types, UUIDs, sharing modes, one NUMA node per container: as
:class:`~tessera.vocabulary.PodRequest` fields, which the allocator's ``eligible`` and its
multi-card search apply), :func:`hami_policy` the placement policy the two policy
annotations name, and each raises :class:`RequestError` listing every annotation Tessera
cannot honour, each with what to do instead. docs/hami.md ("HAMi's pod annotations") has the
table of meanings.

Keys and rules: Project-HAMi/HAMi v2.10.0.

- ``pkg/device/nvidia/device.go:45-53`` the NVIDIA keys; ``:61-63`` the modes ``mig``,
  ``hami-core``, ``mps``; ``:493-503`` ``checkType``: a card is skipped unless the
  ``vgpu-mode`` value *contains* the card's registered mode (``plugin/register.go:187``; the
  plugin's default mode ``hami-core``, ``plugin/server.go:130``); ``:482-491``
  ``assertNuma``: ``numa-bind`` is Go's ``strconv.ParseBool``, anything else is false; where
  true, ``Fit`` (``:740-753``) starts the container's cards over at each card of another NUMA
  node, over cards sorted with each NUMA node's together
  (``pkg/scheduler/policy/gpu_policy.go:100-112``, ``pkg/scheduler/scheduler.go:641-661``):
  all of a container's cards on one NUMA node.
- ``pkg/device/devices.go:693-738`` ``CheckUUID`` (exact UUIDs, comma-separated) and
  ``CheckType`` (a case-insensitive part of the card type); an empty value is no constraint.
- ``pkg/util/types.go:85-91`` the policy keys; ``pkg/scheduler/score.go:139-146`` and
  ``pkg/scheduler/policy/node_policy.go:48-54``: the node policy is spread only for
  ``spread``, else binpack; ``pkg/scheduler/policy/gpu_policy.go:77-127``: the card policy is
  binpack only for ``binpack``, else spread, and ``mutex``, ``topology-aware``, ``numa`` and
  comma-separated chains mean more (:func:`gpu_chain_policy`: a chain led by ``binpack`` or
  ``spread`` is honoured, the rest refused). The defaults: ``cmd/scheduler/main.go:70-71``
  (``--node-scheduler-policy=binpack``, ``--gpu-scheduler-policy=spread``), as the chart's
  ``scheduler.defaultSchedulerPolicy`` (``charts/hami/values.yaml:76-78``).
- ``pkg/util/types.go:91``, ``pkg/util/device_scoring_weights.go:48``: a pod's own weights
  of a card's slot, core and memory use in its score.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
#: HAMi-core's software share: the plugin's default sharing mode (``plugin/server.go:130``).
HAMI_CORE: Final = "hami-core"
#: The modes HAMi's plugin registers a card in (``device.go:61-63``), as ``vgpu-mode`` tests
#: them: a card is taken when the value contains its mode.
HAMI_MODES: Final = (HAMI_CORE, "mig", "mps")
#: The modes whose cards take Tessera's shares: the plugin's ``Allocate`` branches on ``mig``
#: only (``plugin/server.go:807-850``), so an ``mps`` card gets a share written as a
#: ``hami-core`` one. ``mig`` cards are left out (Tessera cuts no MIG instance).
PLACED_MODES: Final = (HAMI_CORE, "mps")
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


@dataclass(frozen=True)
class CardChoice:
    """HAMi's card choice as the :class:`~tessera.vocabulary.PodRequest` fields it fills:
    ``lists`` the tuple fields (``use_types`` ... ``card_modes``), ``one_numa_node``."""

    lists: dict[str, tuple[str, ...]] = field(default_factory=dict)
    one_numa_node: bool = False


def hami_card_choice(annotations: Mapping[str, Any], hami_agent: bool,
                     agent: str = "this cluster's node agent") -> CardChoice:
    """HAMi's card choice (:class:`CardChoice`). ``hami_agent``: the cluster's node agent is
    HAMi's device plugin, which registers each card's UUID, sharing mode and NUMA node; under
    any other ``agent`` a pod choosing cards by them is refused (:class:`RequestError`
    naming the agent), since no card could be told to match."""
    problems: list[str] = []
    lists: dict[str, tuple[str, ...]] = {}
    for key, name in CARD_CHOICE.items():
        if key not in annotations:
            continue
        values = _values(key, str(annotations[key]), problems)
        if values and name.endswith("uuids") and not hami_agent:
            problems.append(f"{key}={_read(annotations, key)!r}: {agent} tells no card UUIDs "
                            f"(only HAMi's device plugin does: agent profile hami); remove it")
            continue
        lists[name] = values
    if VGPU_MODE in annotations:
        modes = _card_modes(_read(annotations, VGPU_MODE), hami_agent, agent, problems)
        if modes:
            lists["card_modes"] = modes
    one_numa = NUMA_BIND in annotations and _numa_bind(
        _read(annotations, NUMA_BIND), hami_agent, agent, problems)
    if problems:
        raise RequestError("; ".join(f"pod annotation {p}" for p in problems))
    return CardChoice(lists, one_numa)


def _card_modes(value: str, hami_agent: bool, agent: str, problems: list[str]) -> tuple[str, ...]:
    """The card modes ``vgpu-mode`` lets the pod take (HAMi's rule: the value contains the
    card's mode), of those Tessera places; () with a problem when none, or no constraint
    when the agent registers no modes (every card is a software share)."""
    quoted = f"{VGPU_MODE}={value!r}"
    if len(value) > _QUOTED_CHARS:  # _read cut it: no mode list is this long
        problems.append(f"{quoted}: at most {_QUOTED_CHARS} characters")
        return ()
    named = tuple(m for m in HAMI_MODES if m in value)
    placed = tuple(m for m in named if m in PLACED_MODES)
    write = f"write {' or '.join(PLACED_MODES)} or remove it"
    if not named:
        problems.append(f"{quoted} names none of HAMi's card modes {', '.join(HAMI_MODES)} "
                        f"(HAMi takes no card for it); {write}")
    elif not placed:
        problems.append(f"{quoted} allows mig cards only: Tessera cuts no MIG instance and "
                        f"leaves such cards out; {write}")
    elif not hami_agent:
        if HAMI_CORE in placed:  # every card of Tessera's other agents is a software share
            return ()
        problems.append(f"{quoted}: Tessera tells card modes apart under HAMi's device plugin "
                        f"only (agent profile hami), not under {agent}; write {HAMI_CORE} or "
                        f"remove it")
    return placed if hami_agent else ()


def _numa_bind(value: str, hami_agent: bool, agent: str, problems: list[str]) -> bool:
    """Whether ``numa-bind`` binds each container's cards to one NUMA node (HAMi: Go's
    ParseBool, true)."""
    quoted = f"{NUMA_BIND}={value!r}"
    if value in _GO_FALSE:
        return False
    if value not in _GO_TRUE:
        problems.append(f"{quoted} is not a boolean (HAMi reads it as false); write false or "
                        f"remove it")
    elif not hami_agent:
        problems.append(f"{quoted}: {agent} tells no card's NUMA node (only HAMi's device "
                        f"plugin does: agent profile hami); remove it or write false")
    return value in _GO_TRUE and hami_agent


def _scoring_weights(key: str, value: str, _model_key: str) -> str:
    return (f"{key}={value!r}: Tessera does not yet weigh a card's slots, cores and memory per "
            f"pod (HAMi's default, slot=1,core=1,memory=1, is what its hami-* policies use); "
            f"remove it")


#: The annotations that choose cards or a mode; an empty value is no constraint in HAMi.
_CHECKS: Final[Mapping[str, Callable[[str, str, str], str]]] = {
    SCORING_WEIGHTS: _scoring_weights,
}


#: HAMi's card sort keys, which a comma-separated chain applies in the order written
#: (``gpu_policy.go:50-75``, ``:129-167``).
_SORT_KEYS: Final = ("binpack", "spread", "numa")
#: The card-policy words Tessera cannot reproduce: HAMi's meaning and what to write instead.
_UNHONOURED: Final[Mapping[str, str]] = {
    "mutex": "HAMi takes idle cards only (device.go:725, :767-771), which Tessera does "
             "not reproduce; write binpack or spread",
    "topology-aware": "HAMi takes, among every card that fits, the worst-connected "
                      "card for one and the best-connected set for several, whatever the "
                      "usage scores (device.go:724, :829-869), where Tessera orders by "
                      "binpack or spread and by connection only among equals; write binpack "
                      "or spread",
    "numa": "HAMi orders cards by NUMA node first (gpu_policy.go:82, :159-161), which "
            "Tessera does not reproduce; write binpack or spread, with numa only after one "
            "of them",
}


def gpu_chain_policy(value: str) -> tuple[str | None, str]:
    """The card policy a comma-separated ``gpu-scheduler-policy`` chain means, as ``binpack``
    or ``spread``, else None and why (decision 0036). HAMi sorts by the chain's
    keys in order (``gpu_policy.go:132-166``): a first ``binpack`` or ``spread`` decides on
    the card score, a later ``binpack`` or ``spread`` compares that same score again, and a
    later ``numa`` only breaks ties, as it does for a single ``binpack`` or ``spread``
    (``:115-126``): so the chain means its first key."""
    words = [w for w in (part.strip() for part in value.split(",")) if w]
    for word in words:
        if word in _UNHONOURED and (word != "numa" or word == words[0]):
            return None, f"with {word}, {_UNHONOURED[word]}"
        if word not in _SORT_KEYS:
            return None, (f"{word!r} is not a HAMi card policy (HAMi skips it, "
                          f"gpu_policy.go:62-75); write binpack or spread")
    if not words:
        return None, "names no card policy; write binpack or spread"
    return words[0], ""


def _policy_value(annotations: Mapping[str, Any], key: str, default: str,
                  problems: list[str]) -> str:
    if key not in annotations:
        return default
    value = _read(annotations, key)
    if value in POLICY_VALUES:
        return value
    if key == GPU_POLICY and ("," in value or value in _UNHONOURED):
        chained, why = gpu_chain_policy(value)
        if chained is not None:
            return chained
        problems.append(f"{key}={value!r}: {why}")
        return default
    problems.append(f"{key}={value!r}: Tessera honours {' or '.join(POLICY_VALUES)}; "
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
