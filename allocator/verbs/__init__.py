"""The three verbs kube-scheduler asks of the extender: filter, prioritize and bind, over the
cluster picture, the ranking and the API port."""
