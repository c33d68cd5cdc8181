"""The three verbs kube-scheduler asks of the extender: filter, prioritize and bind, each an
object holding only its handles (the shared reader, the picture, the ranking port, the node
agent, the API port, the hooks), over the cluster picture."""
