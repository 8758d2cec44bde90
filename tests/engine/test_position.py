from __future__ import annotations

import pytest

from engine import EARLIEST, Position


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
