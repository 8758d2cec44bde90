from __future__ import annotations

import numpy as np

from engine import AckRangeSet
from tests.engine.conftest import make_ledgers


def _set(*positions: tuple[int, int]) -> AckRangeSet:
    rs = AckRangeSet()
    for ledger, entry in positions:
        rs.add((ledger, entry))
    return rs


def test_runs_print_open_closed_per_ledger_like_internal_stats():
    rs = _set((3, 5), (3, 6), (3, 7), (4, 0), (4, 1), (4, 2))
    assert str(rs) == "[(3:4..3:7],(4:-1..4:2]]"
    assert str(AckRangeSet()) == "[]"


def test_contiguous_ack_across_a_ledger_boundary_is_two_ranges():
    rs = _set((2, 9), (3, 0))
    assert str(rs) == "[(2:8..2:9],(3:-1..3:0]]"
    assert rs.size() == 2


def test_size_counts_runs_not_entries():
    rs = _set((1, 2), (1, 5), (1, 7), (1, 8), (1, 9))
    assert rs.size() == 3
    assert rs.cardinality() == 5


def test_first_range_and_range_containing():
    rs = _set((5, 3), (5, 4), (5, 9), (6, 0))
    assert rs.first_range() == ((5, 2), (5, 4))
    assert rs.range_upper((5, 3)) == (5, 4)
    assert rs.range_upper((6, 0)) == (6, 0)
    assert AckRangeSet().first_range() is None


def test_remove_at_most_drops_lower_ledgers_and_a_prefix():
    rs = _set((1, 0), (2, 1), (2, 2), (2, 5), (3, 0))
    rs.remove_at_most((2, 2))
    assert str(rs) == "[(2:4..2:5],(3:-1..3:0]]"
    rs.remove_at_most((2, -1))
    assert str(rs) == "[(2:4..2:5],(3:-1..3:0]]"
    rs.remove_at_most((3, 0))
    assert not rs


def test_add_entries_is_a_bulk_union():
    rs = _set((7, 1))
    rs.add_entries(7, np.array([3, 2, 2, 9], dtype=np.int64))
    assert str(rs) == "[(7:0..7:3],(7:8..7:9]]"


def test_count_existing_ignores_acks_of_entries_that_were_never_published():
    rs = _set((10, 1), (11, 0), (10, 50))
    assert rs.count_existing(make_ledgers(3)) == 1
