"""The JSON of ``ackstate stats`` / ``internal-stats`` from plain rows: no Spark, milliseconds.

The shapes are what ``pulsar-admin topics stats`` and ``topics stats-internal`` print, and what
the conformance runner compares (shared/scenarios/README.md).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from engine import Cursor, Ledgers, MessageId
from engine.topic import partition_name
from jobs.platform.errors import (
    AckstateError,
    CorruptCursorStateError,
    NotFoundError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from jobs.read.stats import TopicFilter, build_internal_stats, build_stats, require_found

TOPIC = "persistent://public/default/orders"
OTHER = "persistent://public/default/payments"


def five_entries() -> Ledgers:
    ledgers = Ledgers()
    for entry in range(5):
        ledgers.publish((10, entry))
    return ledgers


def cursor_with_hole(ledgers: Ledgers, sub_type: str = "Exclusive") -> Cursor:
    """markDelete 10:-1 with 10:2 acked: Pulsar prints the hole as ``[(10:1..10:2]]``."""
    cursor = Cursor.subscribe(sub_type, "Earliest", ledgers, ledgers.last_position)
    cursor.ack([MessageId((10, 2))], ledgers, ledgers.last_position, False)
    return cursor


def stats_row(
    topic: str, partition: int, subscription: str, sub_type: str, backlog: int = 0, ranges: int = 0
) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "subscription": subscription,
        "sub_type": sub_type,
        "msg_backlog": backlog,
        "non_contiguous_deleted_ranges": ranges,
    }


def roundtrip(result: dict[str, Any]) -> dict[str, Any]:
    """What the command prints, read back: the builders must produce plain JSON."""
    return json.loads(json.dumps(result, indent=2, sort_keys=True))


# ---- topic names -------------------------------------------------------------------------
def test_partition_minus_one_is_the_topic_itself():
    assert partition_name(TOPIC, -1) == TOPIC


def test_partition_n_is_named_with_partition_suffix():
    assert partition_name(TOPIC, 0) == f"{TOPIC}-partition-0"
    assert partition_name(TOPIC, 12) == f"{TOPIC}-partition-12"


def test_topic_filter_base_name_selects_every_partition_and_the_plain_topic():
    selected = TopicFilter.parse(TOPIC)
    assert selected.matches(TOPIC, -1)
    assert selected.matches(TOPIC, 0)
    assert selected.matches(TOPIC, 3)
    assert not selected.matches(OTHER, -1)


def test_topic_filter_partition_name_selects_only_that_partition():
    selected = TopicFilter.parse(f"{TOPIC}-partition-1")
    assert selected.matches(TOPIC, 1)
    assert not selected.matches(TOPIC, 0)
    assert not selected.matches(TOPIC, -1)


def test_topic_filter_completes_short_names_as_pulsar_admin_does():
    assert TopicFilter.parse("orders").name == TOPIC
    assert TopicFilter.parse("public/default/orders-partition-2") == TopicFilter(
        f"{TOPIC}-partition-2", TOPIC, 2
    )


# ---- internal-stats ----------------------------------------------------------------------
def test_internal_stats_of_a_cursor_with_one_hole():
    ledgers = five_entries()
    cursor = cursor_with_hole(ledgers)
    result = build_internal_stats(
        [{"topic": TOPIC, "partition": -1, "ledgers": ledgers.encode()}],
        [{"topic": TOPIC, "partition": -1, "subscription": "sub", "state": cursor.encode()}],
    )
    assert roundtrip(result) == {
        TOPIC: {
            "numberOfEntries": 5,
            "lastConfirmedEntry": "10:4",
            "ledgers": [{"ledgerId": 10, "entries": 5}],
            "cursors": {
                "sub": {
                    "markDeletePosition": "10:-1",
                    "readPosition": "10:0",
                    "individuallyDeletedMessages": "[(10:1..10:2]]",
                    "totalNonContiguousDeletedMessagesRange": 1,
                }
            },
        }
    }


def test_internal_stats_read_position_crosses_to_the_next_ledger():
    ledgers = five_entries()
    ledgers.publish((11, 0))
    cursor = Cursor.subscribe("Exclusive", "Earliest", ledgers, ledgers.last_position)
    cursor.ack_cumulative(MessageId((10, 4)), ledgers, ledgers.last_position, False)
    result = build_internal_stats(
        [{"topic": TOPIC, "partition": 0, "ledgers": ledgers.encode()}],
        [{"topic": TOPIC, "partition": 0, "subscription": "sub", "state": cursor.encode()}],
    )
    partition = result[f"{TOPIC}-partition-0"]
    assert partition["ledgers"] == [{"ledgerId": 10, "entries": 5}, {"ledgerId": 11, "entries": 1}]
    assert partition["numberOfEntries"] == 6
    assert partition["cursors"]["sub"]["markDeletePosition"] == "10:4"
    assert partition["cursors"]["sub"]["readPosition"] == "11:0"


def test_internal_stats_of_a_topic_without_entries_or_subscriptions():
    result = build_internal_stats([{"topic": TOPIC, "partition": -1, "ledgers": None}], [])
    assert result == {
        TOPIC: {"numberOfEntries": 0, "lastConfirmedEntry": "-1:-1", "ledgers": [], "cursors": {}}
    }


def test_internal_stats_accepts_an_arrow_table():
    ledgers = five_entries()
    cursor = cursor_with_hole(ledgers)
    partitions = pa.table({"topic": [TOPIC], "partition": [-1], "ledgers": [ledgers.encode()]})
    cursors = pa.table(
        {"topic": [TOPIC], "partition": [-1], "subscription": ["sub"], "state": [cursor.encode()]}
    )
    result = build_internal_stats(partitions, cursors)
    assert result[TOPIC]["cursors"]["sub"]["individuallyDeletedMessages"] == "[(10:1..10:2]]"


def test_internal_stats_filters_topic_and_subscription():
    ledgers = five_entries()
    state = cursor_with_hole(ledgers).encode()
    partitions = [
        {"topic": TOPIC, "partition": 0, "ledgers": ledgers.encode()},
        {"topic": TOPIC, "partition": 1, "ledgers": ledgers.encode()},
        {"topic": OTHER, "partition": -1, "ledgers": ledgers.encode()},
    ]
    cursors = [
        {"topic": t, "partition": p, "subscription": s, "state": state}
        for t, p in ((TOPIC, 0), (TOPIC, 1), (OTHER, -1))
        for s in ("a", "b")
    ]
    assert set(build_internal_stats(partitions, cursors, topic=TOPIC)) == {
        f"{TOPIC}-partition-0",
        f"{TOPIC}-partition-1",
    }
    one = build_internal_stats(partitions, cursors, topic=f"{TOPIC}-partition-1", subscription="b")
    assert set(one) == {f"{TOPIC}-partition-1"}
    assert set(one[f"{TOPIC}-partition-1"]["cursors"]) == {"b"}


def test_undecodable_cursor_state_is_reported_with_its_subscription():
    with pytest.raises(CorruptCursorStateError, match="orders subscription sub"):
        build_internal_stats(
            [], [{"topic": TOPIC, "partition": -1, "subscription": "sub", "state": b"garbage"}]
        )
    assert issubclass(CorruptCursorStateError, AckstateError)


# ---- stats -------------------------------------------------------------------------------
def test_stats_of_exclusive_and_failover_show_zero_unacked_messages():
    result = build_stats(
        [
            stats_row(TOPIC, -1, "ex", "Exclusive", backlog=4, ranges=1),
            stats_row(TOPIC, -1, "fo", "Failover", backlog=7),
        ]
    )
    assert roundtrip(result) == {
        TOPIC: {
            "subscriptions": {
                "ex": {
                    "msgBacklog": 4,
                    "type": "Exclusive",
                    "unackedMessages": 0,
                    "nonContiguousDeletedMessagesRanges": 1,
                },
                "fo": {
                    "msgBacklog": 7,
                    "type": "Failover",
                    "unackedMessages": 0,
                    "nonContiguousDeletedMessagesRanges": 0,
                },
            }
        }
    }


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
def test_stats_of_shared_types_leave_consumer_fields_out_until_consumers_are_tracked(sub_type):
    result = build_stats([stats_row(TOPIC, -1, "s", sub_type, backlog=3)])
    assert result[TOPIC]["subscriptions"]["s"] == {
        "msgBacklog": 3,
        "type": sub_type,
        "nonContiguousDeletedMessagesRanges": 0,
    }


def test_stats_lists_topics_without_subscriptions_from_partition_rows():
    result = build_stats([], [{"topic": TOPIC, "partition": 2}])
    assert result == {f"{TOPIC}-partition-2": {"subscriptions": {}}}


def test_stats_accepts_an_arrow_table():
    table = pa.Table.from_pylist([stats_row(TOPIC, 0, "sub", "Exclusive", backlog=2)])
    assert build_stats(table)[f"{TOPIC}-partition-0"]["subscriptions"]["sub"]["msgBacklog"] == 2


def test_stats_keeps_a_null_count_null_instead_of_a_float():
    table = pa.Table.from_pylist(
        [
            stats_row(TOPIC, -1, "a", "Exclusive", backlog=5),
            {**stats_row(TOPIC, -1, "b", "Exclusive"), "msg_backlog": None},
        ]
    )
    subscriptions = build_stats(table)[TOPIC]["subscriptions"]
    assert (subscriptions["a"]["msgBacklog"], subscriptions["b"]["msgBacklog"]) == (5, None)
    assert type(subscriptions["a"]["msgBacklog"]) is int


def test_stats_filters_topic_and_subscription():
    rows = [
        stats_row(TOPIC, 0, "a", "Exclusive"),
        stats_row(TOPIC, 1, "a", "Shared"),
        stats_row(TOPIC, 1, "b", "Failover"),
        stats_row(OTHER, -1, "a", "Exclusive"),
    ]
    partitions = [{"topic": TOPIC, "partition": 2}, {"topic": OTHER, "partition": -1}]
    assert set(build_stats(rows, partitions)) == {
        f"{TOPIC}-partition-0",
        f"{TOPIC}-partition-1",
        f"{TOPIC}-partition-2",
        OTHER,
    }
    assert set(build_stats(rows, partitions, topic=TOPIC)) == {
        f"{TOPIC}-partition-0",
        f"{TOPIC}-partition-1",
        f"{TOPIC}-partition-2",
    }
    only_b = build_stats(rows, partitions, subscription="b")
    assert only_b == {
        f"{TOPIC}-partition-1": {
            "subscriptions": {
                "b": {
                    "msgBacklog": 0,
                    "type": "Failover",
                    "unackedMessages": 0,
                    "nonContiguousDeletedMessagesRanges": 0,
                }
            }
        }
    }
    assert set(build_stats(rows, partitions, topic=f"{TOPIC}-partition-1", subscription="a")) == {
        f"{TOPIC}-partition-1"
    }


# ---- not found ---------------------------------------------------------------------------
def test_unfiltered_empty_result_is_not_an_error():
    require_found({}, None, None)


def test_unknown_topic_is_an_error_naming_it():
    with pytest.raises(TopicNotFoundError, match=f"^topic {TOPIC}-partition-9 not found$"):
        require_found(build_stats([], [], topic=f"{TOPIC}-partition-9"), f"{TOPIC}-partition-9", None)


def test_unknown_subscription_is_an_error_naming_it():
    rows = [stats_row(TOPIC, -1, "a", "Exclusive")]
    with pytest.raises(SubscriptionNotFoundError, match=f"subscription zz not found on topic {TOPIC}"):
        require_found(build_stats(rows, subscription="zz", topic=TOPIC), TOPIC, "zz")
    assert issubclass(NotFoundError, AckstateError)


# ---- publishers ---------------------------------------------------------------------------------
NP = "non-persistent://public/default/metrics"


def producer_row(topic: str, partition: int, name: str, drops: int = 0) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "producer_name": name, "msg_drop_count": drops}


def test_publishers_are_listed_by_name_with_the_drop_count_on_non_persistent_topics():
    cursors = [stats_row(TOPIC, -1, "s", "Shared")]
    producers = [producer_row(TOPIC, -1, "b"), producer_row(TOPIC, -1, "a"), producer_row(NP, 2, "m", 12)]
    result = roundtrip(build_stats(cursors, producer_rows=producers))
    assert result[TOPIC]["publishers"] == [{"producerName": "a"}, {"producerName": "b"}]
    # NonPersistentPublisherStats.msgDropRate is a rate; ackstate knows the exact count
    assert result[f"{NP}-partition-2"] == {
        "subscriptions": {},
        "publishers": [{"producerName": "m", "msgDropCount": 12}],
    }


def test_a_topic_no_producer_sent_to_has_no_publishers_key():
    result = build_stats([stats_row(TOPIC, -1, "s", "Shared")], producer_rows=[producer_row(OTHER, -1, "p")])
    assert "publishers" not in result[TOPIC]
    assert result[OTHER]["publishers"] == [{"producerName": "p"}]


def test_publishers_follow_the_topic_and_subscription_filters():
    cursors = [stats_row(TOPIC, -1, "s", "Shared"), stats_row(OTHER, -1, "t", "Shared")]
    producers = [producer_row(TOPIC, -1, "a"), producer_row(OTHER, -1, "b"), producer_row(NP, -1, "c")]
    assert set(build_stats(cursors, producer_rows=producers, topic=OTHER)) == {OTHER}
    only_s = build_stats(cursors, producer_rows=producers, subscription="s")
    assert set(only_s) == {TOPIC} and only_s[TOPIC]["publishers"] == [{"producerName": "a"}]
