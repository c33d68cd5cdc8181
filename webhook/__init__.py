"""The mutating admission webhook: every GPU dialect in, one canonical pod out.

Layers: :mod:`webhook.mutation` (pod -> pod, pure), :mod:`webhook.admission` (review -> response,
no HTTP), :mod:`webhook.app` (Flask shell), :mod:`webhook.cli` (``tessera webhook``, gunicorn).
"""
