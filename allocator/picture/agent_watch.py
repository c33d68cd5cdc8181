"""What the picture tells the cluster's node agent, and asks of it (the picture's side of the
node-agent port, :class:`allocator.agents.port.NodeAgent`).

The picture knows no agent: it is given one of these at construction and calls it, under its
own lock, on every node and pod event. Each hook has a default that does nothing, so a
picture built without an agent (a unit test's) reads nodes from the generic sources only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from allocator.picture.inventory import Inventory


class AgentWatch:
    """Every hook the picture calls, each a no-op by default (called under the picture's
    lock: a hook must only note what it is told)."""

    #: Node annotations no card is read from (the picture reads a node's cards again only
    #: when something else changed).
    unread_annotations: frozenset[str] = frozenset()

    def describe(self, annotations: Mapping[str, str]) -> Inventory | None:
        """The node's cards as the agent's own description of them says (tried before
        every generic source); an inventory with only a problem is reported and the next
        source tried; None: no such description on this node."""
        return None

    def start_failed(self, annotations: Mapping[str, str]) -> bool:
        """Whether the node's agent gave up starting this bound, pending pod: its cards are
        free again."""
        return False

    def node_seen(self, node: str, annotations: Mapping[str, str], version: str) -> None:
        """A watch event or list item of ``node`` at resourceVersion ``version``."""

    def node_gone(self, node: str) -> None:
        """``node`` left the cluster."""

    def pod_seen(self, uid: str, pod: Mapping[str, Any]) -> None:
        """A watch event or list item of the pod."""

    def pod_gone(self, uid: str) -> None:
        """The pod's record left the picture."""

    def waiting_by_node(self) -> Counter[str]:
        """Per node, the pods bound there that its agent has still to start."""
        return Counter()


#: The picture's agent when it is given none.
NO_AGENT_WATCH = AgentWatch()
