from __future__ import annotations

import random

import pytest

from engine import EARLIEST, Position
from engine.position import position_order, positions_of, sorted_after, sorted_columns, sorted_positions


def test_positions_order_by_ledger_then_entry():
    assert Position(3, 9) < Position(4, -1) < Position(4, 0) < Position(4, 1)
    assert Position(0, -1) > EARLIEST


def test_text_form_is_ledger_colon_entry():
    assert str(Position(3, 5)) == "3:5"
    assert str(Position(3, -1)) == "3:-1"
    assert Position.parse("12:-1") == Position(12, -1)


def test_parse_rejects_text_without_colon():
    with pytest.raises(ValueError, match="ledger:entry"):
        Position.parse("35")


@pytest.mark.parametrize("n", [0, 1, 255, 256, 5_000])
def test_sorted_after_is_sorted_and_filtered(n: int) -> None:
    rng = random.Random(n)
    positions = {Position(rng.randrange(3, 9), rng.randrange(-1, 400)) for _ in range(n)}
    floor = Position(5, 200)
    assert sorted_after(positions, floor) == sorted(p for p in positions if p > floor)


@pytest.mark.parametrize("n", [40, 3000])
def test_position_order_with_a_leading_key_is_tuple_order(n: int) -> None:
    rng = random.Random(7)
    pairs = list({(rng.randrange(4), Position(rng.randrange(2**40), rng.randrange(9))) for _ in range(n)})
    order = position_order([p for _, p in pairs], [c for c, _ in pairs])
    assert [pairs[i] for i in order] == sorted(pairs)


@pytest.mark.parametrize("n", [0, 1, 255, 256, 5_000])
def test_sorted_columns_and_sorted_positions_are_tuple_order(n: int) -> None:
    rng = random.Random(n)
    positions = {Position(rng.randrange(2**40), rng.randrange(-1, 400)) for _ in range(n)}
    expected = sorted(positions)
    assert sorted_positions(positions) == expected
    ledgers, entries, order = sorted_columns(positions)
    assert list(zip(ledgers.tolist(), entries.tolist(), strict=True)) == expected
    assert [list(positions)[i] for i in order.tolist()] == expected


def test_positions_of_builds_the_same_positions_as_the_constructor() -> None:
    built = positions_of([3, 4, 4], [9, -1, 0])
    assert built == [Position(3, 9), Position(4, -1), Position(4, 0)]
    assert all(type(p) is Position for p in built)
    assert str(built[0]) == "3:9"
