from __future__ import annotations

import random

import pytest

from engine import EARLIEST, parse_position, position_text
from engine.position import position_order, positions_of, sorted_after, sorted_columns, sorted_positions


def test_positions_order_by_ledger_then_entry():
    assert (3, 9) < (4, -1) < (4, 0) < (4, 1)
    assert EARLIEST < (0, -1)


def test_text_form_is_ledger_colon_entry():
    assert position_text((3, 5)) == "3:5"
    assert position_text((3, -1)) == "3:-1"
    assert parse_position("12:-1") == (12, -1)


def test_parse_rejects_text_without_colon():
    with pytest.raises(ValueError, match="ledger:entry"):
        parse_position("35")


@pytest.mark.parametrize("n", [0, 1, 255, 256, 5_000])
def test_sorted_after_is_sorted_and_filtered(n: int) -> None:
    rng = random.Random(n)
    positions = {(rng.randrange(3, 9), rng.randrange(-1, 400)) for _ in range(n)}
    floor = (5, 200)
    assert sorted_after(positions, floor) == sorted(p for p in positions if p > floor)


@pytest.mark.parametrize("n", [40, 3000])
def test_position_order_with_a_leading_key_is_tuple_order(n: int) -> None:
    rng = random.Random(7)
    pairs = list({(rng.randrange(4), (rng.randrange(2**40), rng.randrange(9))) for _ in range(n)})
    order = position_order([p for _, p in pairs], [c for c, _ in pairs])
    assert [pairs[i] for i in order] == sorted(pairs)


@pytest.mark.parametrize("n", [0, 1, 255, 256, 5_000])
def test_sorted_columns_and_sorted_positions_are_tuple_order(n: int) -> None:
    rng = random.Random(n)
    positions = {(rng.randrange(2**40), rng.randrange(-1, 400)) for _ in range(n)}
    expected = sorted(positions)
    assert sorted_positions(positions) == expected
    ledgers, entries, order = sorted_columns(positions)
    assert list(zip(ledgers.tolist(), entries.tolist(), strict=True)) == expected
    assert [list(positions)[i] for i in order.tolist()] == expected


def test_positions_of_builds_plain_tuples() -> None:
    """Plain tuples, not a tuple subclass (``engine.position``: four times cheaper to make)."""
    built = positions_of([3, 4, 4], [9, -1, 0])
    assert built == [(3, 9), (4, -1), (4, 0)]
    assert all(type(p) is tuple for p in built)
    assert position_text(built[0]) == "3:9"
