"""A DELETE_TOPIC removes every row of the topic partition's state from the warehouse, in the
batch that applies it; a topic made again in that batch keeps only its new rows.

Real Spark, real Delta, deduplication on: three micro-batches. The first builds topics ``made``
and ``gone`` alike (a producer's sends, two ledgers, a Shared subscription with pending acks
and a replay, an Exclusive one with ack holes) and ``other``, which nothing deletes. The second
deletes ``gone``, and deletes ``made`` and makes it again: a new ledger, the producer's
sequence ids sent again, one subscription of an old name. The third acks on ``made`` and
``other``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from engine import EngineSettings
from jobs.platform.tables import read_table
from tests.jobs.warehouse import LINEAGE, EventLog, assert_same_tables, event_source, ingest, snapshot

MADE, GONE, OTHER = (f"persistent://t/ns/{name}" for name in ("made", "gone", "other"))
STATE_TABLES = ("cursors", "ack_ranges", "consumers", "pending_acks", "redeliveries", "ledgers", "producers")
SETTINGS = EngineSettings(broker_deduplication_enabled=True)


def _files() -> list[list[dict[str, Any]]]:
    log = EventLog(start_ms=1_000)

    def e(topic: str, type_: str, **fields: Any) -> dict[str, Any]:
        return log.event(type_, topic, -1, **fields)

    def sent(topic: str, ledger: int, entry: int, sequence_id: int) -> list[dict[str, Any]]:
        return [
            e(topic, "SEND", producer_name="p", sequence_id=sequence_id),
            e(topic, "PUBLISH", ledger_id=ledger, entry_id=entry, producer_name="p", sequence_id=sequence_id),
        ]

    def subscribe(topic: str, sub: str, consumer: int, sub_type: str) -> dict[str, Any]:
        return e(
            topic,
            "SUBSCRIBE",
            subscription=sub,
            consumer_id=consumer,
            consumer_name=f"c{consumer}",
            sub_type=sub_type,
            initial_position="Earliest",
        )

    def ack(topic: str, sub: str, consumer: int, *positions: tuple[int, int]) -> dict[str, Any]:
        ids = [{"ledger_id": ledger, "entry_id": entry} for ledger, entry in positions]
        return e(topic, "ACK", subscription=sub, consumer_id=consumer, ack_type="Individual", message_ids=ids)

    def dispatch(topic: str, sub: str, consumer: int, entry: int) -> dict[str, Any]:
        return e(topic, "DISPATCH", subscription=sub, consumer_id=consumer, ledger_id=5, entry_id=entry)

    first: list[dict[str, Any]] = []
    for topic in (MADE, GONE, OTHER):
        first.append(e(topic, "LOAD_TOPIC"))
        for i in range(6):
            first += sent(topic, 5 if i < 4 else 6, i % 4, i)
        first += [subscribe(topic, "shared", 1, "Shared"), subscribe(topic, "shared", 2, "Shared")]
        first += [dispatch(topic, "shared", 1, i) for i in range(3)] + [dispatch(topic, "shared", 2, 3)]
        first += [
            ack(topic, "shared", 1, (5, 1)),
            e(topic, "CLOSE_CONSUMER", subscription="shared", consumer_id=2),
        ]
        first += [subscribe(topic, "x", 3, "Exclusive"), ack(topic, "x", 3, (5, 0), (5, 2), (6, 0))]
    second = [e(topic, "DELETE_TOPIC") for topic in (GONE, MADE)]
    second += [e(MADE, "LOAD_TOPIC"), subscribe(MADE, "x", 4, "Failover")]
    second += [event for i in range(3) for event in sent(MADE, 9, i, i)]
    third = [ack(MADE, "x", 4, (9, 1)), ack(OTHER, "x", 3, (5, 1))]
    return [first, second, third]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return event_source(tmp_path_factory, "delete-topic", _files())


@pytest.fixture(scope="module")
def warm(spark, source, tmp_path_factory) -> Path:
    warehouse = tmp_path_factory.mktemp("delete-topic-warm") / "warehouse"
    ingest(spark, source, warehouse, settings=SETTINGS)
    return warehouse


def _rows(spark, warehouse: Path, table: str, topic: str) -> list[Any]:
    return read_table(spark, warehouse, table).filter(F.col("topic") == topic).collect()


def test_a_deleted_topic_leaves_no_state_row(spark, warm):
    assert read_table(spark, warm, "rejected_events").count() == 0
    for table in STATE_TABLES:
        assert _rows(spark, warm, table, GONE) == [], table
    (partition,) = _rows(spark, warm, "topic_partitions", GONE)
    assert partition["last_seq"] > 0  # the replay fence stays
    assert len(_rows(spark, warm, "send_receipts", GONE)) == 6  # history stays


def test_a_topic_made_again_keeps_only_its_new_rows(spark, warm):
    assert [(r["ledger_id"], r["entries"]) for r in _rows(spark, warm, "ledgers", MADE)] == [(9, 3)]
    (x,) = _rows(spark, warm, "cursors", MADE)
    assert (x["subscription"], x["sub_type"], x["mark_delete"], x["msg_backlog"]) == (
        "x",
        "Failover",
        "9:-1",
        2,
    )
    assert [r["range"] for r in _rows(spark, warm, "ack_ranges", MADE)] == ["(9:0..9:1]"]
    assert [(r["subscription"], r["consumer_id"]) for r in _rows(spark, warm, "consumers", MADE)] == [
        ("x", 4)
    ]
    for table in ("pending_acks", "redeliveries"):
        assert _rows(spark, warm, table, MADE) == [], table
    (producer,) = _rows(spark, warm, "producers", MADE)
    assert producer["highest_sequence_persisted"] == 2
    again = [r for r in _rows(spark, warm, "send_receipts", MADE) if r["receipt"].startswith("9:")]
    assert sorted((r["sequence_id"], r["dedup_status"]) for r in again) == [
        (0, "NotDup"),
        (1, "NotDup"),
        (2, "NotDup"),
    ]


def test_a_topic_nothing_deleted_keeps_its_rows(spark, warm):
    tables = {table: len(_rows(spark, warm, table, OTHER)) for table in STATE_TABLES}
    assert tables == {
        "cursors": 2,
        "ack_ranges": 2,  # shared's (5:0..5:1]; x's (5:3..6:0], its mark-delete at 5:2
        "consumers": 3,
        "pending_acks": 2,
        "redeliveries": 1,
        "ledgers": 2,
        "producers": 1,
    }


def test_batches_on_kept_state_write_the_tables_of_batches_that_read(spark, source, warm, tmp_path):
    ingest(spark, source, tmp_path / "cold", warm_state=False, settings=SETTINGS)
    assert_same_tables(snapshot(warm, exclude=LINEAGE), snapshot(tmp_path / "cold", exclude=LINEAGE))
