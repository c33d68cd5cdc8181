"""Kubernetes quantities, parsed exactly (tessera.quantity)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tessera.quantity import QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("raw", "value", "binary"),
    [
        ("256", Decimal(256), False),
        (5, Decimal(5), False),
        ("1k", Decimal(1000), False),
        ("250m", Decimal("0.25"), False),
        ("0.25", Decimal("0.25"), False),
        ("1Gi", Decimal(1024**3), True),
        ("2Ki", Decimal(2048), True),
        ("1e3", Decimal(1000), False),
        ("1E", Decimal(10**18), False),
        ("-5", Decimal(-5), False),
        (" 7 ", Decimal(7), False),
        (".5", Decimal("0.5"), False),
    ],
)
def test_quantities_parse_exactly(raw: object, value: Decimal, binary: bool) -> None:
    quantity = parse_quantity(raw)
    assert quantity.value == value
    assert quantity.binary_suffix is binary


@pytest.mark.parametrize("raw", ["", "5GB", "one", "1.2.3", "0x10", "1e", True, None, [], "9" * 80])
def test_things_that_are_not_quantities_are_refused(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(raw)


def test_a_fraction_is_never_rounded_through_float() -> None:
    assert parse_quantity("0.1").value * 3 == Decimal("0.3")
