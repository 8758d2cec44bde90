from __future__ import annotations

import random

import pytest

from engine import EARLIEST, Position
from engine.position import position_order, sorted_after


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
