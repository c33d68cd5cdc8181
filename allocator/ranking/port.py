"""The ranking port: which nodes a GPU request fits, and their scores under a policy.

The verbs (:mod:`allocator.verbs`) ask these questions and nothing else of the ranking. Two
rankers answer them the same way: :class:`allocator.ranking.plain.PlainRanker`, a loop over
the nodes with :func:`~allocator.ranking.fit.unfit_reason`, :func:`~allocator.ranking.fit.place`
and the policy's score (the version to read first), and
:class:`allocator.ranking.fast.FastRanker`, which answers once per distinct node content
(tests/allocator/test_rankers.py holds them equal on random clusters and requests).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from allocator.ranking.fit import Unfit
from allocator.ranking.policies import Policy, PolicyContext, Workload
from tessera.vocabulary import PodRequest

#: Filter's verdict for a node the picture does not know.
UNKNOWN_NODE: Final = Unfit("node unknown to the GPU allocator (not in its node watch, and not "
                            "found when read by name)")


class Nodes(Protocol):
    """Some of the asked nodes, kept as the ranker that found them keeps them."""

    def __len__(self) -> int: ...

    def name_list(self) -> list[str]: ...


class NameList(list[str]):
    """:class:`Nodes` as a plain list of names."""

    def name_list(self) -> list[str]:
        return list(self)


@dataclass(frozen=True)
class Fit:
    """Where a request fits among the asked nodes, and, when :attr:`explained`, why not on
    each of the others."""

    #: The nodes it fits, in asked order.
    nodes: Nodes
    #: Whether the reasons below were worked out (else they are empty).
    explained: bool = False
    #: Node name -> why not (:func:`~allocator.errors.event_safe`), for nodes where room may
    #: be freed / where it never will.
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    #: Some known node lacks only room (explained answers only).
    short: bool = False


class Ranker(Protocol):
    """Which nodes fit a request; their scores under a policy."""

    def fit(self, request: PodRequest, names: Sequence[str], *, explain_when_some_fit: bool,
            read_unknown: bool = True) -> Fit:
        """Where ``request`` fits among ``names``. Explained when it does not fit them all,
        unless it fits some and ``explain_when_some_fit`` is False. ``read_unknown``: names
        the picture does not know are read from the API first."""
        ...

    def best(self, request: PodRequest, policy: Policy, ctx: PolicyContext, nodes: Nodes
             ) -> list[str]:
        """The ``nodes`` (from :meth:`fit`) whose score the extender would make the top one,
        in order."""
        ...

    def best_known(self, request: PodRequest, policy: Policy, names: Sequence[str],
                   context: Callable[[], PolicyContext], avoid: Collection[str] = ()
                   ) -> list[str] | None:
        """The best of ``names`` when the ranker can tell without looking each name up, None
        otherwise (then :meth:`fit` and :meth:`best` answer). ``context`` makes the policy's
        view of the pod, called at most once. ``avoid``: nodes left out of the ranking
        (never among ``names``)."""
        ...

    def scores(self, request: PodRequest, policy: Policy, ctx: PolicyContext,
               names: Sequence[str]) -> list[int]:
        """Prioritize's scores 0..10 of ``names``, in order (0 where it does not fit)."""
        ...

    def scores_cpu_only(self, policy: Policy, workload: Workload, pod_cpu_milli: int,
                        names: Sequence[str]) -> list[int]:
        """0..10 scores of a pod that asks for no GPU, from the policy's
        :meth:`~allocator.ranking.policies.Policy.score_cpu_only` over each node's free CPU
        before and after the pod's ``pod_cpu_milli``."""
        ...
