"""Tessera's allocator: a kube-scheduler extender that never hands out a GPU twice.

Layers (pure core, I/O at the edges):

- :mod:`allocator.inventory` — a node's cards from its Node object (pure).
- :mod:`allocator.fit` — node state, feasibility, placement of a request (pure).
- :mod:`allocator.policies` — placement policies behind one interface (pure).
- :mod:`allocator.agents` — node-agent annotation dialects written at bind (pure).
- :mod:`allocator.state` — the thread-safe cluster picture fed by watch events.
- :mod:`allocator.core` — filter / prioritize / bind decisions over the state and an adapter.
- :mod:`allocator.extender` — the kube-scheduler extender wire format.
- :mod:`allocator.kube` — the only module that imports ``kubernetes``.
- :mod:`allocator.app`, :mod:`allocator.cli` — Flask app factory and ``tessera allocator``.
"""
