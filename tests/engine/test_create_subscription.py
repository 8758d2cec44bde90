"""CREATE_SUBSCRIPTION (contract addition): the admin API made a subscription with no consumer.

``pulsar-admin topics create-subscription`` (``PUT /admin/v2/persistent/T/N/TOPIC/subscription/S``)
ends in ``PersistentTopicsBase.internalCreateSubscriptionForNonPartitionedTopic``: the topic's
``createSubscription`` at the last entry, then ``PersistentSubscription.resetCursor`` to the
message id asked for (latest by default). No consumer joins, so the subscription has no
dispatcher. Each test names the Pulsar method whose rule it pins.
"""

from __future__ import annotations

from engine import EngineSettings, EventBatch, PartitionState
from engine.subscription import NO_DISPATCHER, Subscription
from tests.engine.test_cursor_operations import Events, apply_cut_at, apply_events


def test_a_created_subscription_has_its_cursor_where_the_reset_put_it_and_no_dispatcher():
    """createSubscription then resetCursor: the cursor's mark-delete is the one the event names,
    nothing is acked above it, and ``getTypeString`` is "None" (no dispatcher until
    ``addConsumer``). The backlog counts every entry above it (``recoveredCursor``'s count of a
    new cursor, then ``internalResetCursor`` over no acks)."""
    events = Events().publish(3, 10).cursor("CREATE_SUBSCRIPTION", 3, 3)
    state, result = apply_events(events)
    cursor = state.cursors["s"]
    assert not result.rejects
    assert cursor.mark_delete == (3, 3)
    assert cursor.individually_deleted_messages == "[]"
    assert cursor.msg_backlog(state.ledgers) == cursor.backlog(state.ledgers) == 6
    assert state.subscriptions["s"].stats_type(cursor) == NO_DISPATCHER
    assert "s" in result.changed


def test_at_earliest_and_at_latest():
    """The admin API's ``earliest`` resets to before the first entry (``L:-1``), its ``latest``
    (the default) to the last entry; on a partition no message reached, ``L:-1`` of its ledger."""
    events = Events().publish(3, 5).cursor("CREATE_SUBSCRIPTION", 3, -1)
    state, _ = apply_events(events)
    assert state.cursors["s"].backlog(state.ledgers) == 5
    events = Events().publish(3, 5).cursor("CREATE_SUBSCRIPTION", 3, 4)
    state, _ = apply_events(events)
    assert state.cursors["s"].backlog(state.ledgers) == 0
    state, result = apply_events(Events().cursor("CREATE_SUBSCRIPTION", 7, -1))
    assert not result.rejects
    assert state.cursors["s"].mark_delete == (7, -1)


def test_the_first_consumer_gives_it_its_type_and_reads_from_the_created_cursor():
    """``addConsumer`` makes the dispatcher of the consumer's type, whatever the cursor held; the
    cursor keeps its position (the consumer's initial position applies only to a new cursor:
    ``ManagedLedgerImpl.asyncOpenCursor`` finds it open)."""
    events = Events().publish(3, 10).cursor("CREATE_SUBSCRIPTION", 3, 5).subscribe("Shared")
    events.dispatch(3, 6).ack((3, 7))
    state, result = apply_events(events)
    cursor = state.cursors["s"]
    sub = state.subscriptions["s"]
    assert not result.rejects
    assert sub.stats_type(cursor) == "Shared"
    assert cursor.mark_delete == (3, 5)
    assert cursor.individually_deleted_messages == "[(3:6..3:7]]"
    assert sub.consumers[1].unacked_messages == 1


def test_a_position_beyond_the_last_entry_is_refused_and_makes_nothing():
    """``resetCursor`` finds no such entry (``SubscriptionInvalidCursorPosition``, 412): the
    broker keeps the subscription it made at the last entry, but answers with an error, so the
    plugin emits nothing; an event that names one is refused."""
    state, result = apply_events(Events().publish(3, 2).cursor("CREATE_SUBSCRIPTION", 3, 5))
    assert [r.reason for r in result.rejects] == ["ack_beyond_last_published"]
    assert "s" not in state.cursors


def test_on_a_subscription_ackstate_holds_it_is_the_reset():
    """The broker refuses to make a subscription it holds (409), so one held here was joined by
    a consumer between ``createSubscription`` and ``resetCursor``; the reset forgets the acks
    above the mark-delete (``internalResetCursor``) and leaves the type."""
    events = Events().publish(3, 10).subscribe("Exclusive").ack((3, 0), (3, 4))
    events.cursor("CREATE_SUBSCRIPTION", 3, 2)
    state, result = apply_events(events)
    cursor = state.cursors["s"]
    assert not result.rejects
    assert cursor.mark_delete == (3, 2)
    assert cursor.individually_deleted_messages == "[]"
    assert state.subscriptions["s"].stats_type(cursor) == "Exclusive"


def test_it_survives_the_batch_boundary():
    """The missing dispatcher is state: a later batch still shows "None", and cutting the events
    at the creation gives the same subscription as one batch."""
    events = Events().publish(3, 4).cursor("CREATE_SUBSCRIPTION", 3, 1).publish(4, 2)
    whole, _ = apply_events(events)
    cut = apply_cut_at(events, "CREATE_SUBSCRIPTION")
    assert cut.cursors == whole.cursors
    sub = cut.subscriptions["s"]
    assert not sub.dispatcher
    again = Subscription.decode(sub.encode())
    assert not again.dispatcher


def test_a_subscription_deleted_and_created_again_starts_afresh():
    """An UNSUBSCRIBE deletes the cursor; the admin API's creation of the name makes a new one
    (``createSubscription`` finds none), with no consumer of the old one."""
    events = Events().publish(3, 6).subscribe("Shared").dispatch(3, 0).ack((3, 2))
    events.add("CLOSE_CONSUMER", subscription="s", consumer_id=1).add("UNSUBSCRIBE", subscription="s")
    events.cursor("CREATE_SUBSCRIPTION", 3, 0)
    state, result = apply_events(events)
    assert not result.rejects
    assert state.cursors["s"].individually_deleted_messages == "[]"
    assert state.subscriptions["s"].consumers == {}
    assert state.subscriptions["s"].stats_type(state.cursors["s"]) == NO_DISPATCHER


def test_on_a_non_persistent_topic_it_changes_nothing():
    """The admin API refuses it there ("Create subscription on non-persistent topic can only be
    done through client"); validation refuses the event, and the engine consumes it inertly."""
    topic = "non-persistent://t/ns/x"
    records = [
        {
            "seq": 0,
            "event_time": 1,
            "type": "CREATE_SUBSCRIPTION",
            "topic": topic,
            "partition": -1,
            "subscription": "s",
            "ledger_id": 0,
            "entry_id": 0,
        },
    ]
    state = PartitionState(topic, -1)
    result = state.apply(EventBatch.from_records(records), EngineSettings())
    assert not result.rejects
    assert "s" not in state.cursors
