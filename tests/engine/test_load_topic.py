"""LOAD_TOPIC (contract addition): the broker loaded a topic partition afresh.

A broker that starts, or takes a topic over, makes a new topic object
(``BrokerService.loadOrCreatePersistentTopic``): its subscriptions have no consumer yet, and each
cursor is recovered from what it persisted (``ManagedCursorImpl.recoveredCursor``), which counts
the consumed entries afresh from the precise backlog. Each test names the Pulsar method whose
rule it pins.
"""

from __future__ import annotations

from engine import EngineSettings, EventBatch
from engine.subscription import Subscription
from tests.engine.test_cursor_operations import Events, apply_cut_at, apply_events


def _load(events: Events) -> Events:
    return events.add("LOAD_TOPIC")


def test_a_load_counts_the_backlog_afresh_after_a_reset():
    """recoveredCursor: ``messagesConsumedCounter = -getNumberOfEntries(Range.openClosed(
    position, ledger.getLastPosition()))``, after the individual acks were recovered: the
    reported backlog is the precise one again, where a reset had left it short by the acks it
    forgot (``internalResetCursor``)."""
    events = Events().publish(3, 20).subscribe("Exclusive")
    events.ack((3, 0), (3, 1), (3, 2), (3, 5), (3, 7), (3, 9)).cursor("RESET_CURSOR", 3, 2)
    state, _ = apply_events(events)
    assert state.cursors["s"].msg_backlog(state.ledgers) == 14
    state, result = apply_events(_load(events))
    cursor = state.cursors["s"]
    assert not result.rejects
    assert cursor.consumed_overcount == 0
    assert cursor.msg_backlog(state.ledgers) == cursor.backlog(state.ledgers) == 17
    assert "s" in result.changed


def test_consumers_a_killed_broker_never_closed_are_gone_and_a_new_one_is_admitted():
    """The new topic's subscription has no consumer (``PersistentSubscription`` is made anew, its
    dispatcher with no consumer): the Exclusive consumer the killed broker held does not
    refuse the client's reconnect (``Consumer``'s ``ConsumerBusyException`` would)."""
    events = Events().publish(3, 6).subscribe("Exclusive").dispatch(3, 0).dispatch(3, 1)
    _load(events).subscribe("Exclusive", consumer_id=2).dispatch(3, 0, consumer_id=2)
    state, result = apply_events(events)
    assert not result.rejects
    assert list(state.subscriptions["s"].consumers) == [2]


def test_a_shared_subscription_keeps_no_pending_ack_and_no_replay():
    """The consumers' pending acks (``Consumer.pendingAcks``) and the dispatcher's replay set
    (``redeliveryMessages``) belong to the old topic object: after a load nothing is unacked
    and nothing is waiting for a replay."""
    events = Events().publish(3, 6).subscribe("Shared").subscribe("Shared", consumer_id=2)
    events.dispatch(3, 0).dispatch(3, 1).dispatch(3, 2, consumer_id=2)
    events.add("CLOSE_CONSUMER", subscription="s", consumer_id=1)  # 3:0, 3:1 to the replay set
    state, _ = apply_events(events)
    assert list(state.subscriptions["s"].redeliveries) == [(3, 0), (3, 1)]
    state, result = apply_events(_load(events))
    sub = state.subscriptions["s"]
    assert not result.rejects
    assert sub.consumers == {} and sub.unacked_messages() == 0
    assert dict(sub.redeliveries) == {}
    assert state.cursors["s"].backlog(state.ledgers) == 6  # the cursor keeps what it persisted


def test_the_active_consumer_goes_once():
    """A Failover subscription's active consumer leaves with the rest, in one change to none:
    the new topic never picked among the consumers it never had."""
    events = Events().publish(3, 2).subscribe("Failover").subscribe("Failover", consumer_id=2)
    state, _ = apply_events(_load(events))
    sub = state.subscriptions["s"]
    assert sub.active is None
    assert [(c.previous, c.new) for c in sub.changes.active][-1:] == [((1, "c1"), None)]
    assert len(sub.changes.active) == 2  # the pick when c1 subscribed, and this one


def test_a_load_between_events_of_one_batch_equals_batches_split_there():
    """A load applies at its seq: what comes before and after it in one batch ends as when the
    batch is cut at the load."""
    events = Events().publish(3, 10).subscribe("Shared").dispatch(3, 0).dispatch(3, 1).ack((3, 1))
    events.cursor("RESET_CURSOR", 3, -1)
    _load(events).subscribe("Shared", consumer_id=2).dispatch(3, 0, consumer_id=2).ack((3, 0), consumer_id=2)
    whole, result = apply_events(events)
    assert not result.rejects
    split = apply_cut_at(events, "LOAD_TOPIC")
    assert whole.cursors["s"].encode() == split.cursors["s"].encode()
    assert whole.subscriptions["s"].encode() == split.subscriptions["s"].encode()
    assert whole.last_seq == split.last_seq


def test_a_load_at_or_below_the_fence_is_stale():
    events = Events().publish(3, 2).subscribe("Exclusive")
    state, _ = apply_events(events)
    stale = [{**events.records[-1], "type": "LOAD_TOPIC"}]
    result = state.apply(EventBatch.from_records(stale), EngineSettings())
    assert [r.reason for r in result.rejects] == ["stale_seq"]
    assert list(state.subscriptions["s"].consumers) == [1]


def test_a_subscription_shows_no_type_until_a_consumer_joins_the_loaded_topic():
    """``PersistentSubscription.getTypeString``: "None" while ``dispatcher`` is null. The topic
    object a load makes has none in any subscription (``addConsumer`` makes it); a dispatcher
    outlives its consumers (``removeConsumer`` keeps it), so closing them changes nothing. The
    cursor keeps its type for the rules, and the subscription keeps the flag across batches
    (``encode``), empty as it is."""
    events = Events().publish(3, 4).subscribe("Shared")
    events.add("CLOSE_CONSUMER", subscription="s", consumer_id=1)
    state, _ = apply_events(events)
    assert state.subscriptions["s"].stats_type(state.cursors["s"]) == "Shared"  # closed, kept
    state, result = apply_events(_load(events))
    sub, cursor = state.subscriptions["s"], state.cursors["s"]
    assert "s" in result.changed
    assert sub.stats_type(cursor) == "None" and cursor.sub_type == "Shared"
    again = Subscription.decode(sub.encode())
    assert not sub.is_empty() and again.stats_type(cursor) == "None"
    state, _ = apply_events(events.subscribe("Failover", consumer_id=2))
    assert state.subscriptions["s"].stats_type(state.cursors["s"]) == "Failover"


def test_a_subscription_with_a_dispatcher_encodes_as_before_the_flag():
    """Only the flag's exception is written: every state stored before it reads back as one
    with a dispatcher, and its encoding is unchanged."""
    state, _ = apply_events(Events().publish(3, 2).subscribe("Exclusive").dispatch(3, 0))
    encoded = state.subscriptions["s"].encode()
    assert b"dispatcher" not in encoded
    assert Subscription.decode(encoded).dispatcher
    assert Subscription().is_empty()
