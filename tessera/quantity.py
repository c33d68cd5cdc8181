"""Kubernetes resource quantities, parsed exactly (``Decimal``, never float).

Why our own parser instead of ``kubernetes.utils.parse_quantity``: importing ``kubernetes.utils``
pulls in the whole generated client (slow start, and the house rule keeps ``kubernetes`` out of
the pure core). The grammar is small and fixed; it follows
``k8s.io/apimachinery/pkg/api/resource/quantity.go`` (``ParseQuantity``):

    <quantity> ::= <signedNumber><suffix>
    <suffix>   ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI> ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI> ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

Why decimal suffixes matter to us: the API server re-serialises every quantity in canonical form
before it reaches a webhook, so a user's ``"1000"`` arrives as ``"1k"`` and ``"0.25"`` as
``"250m"`` (``Quantity.CanonicalizeBytes`` in the same file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from tessera.vocabulary import TesseraError

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                   "E": 18}
_PATTERN: Final = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$"
)
#: Longer strings are not quantities anyone writes; refusing them bounds the work per value.
_MAX_LENGTH: Final = 64


class QuantityError(TesseraError):
    """A string that is not a Kubernetes quantity."""


@dataclass(frozen=True)
class Quantity:
    """A parsed quantity: its exact value and whether it used a binary (``Ki``…) suffix."""

    value: Decimal
    binary_suffix: bool

    @property
    def is_integer(self) -> bool:
        return self.value == self.value.to_integral_value()


def parse_quantity(raw: object) -> Quantity:
    """Parse a quantity as it appears in a pod (a string, or an int from hand-written JSON)."""
    if isinstance(raw, bool) or raw is None:
        raise QuantityError(f"{raw!r} is not a quantity")
    if isinstance(raw, int):
        return Quantity(Decimal(raw), binary_suffix=False)
    if isinstance(raw, float):
        text = repr(raw)
    elif isinstance(raw, str):
        text = raw.strip()
    else:
        raise QuantityError(f"{raw!r} is not a quantity")
    if len(text) > _MAX_LENGTH:
        raise QuantityError(f"{text[:20]!r}... is too long to be a quantity")
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(
            f"{text!r} is not a Kubernetes quantity (a number with an optional suffix "
            f"k, M, G, m or Ki, Mi, Gi)"
        )
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"{text!r} is not a number") from exc
    suffix = match["suffix"]
    if suffix in _BINARY:
        return Quantity(number * (Decimal(1024) ** _BINARY[suffix]), binary_suffix=True)
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{text!r}: exponent out of range")
        return Quantity(number.scaleb(exponent), binary_suffix=False)
    return Quantity(number.scaleb(_DECIMAL[suffix]), binary_suffix=False)
