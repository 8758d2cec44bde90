"""DELETE_TOPIC (contract addition): the broker deleted a topic partition.

``PersistentTopic.delete`` (the admin API's topic delete, or the inactive-topic GC's
``checkGC``) unsubscribes every subscription, then deletes the managed ledger
(``ManagedLedgerImpl.asyncDelete``): its ledgers and its cursors, the deduplication cursor
among them. A topic of the same name made afterwards is a new managed ledger. Each test names
the Pulsar method whose rule it pins.
"""

from __future__ import annotations

from typing import Any

from engine import EngineSettings, EventBatch, PartitionState
from engine.dedup import DUP, NOT_DUP
from tests.engine.test_cursor_operations import Events, apply_cut_at, apply_events
from tests.engine.test_dedup import Partition

DELETE: dict[str, Any] = {"type": "DELETE_TOPIC"}


def _delete(events: Events) -> Events:
    return events.add("DELETE_TOPIC")


def test_a_deleted_topic_has_no_subscription_ledger_or_producer():
    """``PersistentTopic.delete``: ``subscriptions.forEach(unsubscribe)``, then
    ``ledger.asyncDelete``: nothing of the topic is left but its name."""
    events = Events().publish(3, 6).subscribe("Shared").dispatch(3, 0).ack((3, 2))
    state, result = apply_events(_delete(events))
    assert not result.rejects
    assert state.cursors == {} and state.subscriptions == {}
    assert list(state.ledgers) == []
    assert result.unsubscribed == {"s"} and result.changed == set()


def test_a_topic_made_again_starts_afresh():
    """The new managed ledger has only its own ledgers: a subscription made on it from the
    earliest position counts none of the deleted topic's entries in its backlog, and an old
    subscription name is a new subscription (``ManagedLedgerImpl.asyncOpenCursor`` on the new
    ledger)."""
    events = Events().publish(3, 6).subscribe("Exclusive").ack((3, 0), (3, 3))
    _delete(events).publish(7, 4).subscribe("Failover", consumer_id=2).ack((7, 1), consumer_id=2)
    state, result = apply_events(events)
    assert not result.rejects
    assert list(state.ledgers) == [(7, 3)]
    cursor = state.cursors["s"]
    assert (cursor.sub_type, cursor.mark_delete) == ("Failover", (7, -1))
    assert cursor.individually_deleted_messages == "[(7:0..7:1]]"
    assert cursor.msg_backlog(state.ledgers) == 3
    assert list(state.subscriptions["s"].consumers) == [2]
    assert result.unsubscribed == {"s"} and "s" in result.changed


def test_a_producer_sends_its_sequence_ids_again_to_the_new_topic():
    """The deduplication state lives in the managed ledger (``MessageDeduplication``'s cursor
    and its snapshot), so it goes with it: sequence ids the deleted topic persisted are new to
    the topic made again."""
    t = Partition()
    t.send("p", 0)
    t.publish("p", 0, entry=0)
    assert t.send("p", 0).status == DUP
    t.apply(DELETE)
    assert t.state.producers.by_name == {}
    assert t.state.producers.dedup_enabled  # the setting the state was applied with stays
    assert t.send("p", 0).status == NOT_DUP


def test_a_delete_between_events_of_one_batch_equals_batches_split_there():
    events = Events().publish(3, 10).subscribe("Shared").dispatch(3, 0).dispatch(3, 1).ack((3, 1))
    _delete(events).publish(5, 3).subscribe("Shared", consumer_id=2).dispatch(5, 0, consumer_id=2)
    whole, result = apply_events(events)
    assert not result.rejects
    split = apply_cut_at(events, "DELETE_TOPIC")
    assert whole.cursors["s"].encode() == split.cursors["s"].encode()
    assert whole.subscriptions["s"].encode() == split.subscriptions["s"].encode()
    assert whole.ledgers.encode() == split.ledgers.encode()
    assert whole.last_seq == split.last_seq


def test_the_replay_fence_survives_the_delete():
    """The partition's events keep one order across topic objects: a replay of an event from
    before the delete is still stale after it."""
    events = Events().publish(3, 2).subscribe("Exclusive")
    state, _ = apply_events(_delete(events))
    replay = [events.records[1]]
    result = state.apply(EventBatch.from_records(replay), EngineSettings())
    assert [r.reason for r in result.rejects] == ["stale_seq"]
    assert list(state.ledgers) == []


def test_a_non_persistent_topic_loaded_again_has_no_subscription():
    """``NonPersistentTopic`` holds its subscriptions in memory only: the object a load makes
    (after a broker killed with ``kill -9``, which emitted no DELETE_TOPIC) has none."""
    events = Events()
    for record in events.subscribe("Shared").records:
        record["topic"] = "non-persistent://public/default/np"
    events.records.append({**events.records[0], "seq": 5, "type": "LOAD_TOPIC"})
    state = PartitionState("non-persistent://public/default/np", -1)
    result = state.apply(EventBatch.from_records(events.records), EngineSettings())
    assert not result.rejects
    assert state.cursors == {} and result.unsubscribed == {"s"}
