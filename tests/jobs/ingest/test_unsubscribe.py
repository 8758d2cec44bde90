"""An UNSUBSCRIBE removes every row of the subscription from the warehouse, in the batch that
applies it; one subscribed again in that batch keeps only its new rows.

Real Spark, real Delta: three micro-batches. The first builds three subscriptions alike, each
with rows in every table keyed by subscription but ``batch_acks`` (cursor, ack ranges,
consumers, pending acks, replays); the second deletes ``gone`` and deletes and re-creates
``again``; the third acks on ``kept``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from jobs.platform.tables import read_table
from tests.jobs.warehouse import LINEAGE, assert_same_tables, event_source, ingest, snapshot

TOPIC = "persistent://t/ns/unsub"
KEYED = ("cursors", "ack_ranges", "batch_acks", "consumers", "pending_acks", "redeliveries")


class _Events:
    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, type_: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {
            "event_id": f"e{self.seq}",
            "seq": self.seq,
            "event_time": 1_000 + self.seq,
            "type": type_,
            "topic": TOPIC,
            **fields,
        }


def _ids(*positions: tuple[int, int]) -> list[dict[str, Any]]:
    return [{"ledger_id": ledger, "entry_id": entry} for ledger, entry in positions]


def _files() -> list[list[dict[str, Any]]]:
    e = _Events()

    def subscribe(sub: str, consumer: int, **kw: Any) -> dict[str, Any]:
        return e(
            "SUBSCRIBE",
            subscription=sub,
            consumer_id=consumer,
            consumer_name=f"c{consumer}",
            sub_type="Shared",
            **{"initial_position": "Earliest", **kw},
        )

    def publish(entry: int, batch_size: int = 1) -> dict[str, Any]:
        return e(
            "PUBLISH",
            ledger_id=5,
            entry_id=entry,
            batch_size=batch_size,
            producer_name="p",
            sequence_id=entry,
        )

    first = [publish(i) for i in range(8)]
    for sub, consumer in (("gone", 1), ("again", 2), ("kept", 3)):
        first.append(subscribe(sub, consumer))
        first += [
            e("DISPATCH", subscription=sub, consumer_id=consumer, ledger_id=5, entry_id=i) for i in range(5)
        ]
        first.append(
            e(
                "ACK",
                subscription=sub,
                consumer_id=consumer,
                ack_type="Individual",
                message_ids=_ids((5, 1), (5, 3)),
            )
        )
        first.append(e("REDELIVER", subscription=sub, consumer_id=consumer, message_ids=_ids((5, 4))))
    second = [
        e("UNSUBSCRIBE", subscription="gone"),
        e("UNSUBSCRIBE", subscription="again"),
        subscribe("again", 9, initial_position="Latest"),
        publish(8),
        e("DISPATCH", subscription="again", consumer_id=9, ledger_id=5, entry_id=8),
    ]
    third = [e("ACK", subscription="kept", consumer_id=3, ack_type="Individual", message_ids=_ids((5, 0)))]
    return [first, second, third]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return event_source(tmp_path_factory, "unsubscribe", _files())


@pytest.fixture(scope="module")
def warm(spark, source, tmp_path_factory) -> Path:
    """The three batches, each after the first on the state the one before kept."""
    warehouse = tmp_path_factory.mktemp("unsubscribe-warm") / "warehouse"
    writer = ingest(spark, source, warehouse)
    assert writer.warm is not None and writer.warm.hits == 2
    return warehouse


def _rows(spark, warehouse: Path, table: str, sub: str) -> list[Any]:
    return read_table(spark, warehouse, table).filter(F.col("subscription") == sub).collect()


def test_an_unsubscribed_subscription_leaves_no_row(spark, warm):
    assert read_table(spark, warm, "rejected_events").count() == 0
    for table in KEYED:
        assert _rows(spark, warm, table, "gone") == [], table
    # the one that stays, built the same way, keeps its rows and its last ack
    kept = {table: len(_rows(spark, warm, table, "kept")) for table in KEYED}
    assert kept == {
        "cursors": 1,
        "ack_ranges": 1,  # (5:2..5:3]: 5:0 and 5:1 went into mark-delete
        "batch_acks": 0,
        "consumers": 1,
        "pending_acks": 1,  # 5:2; 5:0 was acked, 5:1 and 5:3 too, 5:4 went to the replays
        "redeliveries": 1,
    }, kept


def test_a_subscription_made_again_in_the_batch_has_only_its_new_rows(spark, warm):
    (cursor,) = _rows(spark, warm, "cursors", "again")
    assert (cursor["mark_delete"], cursor["msg_backlog"]) == ("5:7", 1)
    assert [r["consumer_id"] for r in _rows(spark, warm, "consumers", "again")] == [9]
    assert [(r["consumer_id"], r["position"]) for r in _rows(spark, warm, "pending_acks", "again")] == [
        (9, "5:8")
    ]
    for table in ("ack_ranges", "batch_acks", "redeliveries"):
        assert _rows(spark, warm, table, "again") == [], table


def test_batches_on_kept_state_write_the_tables_of_batches_that_read(spark, source, warm, tmp_path):
    """The state a batch keeps for the next (``jobs.ingest.warm``) drops the deleted cursor:
    the tables equal those of batches that read every state from Delta."""
    ingest(spark, source, tmp_path / "cold", warm_state=False)
    assert_same_tables(snapshot(warm, exclude=LINEAGE), snapshot(tmp_path / "cold", exclude=LINEAGE))


@pytest.mark.slow  # a crash and a restart
def test_a_batch_killed_between_its_writes_deletes_the_same_rows_when_run_again(
    spark, source, warm, tmp_path
):
    """Killed after the unsubscribing batch merged ``consumers`` (its other writes done or not),
    the re-run skips what was committed and deletes the rest: the tables of a run never stopped."""
    crashed = tmp_path / "crashed"
    ingest(spark, source, crashed, kill_at="1:merge consumers")
    ingest(spark, source, crashed)
    assert_same_tables(snapshot(crashed, exclude=LINEAGE), snapshot(warm, exclude=LINEAGE))
