"""The parsed request and the allocation record (pure): the canonical forms every dialect
becomes and every decision is stored as. Units live in names."""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.vocabulary.names import WHOLE_CARD_PERCENT, Mode, RequestError


@dataclass(frozen=True)
class ContainerRequest:
    """What one container asks for.

    Either *whole cards* (``cards >= 1``; nobody else may use them) or a *share* made of
    compute and memory, on one card, or ``shares`` alike shares on as many distinct cards
    (HAMi's ``nvidia.com/gpu: 2`` with ``nvidia.com/gpumem``). Memory is either absolute
    (``memory_mib``) or a percent of the card chosen at bind (``memory_percent``), never both.
    """

    name: str
    cards: int = 0
    core_percent: int = 0
    memory_mib: int = 0
    memory_percent: int = 0
    init: bool = False
    #: How many alike shares, each on its own card (1 but for a share on several cards).
    shares: int = 1
    #: An init container with ``restartPolicy: Always`` (a sidecar): it runs beside the app
    #: containers. Read from the pod (tessera/dialects/pod.py), not stored in the request
    #: annotation: no agent profile places one (agent_profiles/refusals.py).
    restartable: bool = False

    def __post_init__(self) -> None:
        if self.shares < 1:
            raise RequestError(f"container {self.name!r}: share count {self.shares} is < 1")
        if self.cards < 0:
            raise RequestError(f"container {self.name!r}: card count {self.cards} is negative")
        if self.cards > 0:
            if self.core_percent or self.memory_mib or self.memory_percent:
                raise RequestError(
                    f"container {self.name!r}: a whole-card request carries no share"
                )
            if self.shares != 1:
                raise RequestError(
                    f"container {self.name!r}: a share count is for shares, not whole cards"
                )
            return
        if not 0 <= self.core_percent < WHOLE_CARD_PERCENT:
            raise RequestError(
                f"container {self.name!r}: core {self.core_percent}% of one card is out of "
                f"range 0-99 for a share"
            )
        if self.memory_mib < 0:
            raise RequestError(f"container {self.name!r}: memory {self.memory_mib} MiB < 0")
        if not 0 <= self.memory_percent <= 100:
            raise RequestError(
                f"container {self.name!r}: memory {self.memory_percent}% is out of range 0-100"
            )
        if self.memory_mib and self.memory_percent:
            raise RequestError(
                f"container {self.name!r}: memory given both in MiB and in percent"
            )
        if not (self.core_percent or self.memory_mib or self.memory_percent):
            raise RequestError(f"container {self.name!r}: an empty GPU share")

    @property
    def is_whole(self) -> bool:
        return self.cards > 0

    @property
    def core_resource_value(self) -> int:
        """Value of the canonical core extended resource (request == limit)."""
        return self.cards * WHOLE_CARD_PERCENT if self.is_whole else self.core_percent

    def describe(self) -> str:
        """What the container asks for, in words: ``2 whole cards``, ``50% core and 1000 MiB``,
        ``40% of its memory`` (the one wording of every message about a request)."""
        if self.is_whole:
            return f"{self.cards} whole card{'s' if self.cards > 1 else ''}"
        parts = []
        if self.core_percent:
            parts.append(f"{self.core_percent}% core")
        if self.memory_mib:
            parts.append(f"{self.memory_mib} MiB")
        if self.memory_percent:
            parts.append(f"{self.memory_percent}% of its memory")
        each = " and ".join(parts)
        return each if self.shares == 1 else f"{each} on each of {self.shares} cards"


@dataclass(frozen=True)
class PodRequest:
    """The parsed GPU request of a whole pod: the canonical form every dialect becomes."""

    containers: tuple[ContainerRequest, ...]
    #: Allowed GPU models (empty = any). Matched case-insensitively against the node's model.
    models: tuple[str, ...] = ()
    #: Minimum memory of each card used (Genius ``gpu-memory``), 0 = any.
    min_card_memory_mib: int = 0
    #: Placement policy chosen by the pod, or None for the cluster default.
    policy: str | None = None
    #: True lets a multi-card container take cards of different models; by default all the
    #: cards of one container are of one model (a job split over an A100 and a T4 runs at
    #: the T4's pace, or not at all).
    mixed_models: bool = False
    #: HAMi's card choice (``nvidia.com/use-gputype`` and the other three; empty = none):
    #: parts of the card type to take only, or to avoid; exact card UUIDs likewise. A
    #: "use" and a "nouse" list both apply (Project-HAMi/HAMi v2.10.0
    #: pkg/device/devices.go:693-738, CheckUUID and CheckType).
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    #: The sharing modes of the cards the pod may take (empty = any): a card whose node agent
    #: registered another mode is not taken (HAMi's ``nvidia.com/vgpu-mode``; HAMi's modes
    #: ``hami-core`` and ``mps``, Project-HAMi/HAMi v2.10.0 pkg/device/nvidia/device.go:61-63).
    card_modes: tuple[str, ...] = ()
    #: True: the cards of each multi-card container all come from one NUMA node of the node
    #: (HAMi's ``nvidia.com/numa-bind``); other containers of the pod may use another.
    one_numa_node: bool = False

    def __post_init__(self) -> None:
        if not self.containers:
            raise RequestError("a GPU request needs at least one GPU container")
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise RequestError(f"duplicate container names in GPU request: {names}")
        if self.min_card_memory_mib < 0:
            raise RequestError(f"minimum card memory {self.min_card_memory_mib} MiB < 0")

    @property
    def mode(self) -> Mode:
        kinds = {c.is_whole for c in self.containers}
        if kinds == {True}:
            return Mode.WHOLE
        if kinds == {False}:
            return Mode.SHARED
        return Mode.MIXED

    @property
    def whole_cards(self) -> int:
        return sum(c.cards for c in self.containers)

    def allows_model(self, model: str) -> bool:
        return not self.models or model.lower() in {m.lower() for m in self.models}

    def allows_type(self, model: str) -> bool:
        """HAMi's CheckType: a case-insensitive part of the card type, which HAMi's device
        plugin registers as ``NVIDIA-<model>`` (so ``NVIDIA`` is a part of every card's)."""
        upper = f"NVIDIA-{model}".upper()
        taken = not self.use_types or any(t.upper() in upper for t in self.use_types)
        return taken and not any(t.upper() in upper for t in self.nouse_types)

    def allows_uuid(self, uuid: str) -> bool:
        """HAMi's CheckUUID: exact UUIDs (a card without one is never a named card)."""
        taken = not self.use_uuids or uuid in self.use_uuids
        return taken and (not uuid or uuid not in self.nouse_uuids)

    def allows_mode(self, mode: str) -> bool:
        """Whether a card registered in sharing ``mode`` is one the pod takes."""
        return not self.card_modes or mode in self.card_modes

    @property
    def picks_cards(self) -> bool:
        """Whether the pod chooses cards by type, UUID or sharing mode (HAMi's annotations)."""
        return bool(self.use_types or self.nouse_types or self.use_uuids or self.nouse_uuids
                    or self.card_modes)

    @property
    def tells_cards_apart(self) -> bool:
        """Whether the pod tells cards apart by what makes no two nodes alike to placement:
        a card's UUID, its sharing mode, its NUMA node (so it is fitted node by node)."""
        return bool(self.use_uuids or self.nouse_uuids or self.card_modes or self.one_numa_node)


@dataclass(frozen=True)
class ContainerAllocation:
    """The cards one container got, and the share taken on each (0 core/memory = whole card)."""

    name: str
    card_indices: tuple[int, ...]
    core_percent: int = 0
    memory_mib: int = 0
    init: bool = False

    @property
    def is_whole(self) -> bool:
        return self.core_percent == 0 and self.memory_mib == 0


@dataclass(frozen=True)
class Allocation:
    """The canonical allocation record: the durable truth the allocator's cache is rebuilt from."""

    node: str
    containers: tuple[ContainerAllocation, ...]
    #: Unix time in seconds when the allocation was decided (informational).
    allocated_at: float = 0.0
    pod_uid: str = field(default="")

    def card_indices(self) -> tuple[int, ...]:
        return tuple(sorted({i for c in self.containers for i in c.card_indices}))
