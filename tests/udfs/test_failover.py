"""The active-consumer UDF body without Spark: ``consumers`` rows in, ``is_active`` out."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from engine.failover import FailoverSettings, select_active
from schemas.udf import FAILOVER_INPUT_COLUMNS, FAILOVER_OUTPUT
from udfs.failover import OUTPUT_ARROW, failover_partition, failover_rows

INPUT_ARROW = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("subscription", pa.string()),
        pa.field("consumer_id", pa.int64()),
        pa.field("consumer_name", pa.string()),
        pa.field("sub_type", pa.string()),
        pa.field("priority_level", pa.int32()),
        pa.field("connected", pa.bool_()),
        pa.field("subscribed_at", pa.int64()),
    ]
)
TOPIC = "persistent://t/ns/orders"


def test_arrow_schemas_match_the_spark_ones() -> None:
    assert OUTPUT_ARROW.names == FAILOVER_OUTPUT.fieldNames()
    assert INPUT_ARROW.names == list(FAILOVER_INPUT_COLUMNS)


def _row(sub: str, cid: int, name: str | None, at: int | None, **kw: Any) -> dict[str, Any]:
    return {
        "topic": TOPIC,
        "partition": kw.get("partition", 0),
        "subscription": sub,
        "consumer_id": cid,
        "consumer_name": name,
        "sub_type": kw.get("sub_type", "Failover"),
        "priority_level": kw.get("priority_level", 0),
        "connected": kw.get("connected", True),
        "subscribed_at": at,
    }


def _run(rows: list[dict[str, Any]], topic: str = TOPIC, partition: int = 0, ring: bool = False) -> dict:
    rows = [dict(r, topic=topic, partition=partition) for r in rows]  # one topic partition's rows
    table = pa.Table.from_pylist(rows, schema=INPUT_ARROW)
    key = (pa.scalar(topic), pa.scalar(partition, pa.int32()))
    out = failover_partition(key, table, FailoverSettings(ring))
    assert out.schema == OUTPUT_ARROW
    assert out.num_rows == len(rows)
    result = out.to_pylist()
    assert all(r["topic"] == topic and r["partition"] == partition for r in result)
    return {(r["subscription"], r["consumer_id"]): r["is_active"] for r in result}


def test_one_row_out_per_row_in_with_null_for_shared_and_false_for_disconnected() -> None:
    rows = [
        _row("fo", 1, "b", 10),
        _row("fo", 2, "a", 11),
        _row("fo", 3, "0-gone", 5, connected=False),  # would sort first, but it has left
        _row("sh", 1, "a", 10, sub_type="Shared"),
        _row("ks", 1, "a", 10, sub_type="Key_Shared"),
        _row("ex", 9, "solo", 10, sub_type="Exclusive"),
    ]
    assert _run(rows, partition=0) == {
        ("fo", 1): False,
        ("fo", 2): True,  # sorted [a, b][0 % 2]
        ("fo", 3): False,
        ("sh", 1): None,
        ("ks", 1): None,
        ("ex", 9): True,
    }


def test_subscription_order_is_subscribed_at_then_consumer_id_not_row_order() -> None:
    """Two consumers named alike: partition 1 picks the second in subscription order."""
    rows = [
        _row("s", 7, "dup", 2000),
        _row("s", 5, "dup", 1000),
        _row("s", 9, "dup", 1000),
        _row("s", 3, "dup", None),  # attached before the stream began: first
    ]
    active = _run(rows, partition=1)
    assert [cid for (_, cid), on in active.items() if on] == [5]  # order: 3, 5, 9, 7
    active = _run(rows, partition=3)
    assert [cid for (_, cid), on in active.items() if on] == [7]


def test_subscriptions_of_one_partition_are_selected_independently() -> None:
    rows = [_row(f"sub-{s}", c, f"c{c}", c, priority_level=c % 2) for s in range(5) for c in range(s + 1)]
    active = _run(rows, partition=3)
    for s in range(5):
        consumers = [(c % 2, f"c{c}") for c in range(s + 1)]
        index = select_active(consumers, 3, f"{TOPIC}-partition-3", False)
        assert index is not None
        assert [cid for (sub, cid), on in active.items() if sub == f"sub-{s}" and on] == [index]


def test_non_partitioned_uses_the_ring_and_consistent_hashing_applies_to_partitions() -> None:
    consumers = [(0, f"c{i}") for i in range(6)]
    rows = [_row("s", i, f"c{i}", i, partition=-1) for i in range(6)]
    active = _run(rows, partition=-1)
    assert [cid for (_, cid), on in active.items() if on] == [select_active(consumers, -1, TOPIC, False)]

    rows = [_row("s", i, f"c{i}", i, partition=2) for i in range(6)]
    full = f"{TOPIC}-partition-2"
    active = _run(rows, partition=2, ring=True)
    assert [cid for (_, cid), on in active.items() if on] == [select_active(consumers, 2, full, True)]


def test_non_persistent_non_partitioned_takes_the_first_sorted_consumer() -> None:
    topic = "non-persistent://t/ns/x"
    rows = [dict(_row("s", i, n, i, partition=-1), topic=topic) for i, n in enumerate(["m", "k", "z"])]
    active = _run(rows, topic=topic, partition=-1)
    assert [cid for (_, cid), on in active.items() if on] == [1]


def test_missing_name_is_the_empty_string() -> None:
    """ServerCnx.handleSubscribe: a subscribe without a consumer name gets ""."""
    rows = [_row("s", 1, "a", 1), _row("s", 2, None, 2)]
    assert _run(rows, partition=0) == {("s", 1): False, ("s", 2): True}


def test_no_eligible_consumer() -> None:
    rows = [_row("s", 1, "a", 1, connected=False), _row("t", 1, "a", 1, sub_type="Shared")]
    assert _run(rows) == {("s", 1): False, ("t", 1): None}


def test_rows_of_many_topic_partitions_at_once_select_as_one_partition_at_a_time() -> None:
    """The bucketed grouping: one call, several topic partitions, same picks per partition."""
    layouts = {
        ("persistent://t/ns/a", 0): [("s", 1, "b", 1), ("s", 2, "a", 2), ("x", 1, "z", 1)],
        ("persistent://t/ns/a", 1): [("s", 1, "b", 1), ("s", 2, "a", 2)],
        ("persistent://t/ns/b", -1): [("s", 1, "b", 1), ("s", 2, "a", 2), ("s", 3, "c", 3)],
        ("non-persistent://t/ns/c", -1): [("s", 1, "b", 1), ("s", 2, "a", 2)],
    }
    expected = {}
    every_row = []
    for (topic, partition), consumers in layouts.items():
        rows = [
            dict(_row(sub, cid, name, at), topic=topic, partition=partition)
            for sub, cid, name, at in consumers
        ]
        every_row.extend(rows)
        for (sub, cid), on in _run(rows, topic=topic, partition=partition).items():
            expected[(topic, partition, sub, cid)] = on
    every_row.reverse()  # row order does not matter
    out = failover_rows(pa.Table.from_pylist(every_row, schema=INPUT_ARROW), FailoverSettings())
    got = {
        (r["topic"], r["partition"], r["subscription"], r["consumer_id"]): r["is_active"]
        for r in out.to_pylist()
    }
    assert got == expected
    assert sum(1 for on in got.values() if on) == 5
