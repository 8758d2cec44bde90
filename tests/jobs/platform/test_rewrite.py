"""``FileRewrite``: a MERGE written as a Delta transaction that replaces the files holding its
topic partitions leaves the rows Delta's MERGE leaves, once per (app id, version)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from jobs.ingest.batch import SINGLE_PARTITION
from jobs.platform.delta_writer import DeltaWriter, TableMerge
from jobs.platform.rewrite import committed_version, partition_range
from jobs.platform.session import session_settings
from jobs.platform.tables import ensure_tables, local_frame, read_table, table_path
from tests.jobs.warehouse import commit_actions

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

COLUMNS = "topic string, partition int, ledger_id long, first_entry_id long, last_entry_id long, entries long"


def _rows(spark: SparkSession, rows: list[tuple]):
    return spark.createDataFrame(rows, COLUMNS + ", op string")


def _table(spark: SparkSession, warehouse: str) -> list[tuple]:
    return sorted(tuple(r) for r in read_table(spark, warehouse, "ledgers").collect())


def _writers(spark: SparkSession, tmp_path: Path, modes=("merge", "rewrite")) -> dict[str, DeltaWriter]:
    out = {}
    for mode in modes:
        warehouse = str(tmp_path / mode)
        ensure_tables(spark, warehouse, ["ledgers"])
        out[mode] = DeltaWriter(warehouse, "app-1", rewrite=mode != "merge")
    return out


def _every_clause(merge: TableMerge) -> TableMerge:
    """Each kind of clause, with conditions that are true, false and null for some rows."""
    return (
        merge.when_matched_delete("s.op = 'delete'")
        .when_matched_update("s.op = 'figures'", ["entries"])
        .when_matched_update("s.entries > 100")  # null entries: does not hold
        .when_matched_update("s.op = 'upsert'")
        .when_not_matched_insert("s.op = 'upsert'")
        .when_not_matched_by_source_delete("t.topic = 't' AND t.ledger_id = 3")
    )


def _added_files(warehouse: str) -> list[int]:
    """The files each commit after the table's creation added to ``ledgers``."""
    return [sum(1 for a in actions if "add" in a) for actions in commit_actions(warehouse, "ledgers")[1:]]


def test_a_rewrite_leaves_the_rows_a_merge_leaves(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Also in one partition (a small batch's, ``single_partition``): one file per commit,
    computed with Arrow in the driver (``jobs.platform.arrow_merge``); and in the driver for a
    large batch whose rows the caller counted (``source_rows``)."""
    caplog.set_level(logging.DEBUG, logger="ackstate.rewrite")
    writers = _writers(spark, tmp_path, ("merge", "rewrite", "single", "counted"))
    batches = [
        [
            ("t", 0, 1, 0, 9, 10, "upsert"),
            ("t", 0, 2, 0, 4, 5, "upsert"),
            ("t", 0, 3, 0, 1, 2, "upsert"),
            ("t", 1, 1, 0, 3, 4, "upsert"),
            ("u", 0, 1, 0, 0, 1, "upsert"),
            ("u", 0, 3, 0, 0, 1, "upsert"),
        ],
        [
            ("t", 0, 1, 5, 5, 1, "delete"),  # matched: deleted
            ("t", 0, 2, 9, 9, 99, "figures"),  # matched: only `entries` moves
            ("t", 1, 1, 0, 8, None, "upsert"),  # matched: the null condition passes it on to upsert
            ("t", 1, 7, 0, 0, 1, "upsert"),  # new: inserted
            ("t", 1, 8, 0, 0, 1, "figures"),  # new, but no insert clause holds: dropped
        ],  # (t, 0, 3) matches nothing and the unmatched delete takes it; u is untouched
        [("u", 0, 3, 1, 1, 1, "upsert"), ("t", 0, 2, 0, 0, 500, "upsert")],
    ]
    for version, rows in enumerate(batches, start=1):
        for mode, writer in writers.items():
            # a small batch's source is held in the plan (jobs.platform.tables.local_copy)
            single = mode == "single"
            source = local_frame(spark, rows, COLUMNS + ", op string") if single else _rows(spark, rows)
            merge = _every_clause(writer.merge("ledgers", source))
            keys = sorted({(r[0], r[1]) for r in rows})
            with session_settings([spark], SINGLE_PARTITION if single else {}):
                counted = len(rows) if mode == "counted" else None
                merge.within(keys, single_partition=single, source_rows=counted).execute(
                    spark, version=version
                )
        for mode in ("rewrite", "single", "counted"):
            assert _table(spark, writers[mode].warehouse) == _table(spark, writers["merge"].warehouse), mode
    assert _table(spark, writers["rewrite"].warehouse) == [
        ("t", 0, 2, 0, 0, 500),
        ("t", 1, 1, 0, 8, None),
        ("t", 1, 7, 0, 0, 1),
        ("u", 0, 1, 0, 0, 1),
        ("u", 0, 3, 1, 1, 1),
    ]
    history = DeltaTable.forPath(spark, table_path(writers["rewrite"].warehouse, "ledgers")).history()
    assert {r["operation"] for r in history.filter("version > 0").collect()} == {"WRITE"}
    assert (
        _added_files(writers["single"].warehouse) == _added_files(writers["counted"].warehouse) == [1, 1, 1]
    )
    ways = [m[1] for r in caplog.records if (m := re.search(r"\((Arrow|Spark)\):", r.getMessage()))]
    assert ways == ["Spark", "Arrow", "Arrow"] * 3  # "rewrite" by Spark, "single" and "counted" not
    assert max(_added_files(writers["rewrite"].warehouse)) == 2  # two shuffle partitions


def test_a_version_already_committed_is_not_written_again(spark: SparkSession, tmp_path: Path) -> None:
    writer = _writers(spark, tmp_path)["rewrite"]
    first = _rows(spark, [("t", 0, 1, 0, 9, 10, "upsert")])
    again = _rows(spark, [("t", 0, 1, 0, 9, 77, "upsert")])
    writer.merge("ledgers", first).changes().within([("t", 0)]).execute(spark, version=1)
    writer.merge("ledgers", again).changes().within([("t", 0)]).execute(spark, version=1)
    # a writer of a new run knows no file yet: it asks Delta whether version 1 was committed
    restarted = DeltaWriter(writer.warehouse, "app-1", rewrite=True)
    restarted.merge("ledgers", again).changes().within([("t", 0)]).execute(spark, version=1)
    assert _table(spark, writer.warehouse) == [("t", 0, 1, 0, 9, 10)]
    path = table_path(writer.warehouse, "ledgers")
    assert DeltaTable.forPath(spark, path).history().count() == 2  # created, then one write


def test_a_commit_by_another_writer_between_rewrites_is_kept(spark: SparkSession, tmp_path: Path) -> None:
    writer = _writers(spark, tmp_path)["rewrite"]
    rows = [("t", 0, 1, 0, 9, 10, "upsert"), ("t", 0, 2, 0, 1, 2, "upsert")]
    writer.merge("ledgers", _rows(spark, rows)).changes().within([("t", 0)]).execute(spark, version=1)
    # another writer (a repair by hand) rewrites the file the rewrite writer knows of
    other = DeltaWriter(writer.warehouse, "repair")
    other.merge("ledgers", _rows(spark, [("t", 0, 2, 0, 1, 3, "upsert")])).changes().execute(spark)
    DeltaTable.forPath(spark, table_path(writer.warehouse, "ledgers")).optimize().executeCompaction()
    later = _rows(spark, [("t", 0, 1, 0, 9, 11, "upsert")])
    writer.merge("ledgers", later).changes().within([("t", 0)]).execute(spark, version=2)
    assert _table(spark, writer.warehouse) == [("t", 0, 1, 0, 9, 11), ("t", 0, 2, 0, 1, 3)]


def test_a_files_range_covers_its_truncated_statistics() -> None:
    long_topic = "persistent://tenant/namespace/" + "x" * 40
    stats = {
        "numRecords": 3,
        "minValues": {"topic": long_topic[:32], "partition": 0},
        "maxValues": {"topic": long_topic[:32] + "\U0010ffff", "partition": 2},
    }
    lowest, highest = partition_range(json.dumps(stats))
    assert lowest is not None and highest is not None
    assert lowest <= (long_topic, 5) <= highest  # topics differ: any partition of the range
    single = {
        "numRecords": 2,
        "minValues": {"topic": "t", "partition": 1},
        "maxValues": {"topic": "t", "partition": 3},
    }
    low, high = partition_range(json.dumps(single))
    assert low is not None and high is not None
    assert [p for p in range(5) if low <= ("t", p) <= high] == [1, 2, 3]
    assert partition_range(None) == (None, None)
    assert partition_range(json.dumps({"numRecords": 0})) == (None, None)


def test_the_last_batch_of_an_app_id_is_read_from_the_checksum_as_delta_reads_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``committed_version`` answers what ``txnVersion`` answers, from the version's checksum when
    it has the app ids and from Delta's state when it has none; either way the app id is
    recorded as read, so that a concurrent commit of the same app id conflicts."""
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledgers"])
    rows = _rows(spark, [("t", 0, 1, 0, 9, 10, "upsert")])
    for app_id, version in (("app-1", 1), ("app-1", 2), ("app-2", 5)):
        DeltaWriter(warehouse, app_id, rewrite=True).merge("ledgers", rows).changes().within(
            [("t", 0)]
        ).execute(spark, version=version)
    path = table_path(warehouse, "ledgers")
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog  # type: ignore[attr-defined]

    tracker = spark.sparkContext.statusTracker()

    def answers() -> tuple[dict[str, tuple[int, int, bool]], int]:
        delta_log.clearCache()  # a snapshot loaded afresh, with or without its checksum
        out, jobs = {}, 0
        for app_id in ("app-1", "app-2", "app-3"):
            txn = delta_log.forTable(spark._jsparkSession, path).startTransaction()
            # the jobs' ids, not their count: the tracker keeps the last spark.ui.retainedJobs
            # (1,000), and late in a session each new job evicts an old one
            before = set(tracker.getJobIdsForGroup(None))
            ours = committed_version(spark._jvm, txn, app_id)  # type: ignore[attr-defined]
            jobs += len(set(tracker.getJobIdsForGroup(None)) - before)
            read = app_id in str(txn.readTxn().toString())
            out[app_id] = (ours, int(txn.txnVersion(app_id)), read)
        return out, jobs

    expected = {"app-1": (2, 2, True), "app-2": (5, 5, True), "app-3": (-1, -1, True)}
    latest = Path(path) / "_delta_log" / f"{3:020d}.crc"
    assert "app-2" in latest.read_text()  # the checksum holds the app ids
    assert answers() == (expected, 0)  # no Spark job
    for checksum in (Path(path) / "_delta_log").glob("*.crc"):
        checksum.unlink()
    found, jobs = answers()
    assert found == expected and jobs > 0  # read from the table's state instead
