"""``ingest --implicit-consumers`` on real Spark and Delta, and a warehouse an older ackstate made.

A stream that starts after its consumers subscribed carries commands from consumer ids the state
never saw. Without the option they are refused as ``unknown_consumer`` (the broker drops
commands of a consumer id it does not know); with it, they attach the consumer, and the
``consumers`` table says which consumers were attached that way.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from engine import EngineSettings
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform.tables import ensure_tables, read_table, table_path
from schemas.tables import TABLES
from tests.jobs.warehouse import write_events

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

TOPIC = "persistent://public/default/mid-life"


def _event(seq: int, type_: str, **fields: object) -> dict[str, object]:
    return {
        "event_id": f"e{seq}",
        "seq": seq,
        "event_time": 1_000 * seq,
        "type": type_,
        "topic": TOPIC,
        "partition": -1,
        **fields,
    }


def _mid_life_stream() -> list[dict[str, object]]:
    """Consumer 1 subscribes; consumer 5, connected before the stream began, then works."""
    return [
        *[
            _event(1 + e, "PUBLISH", ledger_id=3, entry_id=e, batch_size=1, producer_name="p", sequence_id=e)
            for e in range(3)
        ],
        _event(
            4,
            "SUBSCRIBE",
            subscription="s",
            consumer_id=1,
            consumer_name="c1",
            sub_type="Shared",
            initial_position="Earliest",
        ),
        _event(5, "DISPATCH", subscription="s", consumer_id=5, ledger_id=3, entry_id=0, batch_size=1),
        _event(6, "DISPATCH", subscription="s", consumer_id=5, ledger_id=3, entry_id=1, batch_size=1),
        _event(
            7,
            "ACK",
            subscription="s",
            consumer_id=5,
            ack_type="Individual",
            message_ids=[{"ledger_id": 3, "entry_id": 0}],
        ),
    ]


def _ingest(spark: SparkSession, source: Path, warehouse: Path, implicit: bool) -> None:
    options = IngestOptions(
        source=str(source), warehouse=warehouse, settings=EngineSettings(implicit_consumers=implicit)
    )
    query = start_ingest(spark, options, BatchWriter(options))
    query.awaitTermination()
    assert query.exception() is None, query.exception()


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_unknown_consumers_are_refused_without_the_option_and_attached_with_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "events"
    write_events(source, [_mid_life_stream()])

    refused = tmp_path / "refused"
    _ingest(spark, source, refused, implicit=False)
    reasons = sorted(r["reason"] for r in read_table(spark, refused, "rejected_events").collect())
    assert reasons == ["unknown_consumer"] * 3
    assert [r["consumer_id"] for r in read_table(spark, refused, "consumers").collect()] == [1]

    attached = tmp_path / "attached"
    _ingest(spark, source, attached, implicit=True)
    assert read_table(spark, attached, "rejected_events").count() == 0
    consumers = {
        r["consumer_id"]: (
            r["consumer_name"],
            r["connected"],
            r["unacked_messages"],
            r["attached_implicitly"],
        )
        for r in read_table(spark, attached, "consumers").collect()
    }
    assert consumers == {1: ("c1", True, 0, False), 5: ("5", True, 1, True)}
    pending = [
        (r["consumer_id"], r["position"]) for r in read_table(spark, attached, "pending_acks").collect()
    ]
    assert pending == [(5, "3:1")]
    (cursor,) = read_table(spark, attached, "cursors").collect()
    assert cursor["mark_delete"] == "3:0"


def test_a_table_made_before_a_column_was_added_gets_it(spark: SparkSession, tmp_path: Path) -> None:
    """Columns are only ever added: an older warehouse's table gains the new ones, and keeps its rows."""
    from pyspark.sql import types as T

    warehouse = tmp_path / "old"
    older = T.StructType([f for f in TABLES["consumers"].fields if f.name != "attached_implicitly"])
    spark.createDataFrame(
        [("persistent://t/ns/x", -1, "s", 1, "c1")],
        "topic string, partition int, subscription string, consumer_id long, consumer_name string",
    ).select(
        *[
            f.name
            for f in older.fields
            if f.name in {"topic", "partition", "subscription", "consumer_id", "consumer_name"}
        ]
    ).write.format("delta").save(table_path(warehouse, "consumers"))
    ensure_tables(spark, warehouse)
    rows = read_table(spark, warehouse, "consumers").collect()
    assert "attached_implicitly" in read_table(spark, warehouse, "consumers").columns
    assert [(r["consumer_id"], r["attached_implicitly"]) for r in rows] == [(1, None)]
