"""Ranking: whether a request fits a node and how a policy scores it (pure), and the speed
machinery that answers it once per distinct node content."""
