"""The node-agent port: everything the cluster's node agent may change in the allocator, in
one place.

The verbs (:mod:`allocator.verbs`) and the picture (:mod:`allocator.picture`) ask the agent
these questions and know no agent by name, as they ask the ranking only through
:class:`~allocator.ranking.port.Ranker`:

- **inventory** — its own description of a node's cards (:meth:`NodeAgent.describe`, tried
  before the generic sources of :mod:`allocator.picture.inventory`);
- **pod metadata** written at bind (:meth:`NodeAgent.metadata`, the writers of
  :mod:`allocator.agents`);
- a **guard** around bind's write step (:meth:`NodeAgent.guard`: a node lock, or nothing);
- which nodes **filter tries first** (:meth:`NodeAgent.nodes_to_avoid`), how **ties** are
  answered (:meth:`NodeAgent.answer`) and whether the answer **waits for its turn**
  (:meth:`NodeAgent.wait_for_turn`);
- what is **adopted at start** (:meth:`NodeAgent.adopt`);
- where it **warns** about a pod at bind (:attr:`NodeAgent.warn`, a Warning Event);
- what a pod or node event means for the agent's **waiting list** (the
  :class:`~allocator.picture.agent_watch.AgentWatch` hooks it inherits).

Every hook has the plain agent's answer as its default; :class:`PlainAgent` (elastic,
nano-gpu, aliyun) is this class with a writer, and an agent that needs more overrides what it
needs (:class:`allocator.agents.hami.HamiAgent`). A new agent is one module and one entry in
:data:`allocator.agents.profiles.AGENTS`; docs/architecture.md shows one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext

from allocator.agents import AgentMetadata, BindContext
from allocator.decisions import PodRef
from allocator.hami.described import NOT_CARDS, allocate_failed, registered_cards
from allocator.picture.agent_watch import AgentWatch
from allocator.picture.inventory import Inventory
from tessera.agent_profiles import AgentProfile

#: The pods bound on each node and not started yet, as the picture counts them (read only
#: by an agent that asks for it).
PodsToStart = Callable[[], Counter[str]]

#: One guard for every bind: nothing around the write.
_NO_GUARD: AbstractContextManager[None] = nullcontext()


def _unheard(_pod: PodRef, _reason: str, _note: str) -> None:
    """Warnings before the service gives the agent its recorder (tests, tools): dropped."""


class NodeAgent(AgentWatch):
    """The port, with the plain agent's answer to every question."""

    #: The profile the agent serves (messages, the status page).
    profile: AgentProfile = AgentProfile.ELASTIC
    #: HAMi's lock and handshake: :meth:`describe` reads the register annotation whatever
    #: the profile, never these.
    unread_annotations = NOT_CARDS
    #: Where the agent warns about a pod at bind: (pod, reason, note) becomes a Warning
    #: Event (the service connects its recorder: rate-limited, sent by the recorder's
    #: thread, never raises).
    warn: Callable[[PodRef, str, str], None] = staticmethod(_unheard)

    def metadata(self, ctx: BindContext) -> AgentMetadata:
        """Annotations and labels the agent reads for this bind; ``skipped`` says why it
        cannot be given the allocation (the bind then fails)."""
        return AgentMetadata(skipped={self.profile: "no writer for this agent profile"})

    def guard(self, pod: PodRef, node: str) -> AbstractContextManager[None]:
        """Around bind's write step (the Binding). Raises
        :class:`~allocator.errors.BindError` when the bind must not go on."""
        return _NO_GUARD

    def nodes_to_avoid(self, names: Sequence[str], pods_to_start: PodsToStart
                       ) -> Iterable[set[str]]:
        """The asked nodes filter leaves out, try after try, before it tries them all
        (nothing: every node at once; asked on every filter, so the default allocates
        nothing)."""
        return ()

    def answer(self, nodes: list[str]) -> list[str]:
        """Filter's answer among the policy's tied best ``nodes`` (all of them: the
        scheduler chooses)."""
        return nodes

    def wait_for_turn(self, nodes: Sequence[str], pods_to_start: PodsToStart) -> str | None:
        """Called with filter's answer before it holds the pod there: wait (bounded)
        until a bind to one of ``nodes`` can be served in time; the reason filter refuses
        them with when none could (None: go on at once)."""
        return None

    def adopt(self) -> None:
        """At start, before the first list: record what another scheduler of this agent
        placed (nothing). Never raises: what cannot be adopted is logged and left."""

    def describe(self, annotations: Mapping[str, str]) -> Inventory | None:
        """A device plugin's register annotation, read whatever the profile (as GFD's labels
        are): the agents this build knows that describe nodes themselves write it."""
        return registered_cards(annotations)

    def start_failed(self, annotations: Mapping[str, str]) -> bool:
        """A device plugin's failed Allocate, read whatever the profile (as above)."""
        return allocate_failed(annotations)


class PlainAgent(NodeAgent):
    """An agent that needs nothing but its writer (elastic, nano-gpu, aliyun)."""

    def __init__(self, profile: AgentProfile, write: Callable[[BindContext], AgentMetadata]
                 ) -> None:
        self.profile = profile
        self._write = write

    def metadata(self, ctx: BindContext) -> AgentMetadata:
        return self._write(ctx)
