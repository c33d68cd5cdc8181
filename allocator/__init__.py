"""Tessera's allocator: a kube-scheduler extender that never hands out a GPU twice.

The folders, from the pure core out to the edges:

- :mod:`allocator.ranking` — whether a request fits a node (``fit``), how a policy scores it
  (``policies``), the live workload mix, and the speed machinery (``content_memo``,
  ``every_node``) that answers once per distinct node content. Pure but for the memo's arrays.
- :mod:`allocator.picture` — the cluster picture: a node's cards (``inventory``) and CPU/memory
  (``resources``), the thread-safe ``state`` fed by list/watch (``watch``), ``nodelookup``.
- the agents' folders — the node-agent port (``agents.port``: everything an agent may change)
  and the agents (``agents.profiles``: one per profile), the annotations and labels each agent
  reads, written at bind (pure); beside them, one folder per agent that needs more than a
  writer (its formats, node lock, waiting list, adoption).
- :mod:`allocator.verbs` — filter, prioritize and bind, each an object holding its handles, and
  the reads they share (``reader``).
- :mod:`allocator.kube` — the API adapters: ``client`` (the only importer of ``kubernetes``),
  its libcurl pool, leader election, Events.
- :mod:`allocator.service` — configuration, CLI, Flask app, the extender wire format, page,
  metrics.

Each folder imports only those below it, from ``service`` down to ``kube`` (the
``allocator-layers`` contract in ``.importlinter``). Three modules stay at the top because
every folder speaks them: :mod:`allocator.ports` (the API as the verbs need it, a Protocol),
:mod:`allocator.errors` and :mod:`allocator.decisions` (the verbs' hooks).
"""
