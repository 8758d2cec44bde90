"""``DeltaWriter``: the one way ackstate writes Delta tables; its MERGEs idempotent per (app id, version)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.ingest.projections import changes, upsert
from jobs.platform.delta_writer import DeltaWriter
from jobs.platform.tables import ensure_tables, read_table

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

LEDGER_COLUMNS = (
    "topic string, partition int, ledger_id long, first_entry_id long, last_entry_id long, entries long"
)


def _ledgers(spark: SparkSession, rows: list[tuple], op: bool = False):
    schema = LEDGER_COLUMNS + (", op string" if op else "")
    return spark.createDataFrame(rows, schema)


def _read(spark: SparkSession, warehouse: str) -> list[tuple]:
    rows = read_table(spark, warehouse, "ledgers").orderBy("ledger_id").collect()
    return [(r.ledger_id, r.first_entry_id, r.last_entry_id, r.entries) for r in rows]


@pytest.fixture
def writer(spark: SparkSession, tmp_path: Path) -> DeltaWriter:
    warehouse = str(tmp_path / "warehouse")
    ensure_tables(spark, warehouse, ["ledgers"])
    return DeltaWriter(warehouse, "app-1")


def test_an_upsert_with_the_same_version_is_applied_once(spark: SparkSession, writer: DeltaWriter) -> None:
    rows = _ledgers(spark, [("t", 0, 1, 0, 9, 10), ("t", 0, 2, 0, 4, 5)])
    for _ in range(2):
        writer.merge("ledgers", rows).when_matched_update().when_not_matched_insert().execute(
            spark, version=1, tag="app-1:1"
        )
    assert _read(spark, writer.warehouse) == [(1, 0, 9, 10), (2, 0, 4, 5)]
    # a later version updates by key; an older one (a replay) is skipped
    later = _ledgers(spark, [("t", 0, 2, 0, 7, 8)])
    writer.merge("ledgers", later).when_matched_update().when_not_matched_insert().execute(spark, version=2)
    older = _ledgers(spark, [("t", 0, 2, 0, 1, 2)])
    writer.merge("ledgers", older).when_matched_update().when_not_matched_insert().execute(spark, version=1)
    assert _read(spark, writer.warehouse) == [(1, 0, 9, 10), (2, 0, 7, 8)]


def test_changes_delete_the_rows_marked_delete_and_upsert_the_others(
    spark: SparkSession, writer: DeltaWriter
) -> None:
    first = _ledgers(spark, [("t", 0, 1, 0, 9, 10, "upsert"), ("t", 0, 2, 0, 4, 5, "upsert")], op=True)
    writer.merge("ledgers", first).changes().execute(spark, version=1)
    second = _ledgers(spark, [("t", 0, 1, 0, 9, 10, "delete"), ("t", 0, 3, 0, 0, 1, "upsert")], op=True)
    metrics = writer.merge("ledgers", second).changes().execute(spark, version=2)
    assert _read(spark, writer.warehouse) == [(2, 0, 4, 5), (3, 0, 0, 1)]
    assert metrics is not None and metrics["num_deleted_rows"] == 1


def test_a_second_write_to_a_table_in_one_version_needs_its_own_app_id(
    spark: SparkSession, writer: DeltaWriter
) -> None:
    writer.merge("ledgers", _ledgers(spark, [("t", 0, 1, 0, 9, 10)])).when_not_matched_insert().execute(
        spark, version=5
    )
    second = _ledgers(spark, [("t", 0, 2, 0, 4, 5)])
    writer.merge("ledgers", second).when_not_matched_insert().execute(spark, version=5)  # skipped
    assert _read(spark, writer.warehouse) == [(1, 0, 9, 10)]
    writer.merge("ledgers", second).when_not_matched_insert().with_app_id("app-1:second").execute(
        spark, version=5
    )
    assert _read(spark, writer.warehouse) == [(1, 0, 9, 10), (2, 0, 4, 5)]


def test_clauses_run_in_order_and_the_match_can_be_on_other_columns(
    spark: SparkSession, writer: DeltaWriter
) -> None:
    writer.merge("ledgers", _ledgers(spark, [("t", 0, 1, 0, 9, 10)])).when_not_matched_insert().execute(spark)
    # matched on (topic, partition, first_entry_id): the first matching clause wins
    rows = _ledgers(spark, [("t", 0, 7, 0, 3, 4)])
    (
        writer.merge("ledgers", rows)
        .on_keys(("topic", "partition", "first_entry_id"))
        .when_matched_update("s.entries > 100")  # not taken
        .when_matched_update(columns=["entries"])
        .when_not_matched_insert()
        .execute(spark)
    )
    assert _read(spark, writer.warehouse) == [(1, 0, 9, 4)]


def test_an_append_is_a_plain_commit_with_its_tag(spark: SparkSession, writer: DeltaWriter) -> None:
    """Appends are not idempotent on their own: the ingest skips a repeated one by its tag
    (``tests/jobs/ingest/test_recovery.py``)."""
    rows = _ledgers(spark, [("t", 0, 1, 0, 9, 10)])
    for _ in range(2):
        writer.append(spark, "ledgers", rows, tag="app-1:3")
    assert _read(spark, writer.warehouse) == [(1, 0, 9, 10)] * 2
    history = spark.sql(f"DESCRIBE HISTORY delta.`{writer.warehouse}/ledgers`").collect()
    assert [(h.operation, h.userMetadata) for h in history[:2]] == [("WRITE", "app-1:3")] * 2


def test_each_write_is_reported_with_its_name(spark: SparkSession, tmp_path: Path) -> None:
    warehouse = str(tmp_path / "warehouse")
    ensure_tables(spark, warehouse, ["ledgers"])
    seen: list[str] = []
    writer = DeltaWriter(warehouse, "app-2", on_write=lambda what, began: seen.append(what))
    rows = _ledgers(spark, [("t", 0, 1, 0, 9, 10)])
    writer.merge("ledgers", rows).when_not_matched_insert().execute(spark, version=1)
    writer.append(spark, "ledgers", rows, tag="x")
    assert seen == ["merge ledgers", "write ledgers"]


def test_only_the_tables_named_are_created(spark: SparkSession, tmp_path: Path) -> None:
    """The fixtures above create the one table they write (all fourteen cost seconds a test)."""
    warehouse = tmp_path / "warehouse"
    assert ensure_tables(spark, str(warehouse), ["ledgers"]) == ["ledgers"]
    assert [p.name for p in warehouse.iterdir()] == ["ledgers"]
    assert ensure_tables(spark, str(warehouse), ["ledgers"]) == []


def test_changes_without_a_delete_write_what_an_upsert_writes(spark: SparkSession, tmp_path: Path) -> None:
    """The ``producers`` projection was an upsert and is now changes (a DELETE_TOPIC deletes
    its rows): on rows that delete nothing, both leave the same table."""
    batches = [
        [("t", 0, 1, 0, 9, 10, "upsert"), ("t", 0, 2, 0, 4, 5, "upsert")],
        [("t", 0, 2, 0, 7, 8, "upsert"), ("t", 0, 3, 0, 0, 1, "upsert"), ("u", 1, 1, 0, 2, 3, "upsert")],
    ]
    tables = []
    for name, clauses in (("upsert", upsert), ("changes", changes)):
        warehouse = str(tmp_path / name)
        ensure_tables(spark, warehouse, ["ledgers"])
        writer = DeltaWriter(warehouse, "app-1")
        for version, rows in enumerate(batches, start=1):
            clauses(writer.merge("ledgers", _ledgers(spark, rows, op=True))).execute(spark, version=version)
        tables.append(sorted(tuple(r) for r in read_table(spark, warehouse, "ledgers").collect()))
    assert tables[0] == tables[1] and len(tables[0]) == 4
