"""The cluster picture: nodes, their cards and resources, and which pod holds what, kept current
by list/watch."""
