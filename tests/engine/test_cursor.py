"""Spec sections 1-2, rule by rule (ManagedCursorImpl semantics)."""

from __future__ import annotations

import pytest

from engine import Cursor, MessageId
from engine.ackset import mask_from_acked, mask_to_words
from engine.errors import AckBeyondLastPublished, MarkDeleteBeforeMarkDelete
from tests.engine.conftest import make_ledgers


def ack(cursor: Cursor, ledgers, *positions: tuple[int, int], enabled: bool = False) -> None:
    cursor.ack([MessageId(tuple(p)) for p in positions], ledgers, ledgers.last_position, enabled)


def batch(pos: tuple[int, int], size: int, acked: list[int]) -> MessageId:
    return MessageId(tuple(pos), mask_from_acked(size, acked), size)


# ---- subscribe ----------------------------------------------------------------------
def test_earliest_starts_before_the_first_entry_of_the_first_ledger():
    ledgers = make_ledgers(3, 3)
    cursor = Cursor.subscribe("Exclusive", "Earliest", ledgers, ledgers.last_position)
    assert cursor.mark_delete == (10, -1)
    assert cursor.backlog(ledgers) == 6


def test_latest_starts_on_the_last_entry():
    ledgers = make_ledgers(3, 3)
    cursor = Cursor.subscribe("Exclusive", "Latest", ledgers, ledgers.last_position)
    assert cursor.mark_delete == (11, 2)
    assert cursor.backlog(ledgers) == 0


# ---- individual acks (2.3) ----------------------------------------------------------
def test_ack_at_or_below_mark_delete_is_silently_ignored(earliest):
    ledgers = make_ledgers(5)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, (10, 0))
    ack(cursor, ledgers, (10, 0))
    ack(cursor, ledgers, (10, -1))
    assert cursor.mark_delete == (10, 0)
    assert cursor.backlog(ledgers) == 4
    assert cursor.individually_deleted_messages == "[]"


def test_ack_already_in_the_range_set_is_silent_and_counts_once(earliest):
    ledgers = make_ledgers(5)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, (10, 3))
    ack(cursor, ledgers, (10, 3))
    assert cursor.individually_deleted_messages == "[(10:2..10:3]]"
    assert cursor.backlog(ledgers) == 4


def test_ack_beyond_the_last_entry_fails_the_call_but_keeps_earlier_positions(earliest):
    ledgers = make_ledgers(5)
    cursor = earliest(ledgers)
    with pytest.raises(AckBeyondLastPublished):
        ack(cursor, ledgers, (10, 2), (10, 9), (10, 3))
    assert cursor.individually_deleted_messages == "[(10:1..10:2]]"


def test_ack_of_a_ledger_after_the_last_one_is_refused(earliest):
    ledgers = make_ledgers(5)
    cursor = earliest(ledgers)
    with pytest.raises(AckBeyondLastPublished):
        ack(cursor, ledgers, (11, 0))
    assert cursor.individually_deleted_messages == "[]"


def test_mark_delete_absorbs_contiguous_runs_across_ledgers(earliest):
    ledgers = make_ledgers(3, 3)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, (10, 1), (10, 2), (11, 0), (11, 1))
    assert cursor.individually_deleted_messages == "[(10:0..10:2],(11:-1..11:1]]"
    ack(cursor, ledgers, (10, 0))
    assert cursor.mark_delete == (11, 1)
    assert cursor.individually_deleted_messages == "[]"


def test_mark_delete_hops_over_ledgers_without_entries():
    ledgers = make_ledgers(2, 0, 0, 2)  # ledgers 11 and 12 never got entries
    cursor = Cursor.subscribe("Exclusive", "Earliest", ledgers, ledgers.last_position)
    ack(cursor, ledgers, (13, 0))
    assert cursor.mark_delete == (10, -1)
    ack(cursor, ledgers, (10, 0), (10, 1))
    assert cursor.mark_delete == (13, 0)


def test_first_range_right_after_the_end_of_the_mark_delete_ledger_advances(earliest):
    ledgers = make_ledgers(2, 2)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, (10, 0), (10, 1))
    assert cursor.mark_delete == (10, 1)
    ack(cursor, ledgers, (11, 0))  # zero entries in (10:1, 11:-1]
    assert cursor.mark_delete == (11, 0)


def test_a_hole_keeps_mark_delete_and_counts_in_the_backlog(earliest):
    ledgers = make_ledgers(10)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, (10, 3))
    ack(cursor, ledgers, (10, 2))
    ack(cursor, ledgers, (10, 1))
    assert cursor.backlog(ledgers) == 7
    ack(cursor, ledgers, (10, 0))  # V11 outOfOrderAcks
    assert cursor.mark_delete == (10, 3)
    assert cursor.backlog(ledgers) == 6


def test_non_contiguous_ranges_count_runs(earliest):
    ledgers = make_ledgers(20)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, *[(10, i) for i in (2, 5, 7, 8, 9)])  # V13
    assert cursor.individually_deleted_messages == "[(10:1..10:2],(10:4..10:5],(10:6..10:9]]"
    assert cursor.non_contiguous_deleted_ranges == 3
    assert cursor.backlog(ledgers) == 15


# ---- batch-index acks (1.3, 2.3 step 2.4, 2.5) -----------------------------------
def test_partial_batch_ack_is_ignored_when_batch_index_acks_are_disabled(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    cursor.ack([batch((10, 0), 4, [0])], ledgers, ledgers.last_position, False)
    assert cursor.batch_acks == {}
    assert cursor.mark_delete == (10, -1)
    assert cursor.backlog(ledgers) == 3


def test_individual_batch_acks_and_merge_their_unacked_bits(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    lac = ledgers.last_position
    cursor.ack([batch((10, 0), 8, [1, 2])], ledgers, lac, True)
    assert mask_to_words(cursor.batch_acks[(10, 0)].unacked) == [249]
    cursor.ack([batch((10, 0), 8, [5])], ledgers, lac, True)
    state = cursor.batch_acks[(10, 0)]
    assert mask_to_words(state.unacked) == [217]
    assert state.acked_count == 3
    assert cursor.mark_delete == (10, -1)


def test_batch_ack_that_empties_the_mask_deletes_the_entry(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    lac = ledgers.last_position
    cursor.ack([batch((10, 0), 4, [0, 1])], ledgers, lac, True)
    cursor.ack([batch((10, 0), 4, [2, 3])], ledgers, lac, True)
    assert cursor.batch_acks == {}
    assert cursor.mark_delete == (10, 0)


def test_plain_ack_of_a_partially_acked_batch_drops_its_state(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    lac = ledgers.last_position
    cursor.ack([batch((10, 1), 4, [0])], ledgers, lac, True)
    cursor.ack([MessageId((10, 1))], ledgers, lac, True)
    assert cursor.batch_acks == {}
    assert cursor.individually_deleted_messages == "[(10:0..10:1]]"


def test_cumulative_batch_ack_stops_before_the_entry_and_never_rolls_back(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    lac = ledgers.last_position
    cursor.ack_cumulative(batch((10, 1), 16, list(range(6))), ledgers, lac, True)
    assert cursor.mark_delete == (10, 0)
    assert mask_to_words(cursor.batch_acks[(10, 1)].unacked) == [65472]
    cursor.ack_cumulative(batch((10, 1), 16, list(range(10))), ledgers, lac, True)
    assert mask_to_words(cursor.batch_acks[(10, 1)].unacked) == [64512]
    cursor.ack_cumulative(batch((10, 1), 16, [0, 1]), ledgers, lac, True)  # smaller: kept
    assert mask_to_words(cursor.batch_acks[(10, 1)].unacked) == [64512]
    cursor.ack_cumulative(MessageId((10, 1)), ledgers, lac, True)
    assert cursor.mark_delete == (10, 1)
    assert cursor.batch_acks == {}


def test_cumulative_batch_ack_with_batch_index_disabled_moves_to_the_previous_entry(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    cursor.ack_cumulative(batch((10, 1), 4, [0, 1]), ledgers, ledgers.last_position, False)
    assert cursor.mark_delete == (10, 0)
    assert cursor.batch_acks == {}


def test_cumulative_batch_ack_on_entry_zero_moves_to_the_end_of_the_previous_ledger(earliest):
    ledgers = make_ledgers(2, 2)
    cursor = earliest(ledgers)
    cursor.ack_cumulative(batch((11, 0), 4, [0]), ledgers, ledgers.last_position, True)
    assert cursor.mark_delete == (10, 1)
    assert (11, 0) in cursor.batch_acks


# ---- cumulative acks (2.4, 2.5) ------------------------------------------------------
def test_cumulative_ack_equal_to_mark_delete_succeeds(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    cursor.ack_cumulative(MessageId((10, 1)), ledgers, ledgers.last_position, False)
    cursor.ack_cumulative(MessageId((10, 1)), ledgers, ledgers.last_position, False)  # V5
    assert cursor.mark_delete == (10, 1)


def test_cumulative_ack_below_mark_delete_fails_and_changes_nothing(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    cursor.ack_cumulative(MessageId((10, 1)), ledgers, ledgers.last_position, False)
    with pytest.raises(MarkDeleteBeforeMarkDelete):
        cursor.ack_cumulative(MessageId((10, 0)), ledgers, ledgers.last_position, False)  # V6
    assert cursor.mark_delete == (10, 1)


def test_cumulative_ack_beyond_the_last_entry_fails(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    with pytest.raises(AckBeyondLastPublished):
        cursor.ack_cumulative(MessageId((10, 7)), ledgers, ledgers.last_position, False)
    assert cursor.mark_delete == (10, -1)


def test_cumulative_ack_absorbs_the_individually_acked_run_after_it(earliest):
    ledgers = make_ledgers(5)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, (10, 3))
    cursor.ack_cumulative(MessageId((10, 2)), ledgers, ledgers.last_position, False)
    assert cursor.mark_delete == (10, 3)
    assert cursor.individually_deleted_messages == "[]"


def test_cumulative_ack_over_holes_drops_the_stale_ranges(earliest):
    ledgers = make_ledgers(5, 5)
    cursor = earliest(ledgers)
    ack(cursor, ledgers, (10, 1), (10, 3), (11, 1))
    cursor.ack_cumulative(MessageId((10, 4)), ledgers, ledgers.last_position, False)
    assert cursor.mark_delete == (10, 4)
    assert cursor.individually_deleted_messages == "[(11:0..11:1]]"
    assert cursor.backlog(ledgers) == 4


def test_cumulative_ack_drops_batch_state_at_or_below_the_new_mark_delete(earliest):
    ledgers = make_ledgers(5)
    cursor = earliest(ledgers)
    lac = ledgers.last_position
    cursor.ack([batch((10, 1), 4, [0]), batch((10, 3), 4, [0])], ledgers, lac, True)
    cursor.ack_cumulative(MessageId((10, 2)), ledgers, lac, True)
    assert list(cursor.batch_acks) == [(10, 3)]


# ---- backlog (2.7) ----------------------------------------------------------------------
def test_backlog_counts_entries_not_messages(earliest):
    ledgers = make_ledgers(3)
    cursor = earliest(ledgers)
    lac = ledgers.last_position
    cursor.ack([batch((10, 0), 10, [0, 1, 2])], ledgers, lac, True)
    assert cursor.backlog(ledgers) == 3  # a partially acked batch still counts once


def test_backlog_is_zero_at_or_past_the_last_entry():
    ledgers = make_ledgers(3)
    cursor = Cursor.subscribe("Exclusive", "Latest", ledgers, ledgers.last_position)
    assert cursor.backlog(ledgers) == 0
