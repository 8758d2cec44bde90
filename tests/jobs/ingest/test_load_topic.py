"""A LOAD_TOPIC takes from the warehouse the consumers a killed broker never closed, their
pending acks and the replays, and gives the cursors the backlog the loaded broker reports.

Real Spark, real Delta: two micro-batches. The first leaves a Shared subscription with a
consumer holding entries and replays waiting, and an Exclusive one with its consumer
connected and a cursor reset behind it (the broker's backlog short by the acks it forgot). The
second is what a broker restarted after ``kill -9`` emits: LOAD_TOPIC, then the client's
reconnect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from jobs.platform.tables import read_table
from tests.jobs.warehouse import LINEAGE, assert_same_tables, event_source, ingest, snapshot

TOPIC = "persistent://t/ns/loaded"


def _files() -> list[list[dict[str, Any]]]:
    seq = iter(range(1, 1_000))

    def e(type_: str, **fields: Any) -> dict[str, Any]:
        n = next(seq)
        return {
            "event_id": f"e{n}",
            "seq": n,
            "event_time": 1_000 + n,
            "type": type_,
            "topic": TOPIC,
            **fields,
        }

    def subscribe(sub: str, consumer: int, sub_type: str) -> dict[str, Any]:
        return e(
            "SUBSCRIBE",
            subscription=sub,
            consumer_id=consumer,
            consumer_name=f"c{consumer}",
            sub_type=sub_type,
            initial_position="Earliest",
        )

    def ack(sub: str, consumer: int, *entries: int) -> dict[str, Any]:
        ids = [{"ledger_id": 5, "entry_id": i} for i in entries]
        return e("ACK", subscription=sub, consumer_id=consumer, ack_type="Individual", message_ids=ids)

    first = [e("PUBLISH", ledger_id=5, entry_id=i, producer_name="p", sequence_id=i) for i in range(10)]
    first += [subscribe("shared", 1, "Shared"), subscribe("shared", 2, "Shared")]
    first += [e("DISPATCH", subscription="shared", consumer_id=1, ledger_id=5, entry_id=i) for i in range(4)]
    first.append(e("DISPATCH", subscription="shared", consumer_id=2, ledger_id=5, entry_id=4))
    first.append(e("CLOSE_CONSUMER", subscription="shared", consumer_id=2))  # 5:4 to the replays
    first += [subscribe("x", 3, "Exclusive"), ack("x", 3, 0, 1, 2, 5, 7)]
    first.append(e("RESET_CURSOR", subscription="x", ledger_id=5, entry_id=2))
    second = [e("LOAD_TOPIC"), subscribe("x", 4, "Exclusive"), ack("x", 4, 6)]
    return [first, second]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return event_source(tmp_path_factory, "load-topic", _files())


@pytest.fixture(scope="module")
def warm(spark, source, tmp_path_factory) -> Path:
    warehouse = tmp_path_factory.mktemp("load-topic-warm") / "warehouse"
    ingest(spark, source, warehouse)
    return warehouse


def _rows(spark, warehouse: Path, table: str, sub: str) -> list[Any]:
    return read_table(spark, warehouse, table).filter(F.col("subscription") == sub).collect()


def test_a_load_leaves_only_the_consumers_connected_after_it(spark, warm):
    assert read_table(spark, warm, "rejected_events").count() == 0
    connected = {
        sub: [
            (r["consumer_id"], r["unacked_messages"])
            for r in _rows(spark, warm, "consumers", sub)
            if r["connected"]
        ]
        for sub in ("x", "shared")
    }
    assert connected == {"x": [(4, 0)], "shared": []}
    for table in ("pending_acks", "redeliveries"):
        assert _rows(spark, warm, table, "shared") == [], table
    (shared,) = _rows(spark, warm, "cursors", "shared")
    assert (shared["mark_delete"], shared["msg_backlog"]) == ("5:-1", 10)


def test_a_load_reports_the_precise_backlog_again(spark, warm):
    """Before the load, the reset left the broker's figure at 7 minus the 3 forgotten acks above
    5:2; the loaded broker counts 7 - 1 (the ack after the load) = 6."""
    (x,) = _rows(spark, warm, "cursors", "x")
    assert (x["mark_delete"], x["msg_backlog"]) == ("5:2", 6)


def test_batches_on_kept_state_write_the_tables_of_batches_that_read(spark, source, warm, tmp_path):
    ingest(spark, source, tmp_path / "cold", warm_state=False)
    assert_same_tables(snapshot(warm, exclude=LINEAGE), snapshot(tmp_path / "cold", exclude=LINEAGE))
