"""HAMi's task priority on a pod the webhook never saw (pure).

``nvidia.com/priority`` asks for no card: HAMi's webhook turns it into HAMi-core's
``CUDA_TASK_PRIORITY`` (Project-HAMi/HAMi v2.10.0 ``pkg/device/nvidia/device.go:352-358``) and
its scheduler never reads it; HAMi's chart only lists it among the extender's managed
resources so that kube-scheduler's fit ignores it (``charts/hami/templates/_helpers.tpl:202``).
Tessera does the same (webhook/hami_extras.py writes the variable; the shipped scheduler
configurations manage the resource), so a pod admitted without a webhook that writes the
variable (one in a namespace the webhook is not sent, or created before it was installed)
is placed as any other, and HAMi-core runs it at its own default, 1 (low: ``examples/nvidia/
example.yaml:31``), whatever it asked (a container asking 1 loses nothing and is not named).
The environment of a created pod cannot change: the bind says so on the pod, as a Warning
Event, rather than leaving the user to guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tessera.dialects import HAMI_PRIORITY_KEY, HAMI_TASK_PRIORITY_ENV

#: HAMi-core's priority when the variable is unset: a container asking it loses nothing.
DEFAULT_PRIORITY = "1"
#: The Warning Event's reason.
TASK_PRIORITY_UNSET = "TaskPriorityUnset"
#: Containers named in one note at most (a pod may have many; the Event's note is bounded).
_NAMED = 4


def _asked(container: Mapping[str, Any]) -> str | None:
    """The container's task priority as written, None when it asks none."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None
    for part in ("limits", "requests"):
        mapping = resources.get(part)
        if isinstance(mapping, Mapping) and HAMI_PRIORITY_KEY in mapping:
            return str(mapping[HAMI_PRIORITY_KEY])[:16]
    return None


def _has_variable(container: Mapping[str, Any]) -> bool:
    env = container.get("env")
    return isinstance(env, list) and any(
        isinstance(e, Mapping) and e.get("name") == HAMI_TASK_PRIORITY_ENV for e in env)


def unset_task_priority(pod: Mapping[str, Any]) -> str:
    """Why the task priorities the pod's containers ask will not hold (``""``: they hold, or
    none is asked)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return ""
    unset: list[str] = []
    for field_name in ("initContainers", "containers"):
        containers = spec.get(field_name)
        for container in containers if isinstance(containers, list) else ():
            if not isinstance(container, Mapping):
                continue
            asked = _asked(container)
            if asked not in (None, DEFAULT_PRIORITY) and not _has_variable(container):
                unset.append(f"{str(container.get('name'))[:63]!r} ({asked})")
    if not unset:
        return ""
    more = f" and {len(unset) - _NAMED} more" if len(unset) > _NAMED else ""
    return (f"{HAMI_PRIORITY_KEY} of container {', '.join(unset[:_NAMED])}{more} is not set: "
            f"the pod has no {HAMI_TASK_PRIORITY_ENV}, which the webhook writes, so it was "
            f"admitted without it and HAMi-core runs it at its default priority (1, low); "
            f"create the pod again where the webhook sees it to apply its priority")
