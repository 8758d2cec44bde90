"""The broker's own cursor operations: RESET_CURSOR and MARK_DELETE (contract additions).

A consumer's seek and the admin API's reset-cursor end in ``ManagedCursorImpl.internalResetCursor``
(mark-delete set, every ack above it forgotten); the admin API's skip, clear-backlog and
expire-messages in ``ManagedCursorImpl.asyncMarkDelete`` with no consumer (mark-delete moved
forwards as by a cumulative ack). Each test names the Pulsar method whose rule it pins.
"""

from __future__ import annotations

from typing import Any

from engine import EngineSettings, EventBatch, PartitionState

TOPIC = "persistent://t/ns/x"


class Events:
    """Contract records with increasing seq and time, for one subscription ``s``."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def add(self, type_: str, **fields: Any) -> Events:
        n = len(self.records)
        self.records.append(
            {"seq": n, "event_time": 1_000 + n, "type": type_, "topic": TOPIC, "partition": -1, **fields}
        )
        return self

    def publish(self, ledger: int, entries: int) -> Events:
        for e in range(entries):
            self.add("PUBLISH", ledger_id=ledger, entry_id=e)
        return self

    def subscribe(self, sub_type: str, consumer_id: int = 1) -> Events:
        return self.add(
            "SUBSCRIBE",
            subscription="s",
            consumer_id=consumer_id,
            consumer_name=f"c{consumer_id}",
            sub_type=sub_type,
            initial_position="Earliest",
        )

    def dispatch(self, ledger: int, entry: int, consumer_id: int = 1) -> Events:
        return self.add(
            "DISPATCH", subscription="s", consumer_id=consumer_id, ledger_id=ledger, entry_id=entry
        )

    def ack(self, *positions: tuple[int, int], consumer_id: int = 1) -> Events:
        ids = [{"ledger_id": ledger, "entry_id": entry} for ledger, entry in positions]
        return self.add(
            "ACK", subscription="s", consumer_id=consumer_id, ack_type="Individual", message_ids=ids
        )

    def cursor(self, type_: str, ledger: int, entry: int) -> Events:
        return self.add(type_, subscription="s", ledger_id=ledger, entry_id=entry)


def apply_events(events: Events) -> tuple[PartitionState, Any]:
    state = PartitionState(TOPIC, -1)
    result = state.apply(EventBatch.from_records(events.records), EngineSettings())
    return state, result


def apply_cut_at(events: Events, type_: str) -> PartitionState:
    """The state of ``events`` applied as two batches, the second from the first ``type_`` event."""
    cut = next(i for i, r in enumerate(events.records) if r["type"] == type_)
    state = PartitionState(TOPIC, -1)
    for part in (events.records[:cut], events.records[cut:]):
        state.apply(EventBatch.from_records(part), EngineSettings())
    return state


def test_reset_cursor_sets_mark_delete_and_forgets_every_ack_above_it():
    """internalResetCursor: ``markDeletePosition = newMarkDeletePosition`` and
    ``individualDeletedMessages.clear()``: the holes a seek leaves are gone, the backlog counts
    every entry above the new mark-delete again (the broker's figures for a seek to entry 3
    after acks of 0, 1, 2, 5, 7 and 9, tests/pulsar/scenarios.py ``cursor_operations``)."""
    events = Events().publish(3, 20).subscribe("Exclusive")
    events.ack((3, 0), (3, 1), (3, 2), (3, 5), (3, 7), (3, 9)).cursor("RESET_CURSOR", 3, 2)
    state, result = apply_events(events)
    cursor = state.cursors["s"]
    assert not result.rejects
    assert cursor.mark_delete == (3, 2)
    assert cursor.individually_deleted_messages == "[]"
    assert cursor.backlog(state.ledgers) == 17
    assert "s" in result.changed


def test_reset_cursor_moves_backwards_and_unacks_what_was_acked():
    """internalResetCursor goes backwards too: a seek to the first entry makes mark-delete
    ``L:-1`` (``ledger.getPreviousPosition`` of entry 0) and every entry unacked."""
    events = (
        Events()
        .publish(3, 5)
        .subscribe("Exclusive")
        .add(
            "ACK",
            subscription="s",
            consumer_id=1,
            ack_type="Cumulative",
            message_ids=[{"ledger_id": 3, "entry_id": 3}],
        )
    )
    events.cursor("RESET_CURSOR", 3, -1)
    state, _ = apply_events(events)
    assert state.cursors["s"].mark_delete == (3, -1)
    assert state.cursors["s"].backlog(state.ledgers) == 5


def test_reset_cursor_forgets_batch_index_acks():
    """internalResetCursor: ``batchDeletedIndexes.clear()``."""
    events = Events().publish(3, 4).subscribe("Shared").dispatch(3, 1)
    events.add(
        "ACK",
        subscription="s",
        consumer_id=1,
        ack_type="Individual",
        message_ids=[{"ledger_id": 3, "entry_id": 1, "batch_index": 0, "batch_size": 4, "ack_set": [14]}],
    )
    events.cursor("RESET_CURSOR", 3, 0)
    state = PartitionState(TOPIC, -1)
    state.apply(
        EventBatch.from_records(events.records),
        EngineSettings(acknowledgment_at_batch_index_level_enabled=True),
    )
    assert state.cursors["s"].batch_ack_rows() == []


def test_reset_cursor_beyond_the_last_entry_is_refused():
    events = Events().publish(3, 2).subscribe("Exclusive").cursor("RESET_CURSOR", 3, 5)
    state, result = apply_events(events)
    assert [r.reason for r in result.rejects] == ["ack_beyond_last_published"]
    assert state.cursors["s"].mark_delete == (3, -1)


def test_reset_cursor_keeps_consumers_and_their_pending_acks():
    """The broker disconnects the consumers before the reset (``disconnectActiveConsumers``),
    and the plugin emits each one's CLOSE_CONSUMER: the reset itself closes none, and a
    consumer's pending acks stay until its close hands them back."""
    events = Events().publish(3, 4).subscribe("Shared").dispatch(3, 0).dispatch(3, 1)
    events.cursor("RESET_CURSOR", 3, -1)
    state, _ = apply_events(events)
    sub = state.subscriptions["s"]
    assert list(sub.consumers) == [1]
    assert sub.consumers[1].unacked_messages == 2


def test_mark_delete_clears_the_backlog_and_keeps_pending_acks():
    """asyncClearBacklog = asyncMarkDelete(last entry): the ack holes go, the backlog is 0, and
    a Shared consumer still holds what it was sent (``Consumer.pendingAcks`` is not touched)."""
    events = Events().publish(3, 10).subscribe("Shared")
    for e in range(5):
        events.dispatch(3, e)
    events.ack((3, 1)).cursor("MARK_DELETE", 3, 9)
    state, result = apply_events(events)
    cursor = state.cursors["s"]
    assert not result.rejects
    assert cursor.mark_delete == (3, 9)
    assert cursor.individually_deleted_messages == "[]"
    assert cursor.backlog(state.ledgers) == 0
    assert state.subscriptions["s"].consumers[1].unacked_messages == 4


def test_mark_delete_absorbs_the_acked_run_after_it():
    """asyncSkipEntries -> asyncMarkDelete -> setAcknowledgedPosition: a skip that stops just
    before an acked run lands mark-delete at that run's end."""
    events = Events().publish(3, 10).subscribe("Exclusive").ack((3, 3), (3, 4)).cursor("MARK_DELETE", 3, 2)
    state, _ = apply_events(events)
    assert state.cursors["s"].mark_delete == (3, 4)
    assert state.cursors["s"].individually_deleted_messages == "[]"


def test_mark_delete_below_mark_delete_is_refused_and_changes_nothing():
    """setAcknowledgedPosition refuses going back (clearBacklog then reports it as done)."""
    events = Events().publish(3, 10).subscribe("Exclusive").ack((3, 0), (3, 1), (3, 5))
    events.cursor("MARK_DELETE", 3, 0)
    state, result = apply_events(events)
    assert [r.reason for r in result.rejects] == ["mark_delete_before_mark_delete"]
    assert state.cursors["s"].mark_delete == (3, 1)
    assert state.cursors["s"].individually_deleted_messages == "[(3:4..3:5]]"


def test_mark_delete_forgets_the_replays_it_passes():
    """The dispatcher drops a replay the cursor counts as deleted (asyncReplayEntries): after a
    skip past a closed consumer's entries, nothing at or below mark-delete is redelivered."""
    events = Events().publish(3, 6).subscribe("Shared").subscribe("Shared", consumer_id=2)
    events.dispatch(3, 0).dispatch(3, 4).add("CLOSE_CONSUMER", subscription="s", consumer_id=1)
    events.cursor("MARK_DELETE", 3, 2)
    state, _ = apply_events(events)
    assert list(state.subscriptions["s"].redeliveries) == [(3, 4)]


def test_cursor_operations_on_an_unknown_subscription_are_refused():
    events = Events().publish(3, 2).cursor("MARK_DELETE", 3, 1).cursor("RESET_CURSOR", 3, 0)
    state, result = apply_events(events)
    assert [r.reason for r in result.rejects] == ["unknown_subscription"] * 2
    assert "s" not in state.cursors


def test_cursor_operations_change_nothing_on_a_non_persistent_topic():
    """A non-persistent subscription has no cursor to move (NonPersistentSubscription)."""
    records = Events().subscribe("Shared").cursor("RESET_CURSOR", 0, 0).records
    for record in records:
        record["topic"] = "non-persistent://t/ns/x"
    state = PartitionState("non-persistent://t/ns/x", -1)
    result = state.apply(EventBatch.from_records(records), EngineSettings())
    assert not result.rejects
    assert result.applied == 2


def test_reset_cursor_leaves_the_brokers_backlog_short_by_the_acks_it_forgot():
    """getNumberOfEntriesInBacklog(isPrecise=false), what /stats reports: entries added minus
    messagesConsumedCounter. internalResetCursor keeps the forgotten individual acks counted, so
    the broker's msgBacklog after a reset is the precise one minus the acks held before it (on
    Pulsar 4.0.7, tests/pulsar/scenarios.py ``cursor_operations``: 14 of 17 after a seek to the
    mark-delete over three holes, 9 of 10 after a seek forwards past one)."""
    events = Events().publish(3, 20).subscribe("Exclusive")
    events.ack((3, 0), (3, 1), (3, 2), (3, 5), (3, 7), (3, 9)).cursor("RESET_CURSOR", 3, 2)
    state, _ = apply_events(events)
    cursor = state.cursors["s"]
    assert cursor.backlog(state.ledgers) == 17
    assert cursor.consumed_overcount == 3
    assert cursor.msg_backlog(state.ledgers) == 14

    forwards = Events().publish(3, 20).subscribe("Shared").ack((3, 0), (3, 3)).cursor("RESET_CURSOR", 3, 9)
    state, _ = apply_events(forwards)
    assert state.cursors["s"].backlog(state.ledgers) == 10
    assert state.cursors["s"].msg_backlog(state.ledgers) == 9


def test_the_overcount_stays_through_acks_and_gives_way_to_the_precise_backlog_below_zero():
    """Acks and mark-deletes move the counter and the precise backlog alike; once the counter's
    backlog would be negative the broker reports the precise one."""
    events = Events().publish(3, 6).subscribe("Exclusive").ack((3, 1), (3, 3)).cursor("RESET_CURSOR", 3, -1)
    events.ack((3, 4))
    state, _ = apply_events(events)
    cursor = state.cursors["s"]
    assert (cursor.backlog(state.ledgers), cursor.msg_backlog(state.ledgers)) == (5, 3)
    events.cursor("MARK_DELETE", 3, 4)
    state, _ = apply_events(events)
    cursor = state.cursors["s"]
    assert (cursor.backlog(state.ledgers), cursor.msg_backlog(state.ledgers)) == (1, 1)


def test_a_cursor_with_an_overcount_round_trips_and_one_without_keeps_its_bytes():
    from engine import Cursor

    plain = Cursor("Exclusive", (3, 4))
    assert plain.encode()[3] == 1  # version 1, as before the overcount existed
    assert Cursor.decode(plain.encode()) == plain
    reset = Cursor("Shared", (3, 4))
    reset.consumed_overcount = 7
    assert reset.encode()[3] == 2
    back = Cursor.decode(reset.encode())
    assert back == reset and back.consumed_overcount == 7


def test_a_mark_delete_before_the_first_entry_of_a_ledger_with_no_entry_is_accepted():
    """The broker names the place of a cursor on a partition no message reached ``L:-1``
    (the ledger it opened); clear-backlog mark-deletes there (asyncClearBacklog on an empty
    ledger). Nothing lies between the last known entry and it."""
    events = Events().subscribe("Exclusive").cursor("MARK_DELETE", 25, -1)
    state, result = apply_events(events)
    assert not result.rejects
    assert state.cursors["s"].mark_delete == (25, -1)
    events.publish(25, 2)
    state, _ = apply_events(events)
    assert state.cursors["s"].backlog(state.ledgers) == 2


def test_unsubscribe_deletes_the_subscription_with_its_consumers():
    """PersistentSubscription.delete: the cursor, the consumers, their pending acks and the
    replays go; the batch reports the name (``ApplyResult.unsubscribed``)."""
    events = Events().publish(3, 6).subscribe("Shared").dispatch(3, 0).ack((3, 2))
    events.add("UNSUBSCRIBE", subscription="s")
    state, result = apply_events(events)
    assert "s" not in state.cursors and "s" not in state.subscriptions
    assert result.unsubscribed == {"s"} and "s" not in result.changed
    assert not result.rejects


def test_a_subscribe_after_an_unsubscribe_makes_a_new_subscription():
    """The broker creates the cursor afresh (``Latest`` by default, not where the deleted one was)."""
    events = Events().publish(3, 6).subscribe("Exclusive").ack((3, 0), (3, 2))
    events.add("UNSUBSCRIBE", subscription="s").add(
        "SUBSCRIBE", subscription="s", consumer_id=7, consumer_name="c7", sub_type="Shared"
    )
    state, result = apply_events(events)
    cursor = state.cursors["s"]
    assert cursor.sub_type == "Shared" and cursor.mark_delete == (3, 5)
    assert list(state.subscriptions["s"].consumers) == [7]
    assert result.unsubscribed == {"s"} and "s" in result.changed


def test_unsubscribe_of_an_unknown_subscription_is_refused():
    _, result = apply_events(Events().publish(3, 1).add("UNSUBSCRIBE", subscription="s"))
    assert [r.reason for r in result.rejects] == ["unknown_subscription"]
    assert not result.unsubscribed


def _mark_delete_beside_the_acks_that_moved_it(sub_type: str, mark_delete_first: bool) -> PartitionState:
    """Acks that move mark-delete to 3:2, with the MARK_DELETE of 3:2 the plugin's sweep read
    before or after the last of them (an ack takes effect before its hook runs)."""
    events = Events().publish(3, 10).subscribe(sub_type)
    for e in range(6):
        events.dispatch(3, e)
    events.ack((3, 1), (3, 2))
    if mark_delete_first:
        events.cursor("MARK_DELETE", 3, 2)
    if sub_type == "Shared":
        events.ack((3, 0))
    else:
        ids = [{"ledger_id": 3, "entry_id": 2}]
        events.add("ACK", subscription="s", consumer_id=1, ack_type="Cumulative", message_ids=ids)
    if not mark_delete_first:
        events.cursor("MARK_DELETE", 3, 2)
    events.ack((3, 4))
    state, result = apply_events(events)
    assert not result.rejects
    return state


def test_a_mark_delete_read_before_the_ack_that_made_it_gives_the_same_state():
    """setAcknowledgedPosition accepts the current mark-delete (``newMarkDeletePosition``
    equal to ``markDeletePosition``), asyncDelete skips positions at or below it, and
    ``Consumer.removePendingAcks`` takes the ack's entries out of the consumer's pending acks
    whatever the cursor holds: a MARK_DELETE of the position the acks reach, just before or
    after them, changes nothing (the plugin's mark-delete sweep relies on it)."""
    for sub_type in ("Shared", "Exclusive"):
        first = _mark_delete_beside_the_acks_that_moved_it(sub_type, mark_delete_first=True)
        after = _mark_delete_beside_the_acks_that_moved_it(sub_type, mark_delete_first=False)
        assert first.cursors["s"].mark_delete == (3, 2)
        assert first.cursors["s"].encode() == after.cursors["s"].encode()
        assert first.subscriptions["s"].encode() == after.subscriptions["s"].encode()
    assert first.subscriptions["s"].consumers[1].unacked_messages == 0  # Exclusive: none pending
    shared = _mark_delete_beside_the_acks_that_moved_it("Shared", mark_delete_first=True)
    assert shared.subscriptions["s"].consumers[1].unacked_messages == 2
