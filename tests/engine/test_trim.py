"""Ledger trimming: a topic's retention deletes whole ledgers (ManagedLedgerImpl.internalTrimLedgers).

Pulsar first moves every cursor that is behind the deleted ledgers onto their last entry
(``advanceCursorsIfNecessary`` -> ``asyncMarkDelete(highestPositionToDelete)``), then drops the
ledgers (``doDeleteLedgers``); the ledger being written to is never deleted.
"""

from __future__ import annotations

from engine import (
    Cursor,
    EngineSettings,
    EventBatch,
    Ledgers,
    MessageId,
    PartitionState,
    position_text,
)
from engine.subscription import Subscription
from tests.engine.conftest import make_ledgers


def _acked(ledgers: Ledgers, *positions: tuple[int, int], sub_type: str = "Exclusive") -> Cursor:
    cursor = Cursor.subscribe(sub_type, "Earliest", ledgers, ledgers.last_position)
    cursor.ack([MessageId(tuple(p)) for p in positions], ledgers, ledgers.last_position, True)
    return cursor


def test_trim_before_drops_lower_ledgers_and_keeps_counts_consistent():
    ledgers = make_ledgers(5, 3, 4)  # ledgers 10 (0..4), 11 (0..2), 12 (0..3)
    assert ledgers.trim_before(12) == [(10, 4), (11, 2)]
    assert list(ledgers) == [(12, 3)]
    assert ledgers.total_entries == 4
    assert ledgers.first_ledger_id == 12
    assert ledgers.next_valid((11, 2)) == (12, 0)
    assert ledgers.count_between((11, 2), (12, 3)) == 4
    assert ledgers.trim_before(12) == []  # idempotent


def test_trim_before_never_deletes_the_last_ledger():
    """currentLedger can not be deleted: it holds the last confirmed entry."""
    ledgers = make_ledgers(2, 2)
    assert ledgers.trim_before(99) == [(10, 1)]
    assert list(ledgers) == [(11, 1)]
    assert ledgers.last_position == (11, 1)
    assert make_ledgers(3).trim_before(99) == []
    assert Ledgers().trim_before(5) == []


def test_cursor_behind_the_deleted_ledgers_moves_to_their_last_entry_and_absorbs_acked_runs():
    ledgers = make_ledgers(10, 5, 10)  # 10 (0..9), 11 (0..4), 12 (0..9)
    # holes at 10:0.., acked 10:5, 11:1, 12:0, 12:1, 12:3
    cursor = _acked(ledgers, (10, 5), (11, 1), (12, 0), (12, 1), (12, 3))
    assert position_text(cursor.mark_delete) == "10:-1"
    state = PartitionState("t", 0, ledgers, {"sub": cursor})

    result = state.trim_ledgers(12)

    assert result.removed == [(10, 9), (11, 4)]
    assert result.entries_removed == 15
    assert result.advanced == {"sub"}
    # asyncMarkDelete(11:4) extends over the acked run 12:0..12:1 that follows it
    assert cursor.mark_delete == (12, 1)
    assert cursor.individually_deleted_messages == "[(12:2..12:3]]"
    assert cursor.backlog(state.ledgers) == 7  # 12:2..12:9 minus the acked 12:3
    assert cursor.non_contiguous_deleted_ranges == 1


def test_cursor_behind_the_deleted_ledgers_stops_on_their_last_entry_without_a_following_run():
    ledgers = make_ledgers(4, 4)
    cursor = _acked(ledgers, (10, 2), (11, 3))
    state = PartitionState("t", 0, ledgers, {"sub": cursor})
    state.trim_ledgers(11)
    assert cursor.mark_delete == (10, 3)  # Pulsar prints the deleted ledger's last entry
    assert cursor.individually_deleted_messages == "[(11:2..11:3]]"
    assert cursor.backlog(state.ledgers) == 3
    # a broker restart would recover it as 11:-1 (recoveredCursor only moves L:-1 positions):
    # the same place, no entry lies between them
    assert state.ledgers.next_valid(cursor.mark_delete) == (11, 0)


def test_cursor_already_past_the_deleted_ledgers_is_left_alone():
    ledgers = make_ledgers(4, 4)
    ahead = _acked(ledgers, (10, 0), (10, 1), (10, 2), (10, 3), (11, 0), (11, 2))
    assert ahead.mark_delete == (11, 0)
    before = Cursor.decode(ahead.encode())
    state = PartitionState("t", 0, ledgers, {"ahead": ahead})
    result = state.trim_ledgers(11)
    assert result.removed == [(10, 3)]
    assert result.advanced == set()
    assert ahead == before


def test_batch_state_in_the_deleted_ledgers_is_dropped():
    ledgers = make_ledgers(4, 4)
    cursor = Cursor.subscribe("Exclusive", "Earliest", ledgers, ledgers.last_position)
    cursor.ack([MessageId((10, 2), ack_set=0b1100, batch_size=4)], ledgers, ledgers.last_position, True)
    cursor.ack([MessageId((11, 1), ack_set=0b0011, batch_size=4)], ledgers, ledgers.last_position, True)
    assert len(cursor.batch_acks) == 2
    PartitionState("t", 0, ledgers, {"sub": cursor}).trim_ledgers(11)
    assert sorted(cursor.batch_acks) == [(11, 1)]


def test_trim_is_idempotent_and_survives_the_encoding():
    ledgers = make_ledgers(6, 6, 6)
    cursor = _acked(ledgers, (10, 3), (11, 0), (12, 4))
    state = PartitionState("t", 0, ledgers, {"sub": cursor})
    state.trim_ledgers(12)
    encoded_cursor, encoded_ledgers = cursor.encode(), state.ledgers.encode()
    again = state.trim_ledgers(12)
    assert (again.removed, again.advanced) == ([], set())
    assert Cursor.decode(encoded_cursor) == cursor
    assert Ledgers.decode(encoded_ledgers) == state.ledgers


def test_trimming_beyond_the_last_ledger_keeps_it_and_moves_every_cursor_behind_it():
    ledgers = make_ledgers(3, 3)
    cursor = _acked(ledgers, (11, 2))
    state = PartitionState("t", 0, ledgers, {"sub": cursor})
    result = state.trim_ledgers(1_000)
    assert result.removed == [(10, 2)]
    assert cursor.mark_delete == (10, 2)
    assert state.ledgers.last_position == (11, 2)


def test_events_after_a_trim_apply_to_the_trimmed_state():
    """After the trim the partition goes on: a new Earliest subscription starts at the first
    retained ledger, acks there move mark-delete as before, publishes extend the ledgers."""
    ledgers = make_ledgers(3, 3)
    cursor = _acked(ledgers, (11, 1))
    state = PartitionState("t", 0, ledgers, {"old": cursor}, last_seq=10)
    state.trim_ledgers(11)
    records = [
        {
            "seq": 11,
            "type": "SUBSCRIBE",
            "topic": "t",
            "subscription": "new",
            "consumer_id": 1,
            "sub_type": "Shared",
            "initial_position": "Earliest",
        },
        # acks count only from a connected consumer (ServerCnx drops the others)
        {
            "seq": 12,
            "type": "SUBSCRIBE",
            "topic": "t",
            "subscription": "old",
            "consumer_id": 2,
            "sub_type": "Shared",
        },
        {
            "seq": 13,
            "type": "ACK",
            "topic": "t",
            "subscription": "old",
            "consumer_id": 2,
            "ack_type": "Individual",
            "message_ids": [{"ledger_id": 11, "entry_id": 0}],
        },
        {"seq": 14, "type": "PUBLISH", "topic": "t", "ledger_id": 12, "entry_id": 0},
    ]
    result = state.apply(EventBatch.from_records(records), EngineSettings())
    assert result.rejects == []
    assert state.cursors["new"].mark_delete == (11, -1)
    assert cursor.mark_delete == (11, 1)
    assert cursor.backlog(state.ledgers) == 2  # 11:2 and 12:0
    assert list(state.ledgers) == [(11, 2), (12, 0)]


def _shared_consumer_state() -> PartitionState:
    """A Shared subscription over ledgers 10 (0..2) and 11 (0..2) whose consumer holds 10:0,
    10:1 and 11:0 after REDELIVER of 10:0 and 11:1 and a NACK of 10:1 (delay not yet over)."""
    state = PartitionState("t", 0, make_ledgers(3, 3))

    def ids(*positions: tuple[int, int]) -> list[dict]:
        return [{"ledger_id": lid, "entry_id": eid} for lid, eid in positions]

    common = {"topic": "t", "subscription": "s", "consumer_id": 1}
    records = [
        {"seq": 1, "type": "SUBSCRIBE", "sub_type": "Shared", "initial_position": "Earliest", **common}
    ]
    for seq, (lid, eid) in enumerate(((10, 0), (10, 1), (10, 2), (11, 0), (11, 1)), start=2):
        records.append({"seq": seq, "type": "DISPATCH", "ledger_id": lid, "entry_id": eid, **common})
    records += [
        {"seq": 7, "type": "REDELIVER", "message_ids": ids((10, 0), (11, 1)), **common},
        {"seq": 8, "type": "NACK", "message_ids": ids((10, 1)), **common},
    ]
    batch = EventBatch.from_records([{"event_time": 1_000 + r["seq"], **r} for r in records])
    result = state.apply(batch, EngineSettings())
    assert not result.rejects, result.rejects
    return state


def test_trim_forgets_replays_in_deleted_ledgers_and_keeps_pending_acks():
    """The dispatcher's next replay read skips deleted positions (asyncReplayEntries) and drops
    them from the replay set; Consumer.pendingAcks keeps what the consumer holds until it acks."""
    state = _shared_consumer_state()
    sub = state.subscriptions["s"]
    sub.changes.redeliveries.clear()
    assert sorted(map(position_text, sub.redeliveries)) == ["10:0", "10:1", "11:1"]
    assert sorted(sub.tracker.items()) == [((10, 0), 1), ((11, 1), 1)]

    result = state.trim_ledgers(11)
    assert result.advanced == {"s"}
    assert state.cursors["s"].mark_delete == (10, 2)
    assert sorted(map(position_text, sub.redeliveries)) == ["10:1", "11:1"]  # the scheduled nack stays
    assert sub.redeliveries[(10, 1)].scheduled
    assert sub.changes.redeliveries == {(10, 0): None}
    assert sorted(sub.tracker) == [(11, 1)]
    assert sorted(map(position_text, sub.consumers[1].pending)) == ["10:1", "10:2", "11:0"]
    assert sub.consumers[1].unacked_messages == 3
    assert Subscription.decode(sub.encode()).encode() == sub.encode()


def test_after_a_trim_the_held_entries_are_acked_and_the_nack_replays_nothing():
    state = _shared_consumer_state()
    state.trim_ledgers(11)
    common = {"topic": "t", "subscription": "s", "consumer_id": 1}
    records = [
        {
            "seq": 9,
            "type": "ACK",
            "ack_type": "Individual",
            "message_ids": [{"ledger_id": 10, "entry_id": 2}],
            **common,
        },
        # long after the nack delay: the nack fires on the clock, but 10:1 is deleted
        {
            "seq": 10,
            "type": "ACK",
            "ack_type": "Individual",
            "message_ids": [{"ledger_id": 11, "entry_id": 0}],
            **common,
        },
    ]
    batch = EventBatch.from_records([{"event_time": 100_000 + r["seq"], **r} for r in records])
    assert not state.apply(batch, EngineSettings()).rejects
    sub = state.subscriptions["s"]
    assert sub.consumers[1].pending == {}
    assert sub.consumers[1].unacked_messages == 0
    assert sorted(map(position_text, sub.redeliveries)) == ["11:1"]
