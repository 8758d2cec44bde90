"""The starting state read from Pulsar's admin API (``engine.bootstrap``), on its JSON shapes."""

from __future__ import annotations

import pytest

from engine import EngineSettings, EventBatch
from engine.bootstrap import ledgers_from_internal_stats, parse_ranges, partition_from_admin
from engine.errors import SnapshotError

TOPIC = "persistent://public/default/orders"

# as a 4.0.7 standalone answers: ledgers of 10 entries, the current one still open (entries 0)
INTERNAL = {
    "entriesAddedCounter": 25,
    "numberOfEntries": 25,
    "currentLedgerEntries": 5,
    "lastConfirmedEntry": "14:4",
    "ledgers": [
        {"ledgerId": 10, "entries": 10, "size": 500, "offloaded": False, "underReplicated": False},
        {"ledgerId": 12, "entries": 10, "size": 500, "offloaded": False, "underReplicated": False},
        {"ledgerId": 14, "entries": 0, "size": 0, "offloaded": False, "underReplicated": False},
    ],
    "cursors": {
        "shared": {
            "markDeletePosition": "10:2",
            "individuallyDeletedMessages": "[(10:3..10:5],(12:-1..12:1],(14:0..14:3]]",
            "totalNonContiguousDeletedMessagesRange": 3,
        },
        "excl": {"markDeletePosition": "14:4", "individuallyDeletedMessages": "[]"},
        "pulsar.dedup": {"markDeletePosition": "14:4", "individuallyDeletedMessages": "[]"},
    },
}
STATS = {
    "subscriptions": {
        "shared": {"type": "Shared", "isDurable": True, "msgBacklog": 17},
        "excl": {"type": "Exclusive", "isDurable": True, "msgBacklog": 0},
        "reader-1f": {"type": "Exclusive", "isDurable": False},
    }
}


def test_ranges_are_read_as_pulsar_prints_them():
    assert parse_ranges("[]") == [] and parse_ranges(None) == []
    assert parse_ranges("[(3:0..3:1],(3:2..3:3]]") == [((3, 0), (3, 1)), ((3, 2), (3, 3))]
    with pytest.raises(SnapshotError):
        parse_ranges("[(3:0..3:1],(garbage]")


def test_the_open_ledger_ends_at_the_last_confirmed_entry():
    assert list(ledgers_from_internal_stats(INTERNAL)) == [(10, 9), (12, 9), (14, 4)]


def test_cursors_equal_what_internal_stats_shows():
    state = partition_from_admin(TOPIC, -1, STATS, INTERNAL)
    assert sorted(state.cursors) == ["excl", "shared"]  # no dedup cursor, no reader
    shared = state.cursors["shared"]
    assert (shared.sub_type, shared.mark_delete) == ("Shared", (10, 2))
    assert shared.individually_deleted_messages == "[(10:3..10:5],(12:-1..12:1],(14:0..14:3]]"
    assert shared.non_contiguous_deleted_ranges == 3
    # backlog: 25 entries, 3 below mark-delete, 2 + 2 + 3 acked above it
    assert shared.backlog(state.ledgers) == 25 - 3 - 7
    assert state.cursors["excl"].backlog(state.ledgers) == 0
    assert state.last_seq == -1 and not any(s.consumers for s in state.subscriptions.values())


def test_a_range_across_ledgers_covers_the_ledgers_between():
    internal = {
        **INTERNAL,
        "cursors": {"s": {"markDeletePosition": "10:5", "individuallyDeletedMessages": "[(10:7..14:1]]"}},
    }
    state = partition_from_admin(TOPIC, -1, {"subscriptions": {"s": {"type": "Shared"}}}, internal)
    acked = state.cursors["s"].acked
    assert [
        p for p in [(10, 7), (10, 8), (10, 9), (12, 0), (12, 9), (14, 0), (14, 1), (14, 2)] if p in acked
    ] == [(10, 8), (10, 9), (12, 0), (12, 9), (14, 0), (14, 1)]


def test_events_that_follow_apply_on_top():
    state = partition_from_admin(TOPIC, -1, STATS, INTERNAL)
    events = [
        {
            "seq": 1,
            "event_time": 5,
            "type": "SUBSCRIBE",
            "subscription": "shared",
            "consumer_id": 1,
            "consumer_name": "c",
            "sub_type": "Shared",
        },
        {
            "seq": 2,
            "event_time": 6,
            "type": "ACK",
            "subscription": "shared",
            "consumer_id": 1,
            "ack_type": "Individual",
            "message_ids": [{"ledger_id": 10, "entry_id": 3}],
        },
        {"seq": 3, "event_time": 7, "type": "PUBLISH", "ledger_id": 14, "entry_id": 5},
    ]
    result = state.apply(EventBatch.from_records(events), EngineSettings())
    assert result.rejects == []
    shared = state.cursors["shared"]
    assert shared.mark_delete == (10, 5)  # the hole at 10:3 closed
    assert shared.backlog(state.ledgers) == 25 + 1 - 6 - 5


def test_a_persistent_topic_without_internal_stats_or_a_cursor_is_an_error():
    with pytest.raises(SnapshotError):
        partition_from_admin(TOPIC, -1, STATS, None)
    with pytest.raises(SnapshotError, match="no cursor"):
        partition_from_admin(TOPIC, -1, {"subscriptions": {"x": {"type": "Shared"}}}, INTERNAL)


def test_a_non_persistent_topic_keeps_only_its_subscriptions():
    state = partition_from_admin("non-persistent://public/default/np", 0, STATS, None)
    assert {n: c.sub_type for n, c in state.cursors.items()} == {"excl": "Exclusive", "shared": "Shared"}
    assert len(state.ledgers) == 0


def test_a_subscription_without_a_dispatcher_shows_none_until_a_consumer_joins():
    """``PersistentSubscription.getTypeString`` gives "None" before a consumer made the
    dispatcher (a topic loaded with no consumer back yet, a subscription the admin API made);
    the first SUBSCRIBE gives the subscription its type."""
    stats = {"subscriptions": {"excl": {"type": "None", "isDurable": True}}}
    state = partition_from_admin(TOPIC, -1, stats, INTERNAL)
    sub, cursor = state.subscriptions["excl"], state.cursors["excl"]
    assert sub.stats_type(cursor) == "None" and not sub.is_empty()
    subscribe = {
        "seq": 1,
        "event_time": 5,
        "type": "SUBSCRIBE",
        "subscription": "excl",
        "consumer_id": 1,
        "consumer_name": "c",
        "sub_type": "Failover",
    }
    assert state.apply(EventBatch.from_records([subscribe]), EngineSettings()).rejects == []
    assert sub.stats_type(cursor) == "Failover"
    shown = partition_from_admin(TOPIC, -1, STATS, INTERNAL).subscriptions["shared"]
    assert shown.dispatcher
