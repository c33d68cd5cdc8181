"""Which pods the API server sends to the webhook: matchConditions built from the dialects (pure).

The MutatingWebhookConfiguration's ``matchConditions`` (CEL, admissionregistration.k8s.io/v1
``MatchCondition``; all must be true for the pod to be sent) have to name exactly the keys that
:mod:`tessera.dialects` reads under the webhook's configuration. A key they miss is a GPU pod
admitted without normalisation (our failurePolicy ``Fail`` never gets the chance to refuse it);
a key too many sends pods we ignore to a webhook that, when down, blocks them. So they are
generated here from :class:`~tessera.dialects.DialectConfig` (the same key sets
:func:`tessera.dialects.asks_for_gpu` uses) and:

- printed by ``tessera webhook [--dialects ...] --print-match-conditions`` for clusters that
  opt into more dialects or another domain;
- registered as is by the dev cluster (devcluster/services.py) for its webhook's flags;
- checked against manifests/base/webhook-configuration.yaml for the defaults (tests/deploy).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from typing import Any, Final

from tessera.dialects import DialectConfig
from tessera.vocabulary import ConfigError

MATCH_CONDITION_NAME: Final = "asks-for-gpu"
#: Resource names, label and annotation keys: nothing that needs quoting inside a CEL string.
_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_WIDTH: Final = 90


def _cel_list(keys: Iterable[str], indent: str) -> str:
    """``['a', 'b', ...]`` sorted, indented, wrapped to lines of at most 90 characters."""
    quoted = []
    for key in sorted(keys):
        if not _PLAIN_KEY.fullmatch(key):
            raise ConfigError(f"key {key!r} cannot be written into a matchCondition")
        quoted.append(f"'{key}'")
    body = textwrap.fill(", ".join(quoted), width=_WIDTH, initial_indent=indent + " ",
                         subsequent_indent=indent + " ", break_long_words=False,
                         break_on_hyphens=False)
    return f"{indent}[{body[len(indent) + 1:]}]"


def match_expression(dialects: DialectConfig) -> str:
    """One CEL expression, true for a pod carrying any key an enabled dialect reads: in a
    container's or init container's limits or requests, or among the pod's labels or
    annotations (``false`` when no dialect reads anything)."""
    clauses: list[str] = []
    if dialects.resource_keys:
        resources = _cel_list(dialects.resource_keys, "    ")
        clauses.append(
            "(object.spec.containers +\n"
            "    (has(object.spec.initContainers) ? object.spec.initContainers : [])\n"
            ").exists(c, has(c.resources) && (\n"
            "  (has(c.resources.limits) && c.resources.limits.exists(k, k in\n"
            f"{resources})) ||\n"
            "  (has(c.resources.requests) && c.resources.requests.exists(k, k in\n"
            f"{resources}))))"
        )
    for field, meta_keys in (("labels", dialects.label_keys),
                             ("annotations", dialects.annotation_keys)):
        if meta_keys:
            clauses.append(
                f"(has(object.metadata.{field}) && object.metadata.{field}.exists(k, k in\n"
                f"{_cel_list(meta_keys, '    ')}))"
            )
    return " ||\n".join(clauses) or "false"


def match_conditions(dialects: DialectConfig) -> list[dict[str, Any]]:
    """The ``matchConditions`` list of our one webhook."""
    return [{"name": MATCH_CONDITION_NAME, "expression": match_expression(dialects)}]


def match_conditions_yaml(dialects: DialectConfig) -> str:
    """:func:`match_conditions` as the YAML block of a webhook entry (a literal block, so the
    expression reads as written)."""
    expression = textwrap.indent(match_expression(dialects), "      ")
    return (
        "matchConditions:\n"
        f"  - name: {MATCH_CONDITION_NAME}\n"
        "    expression: |-\n"
        f"{expression}\n"
    )
