"""A batch's projection tables written as rewrites (``[ingest] write_mode = "rewrite"``, the
default) hold the same rows as when they are written by Delta's MERGE (``"merge"``).

Real Spark, real Delta: the same three micro-batches go through both modes, and every table
is compared. The batches exercise each MERGE the batch makes: a cursor written whole and one
whose figures alone move (``cursor_write``), the upserts of ``topic_partitions`` and
``consumers``, the changes of ``producers``, ``ack_ranges``, ``batch_acks``, ``ledgers``,
``pending_acks`` and ``redeliveries`` (with deletes), the late answers to earlier SENDs in
``send_receipts``, and the rows of a subscription an UNSUBSCRIBE deletes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from delta.tables import DeltaTable

from engine import EngineSettings
from jobs.bench.generate import MALFORMED_KEY, RAW_KEY, iter_events
from jobs.ingest.recovery import recover
from jobs.platform.tables import read_table, table_path
from tests.jobs.warehouse import (
    LINEAGE,
    EventLog,
    assert_same_tables,
    event_source,
    ingest,
    snapshot,
    table_rows,
)

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

TOPIC = "persistent://t/ns/rewrite"
SETTINGS = EngineSettings(broker_deduplication_enabled=True)
REWRITTEN = (
    "cursors",
    "topic_partitions",
    "producers",
    "send_receipts",
    "ack_ranges",
    "batch_acks",
    "ledgers",
    "consumers",
    "pending_acks",
    "redeliveries",
)
"""The tables whose writes are MERGEs in ``merge`` mode and rewrites in ``rewrite`` mode."""


def _files() -> list[list[dict]]:
    """Three batches: a generated mix of two topics, and a hand-made topic with sends answered
    a batch later, a subscription deleted and one kept."""
    generated = [
        r
        for r in iter_events(events=1200, topics=2, partitions=2, subscriptions_per_topic=2, seed=5)
        if MALFORMED_KEY not in r and RAW_KEY not in r
    ]
    third = -(-len(generated) // 3)
    files = [generated[i * third : (i + 1) * third] for i in range(3)]
    log = EventLog()

    def event(type_: str, **fields: object) -> dict:
        return log.event(type_, TOPIC, 0, **fields)

    def send(sequence_id: int) -> dict:
        return event("SEND", producer_name="producer-1", sequence_id=sequence_id)

    first = [send(0)]
    first += log.publish(TOPIC, 0, 7, range(1))  # answers send 0 in its own batch
    for sub in ("gone", "kept"):
        first.append(log.subscribe(TOPIC, 0, sub, "Shared", "Earliest"))
    first += log.publish(TOPIC, 0, 7, range(1, 6))
    first.append(send(6))  # answered by the next batch's PUBLISH
    for sub in ("gone", "kept"):
        first += [
            event("DISPATCH", subscription=sub, consumer_id=1, ledger_id=7, entry_id=e) for e in range(6)
        ]
        first.append(log.ack(TOPIC, 0, sub, [(7, 2), (7, 4)]))
    second = [event("UNSUBSCRIBE", subscription="gone"), log.ack(TOPIC, 0, "kept", [(7, 0), (7, 3)])]
    second += log.publish(TOPIC, 0, 7, range(6, 7))
    third = [log.ack(TOPIC, 0, "kept", [(7, 1), (7, 5)])]
    for records, extra in zip(files, (first, second, third), strict=True):
        records.extend(extra)
    return files


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return event_source(tmp_path_factory, "rewrite", _files())


@pytest.fixture(scope="module")
def written(spark, source, tmp_path_factory) -> dict[str, Path]:
    """The warehouse each mode writes from the same batches."""
    out = {}
    for mode in ("merge", "rewrite"):
        warehouse = tmp_path_factory.mktemp(f"rewrite-{mode}") / "warehouse"
        ingest(spark, source, warehouse, settings=SETTINGS, write_mode=mode)
        out[mode] = warehouse
    return out


def _operations(spark, warehouse: Path, table: str) -> list[str]:
    history = DeltaTable.forPath(spark, table_path(warehouse, table)).history()
    return [r["operation"] for r in history.orderBy("version").collect()]


def test_every_table_holds_the_rows_a_merge_leaves(spark, written):
    merged, rewritten = (snapshot(written[mode], exclude=LINEAGE) for mode in ("merge", "rewrite"))
    assert_same_tables(rewritten, merged)


def test_every_version_holds_the_rows_a_merge_left(spark, written):
    """Each batch commits one version of each table it writes, in both modes: the tables
    agree after every batch, not only after the last (``batch_acks`` ends empty)."""
    seen = 0
    for table in REWRITTEN:
        versions = len(_operations(spark, written["merge"], table))
        assert len(_operations(spark, written["rewrite"], table)) == versions, table
        for version in range(1, versions):
            # read from the files, as snapshot reads them (tests/jobs/test_warehouse_reader.py)
            rows = {
                mode: table_rows(warehouse / table, table, version, exclude=LINEAGE)
                for mode, warehouse in written.items()
            }
            assert rows["rewrite"] == rows["merge"], (table, version)
            seen += len(rows["merge"])
    assert seen


def test_each_mode_wrote_the_tables_its_own_way(spark, written):
    for table in REWRITTEN:
        assert "MERGE" in _operations(spark, written["merge"], table), table
        rewrites = _operations(spark, written["rewrite"], table)
        assert "MERGE" not in rewrites and "WRITE" in rewrites, (table, rewrites)


def test_the_deleted_subscription_and_the_late_answer_are_in_both(spark, written):
    for warehouse in written.values():
        gone = read_table(spark, warehouse, "pending_acks").filter("subscription = 'gone'")
        assert gone.count() == 0
        ranges = read_table(spark, warehouse, "ack_ranges")
        kept = ranges.filter(f"topic = '{TOPIC}' AND subscription = 'kept'")
        assert kept.count() == 0  # every entry of `kept` acked by the third batch
        receipts = read_table(spark, warehouse, "send_receipts").filter(f"topic = '{TOPIC}'")
        assert sorted(r["receipt"] for r in receipts.collect()) == ["7:0", "7:6"], receipts.collect()


def test_a_rewrite_is_not_taken_for_an_append_when_a_batch_repeats(spark, written):
    """A repeated batch skips the appends a crashed run made, found as ``WRITE`` commits with
    its tag; a rewrite is a ``WRITE`` too, and must not be taken for one."""
    warehouse = written["rewrite"]
    query_id = read_table(spark, warehouse, "ingest_batches").first()["query_id"]
    recovery = recover(spark, str(warehouse), f"{query_id}:1")
    assert recovery.versions  # the batch's commits were found
    assert "ingest_batches" in recovery.appended
    assert not recovery.appended & set(REWRITTEN), recovery.appended
    late = DeltaTable.forPath(spark, table_path(warehouse, "send_receipts")).history()
    assert late.filter(f"userMetadata LIKE '{query_id}:1 %' AND operation = 'WRITE'").count() == 1
