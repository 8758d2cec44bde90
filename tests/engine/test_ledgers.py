from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import EARLIEST, CorruptState, Ledgers, Position
from tests.engine.conftest import make_ledgers


def test_last_position_is_the_last_published_entry():
    assert Ledgers().last_position == EARLIEST
    assert make_ledgers(3, 2).last_position == (11, 1)


def test_next_valid_crosses_ledgers_and_ends_after_the_last_entry():
    ledgers = make_ledgers(3, 0, 2, first_id=10)  # ledger 11 never got an entry: it does not exist
    assert ledgers.next_valid((10, 1)) == (10, 2)
    assert ledgers.next_valid((10, 2)) == (12, 0)
    assert ledgers.next_valid((10, -1)) == (10, 0)
    assert ledgers.next_valid((12, 1)) == (12, 2)


def test_previous_of_entry_zero_is_the_last_entry_of_the_nearest_earlier_ledger():
    ledgers = make_ledgers(3, 0, 2)
    assert ledgers.previous((12, 0)) == (10, 2)
    assert ledgers.previous((12, 1)) == (12, 0)
    assert ledgers.previous((10, 0)) == (10, -1)


def test_count_between_is_open_closed_and_skips_missing_ledgers():
    ledgers = make_ledgers(3, 0, 2)
    assert ledgers.count_between((10, -1), (12, 1)) == 5
    assert ledgers.count_between((10, 2), (12, -1)) == 0
    assert ledgers.count_between((10, 0), (10, 0)) == 0
    assert ledgers.count_between(EARLIEST, (10, 1)) == 2


def test_encoding_round_trips_and_rejects_garbage():
    ledgers = make_ledgers(3, 1, 7)
    assert Ledgers.decode(ledgers.encode()) == ledgers
    assert Ledgers.decode(b"") == Ledgers()
    with pytest.raises(CorruptState):
        Ledgers.decode(b"XYZ" + ledgers.encode()[3:])
    with pytest.raises(CorruptState):
        Ledgers.decode(ledgers.encode()[:-1])


@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=4),
    st.tuples(st.integers(8, 15), st.integers(-1, 6)),
    st.tuples(st.integers(8, 15), st.integers(-1, 6)),
)
def test_has_entries_between_is_a_positive_count_between(lasts, lower, upper):
    """The shortcut ``Cursor._auto_advance`` asks after every ack answers as the count does."""
    ledgers = Ledgers()
    for k, last in enumerate(lasts):
        ledgers.publish((10 + 2 * k, last))  # every other ledger id never gets an entry
    lower_open, upper_closed = tuple(lower), tuple(upper)
    expected = ledgers.count_between(lower_open, upper_closed) > 0
    assert ledgers.has_entries_between(lower_open, upper_closed) == expected


def test_every_truncation_of_an_encoding_is_corrupt_state():
    data = make_ledgers(3, 1, 7).encode()
    for cut in range(1, len(data)):
        with pytest.raises(CorruptState):
            Ledgers.decode(data[:cut])


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=30),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), max_size=30),
)
def test_publish_run_is_publish_of_each_position(before, after):
    """``publish_run`` (a batch's accepted publishes at once) leaves what ``publish`` per
    position leaves; the positions ascend from the last one, so the run may extend its ledger."""

    def ascending(steps: list[tuple[int, int]], start: Position) -> list[Position]:
        out, (ledger, entry) = [], start
        for new_ledger, step in steps:
            ledger, entry = (ledger, entry + step) if new_ledger == 0 else (ledger + new_ledger, step - 1)
            out.append((ledger, entry))
        return out

    first = ascending(before, (10, -1))
    one_by_one, at_once = Ledgers(), Ledgers()
    for pos in first:
        one_by_one.publish(pos)
        at_once.publish(pos)
    more = ascending(after, first[-1] if first else (10, -1))
    for pos in more:
        one_by_one.publish(pos)
    at_once.publish_run(
        np.asarray([p[0] for p in more], dtype=np.int64),
        np.asarray([p[1] for p in more], dtype=np.int64),
    )
    assert at_once == one_by_one
    assert at_once.total_entries == one_by_one.total_entries
