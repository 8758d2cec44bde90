"""``jobs.platform.data_files``: a small rewrite's file written from the driver holds the rows
and the statistics Delta's own write gives it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from jobs.ingest.batch import SINGLE_PARTITION
from jobs.platform import data_files, rewrite
from jobs.platform.data_files import delta_stats
from jobs.platform.delta_writer import DeltaWriter
from jobs.platform.session import session_settings
from jobs.platform.tables import ensure_tables, local_frame, read_table, table_path
from schemas.tables import TABLES
from tests.jobs.warehouse import commit_actions

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def _value(field: T.StructField, i: int, *, micros: int = 0, long_text: bool = False) -> Any:
    """A value of the field's type for row ``i``: distinct per row and column."""
    kind = field.dataType.typeName()
    text = f"{field.name}-{i}" + ("-" + "x" * 40 if long_text else "")
    return {
        "string": text,
        "integer": i * 7 - 3,
        "long": i * 1_000_003 - 5,
        "boolean": i % 2 == 0,
        "double": i / 3,
        "binary": bytearray(text.encode()),
        "timestamp": datetime(2026, 1, 2, 3, 4, 5) + timedelta(milliseconds=i * 250, microseconds=micros),
        "array": [i, i + 1],
    }[kind]


def _rows(schema: T.StructType, count: int, **kwargs: Any) -> list[tuple]:
    """``count`` rows; in the last, every column that may be null is null, and the second
    nullable column is null in every row (a column all null has no minimum or maximum)."""
    nullable = [f.name for f in schema.fields if f.nullable]
    always_null = set(nullable[1:2])
    rows = []
    for i in range(count):
        last = i == count - 1
        rows.append(
            tuple(
                None if f.name in always_null or (last and f.nullable) else _value(f, i, **kwargs)
                for f in schema.fields
            )
        )
    return rows


def _delta_stats(spark: SparkSession, tmp_path: Path, table: str, rows: list[tuple]) -> dict[str, Any]:
    """The statistics Delta's own write (an append in one task) gives ``rows``."""
    warehouse = str(tmp_path / f"delta-{table}")
    ensure_tables(spark, warehouse, [table])
    spark.createDataFrame(rows, TABLES[table]).coalesce(1).write.format("delta").mode("append").save(
        table_path(warehouse, table)
    )
    (added,) = [a["add"] for a in commit_actions(warehouse, table)[-1] if "add" in a]
    return json.loads(added["stats"])


@pytest.mark.parametrize("table", ["consumers", "cursors", "batch_acks", "pending_acks", "ingest_batches"])
def test_statistics_are_the_ones_delta_collects(spark: SparkSession, tmp_path: Path, table: str) -> None:
    """Strings, integers, booleans, binaries, arrays, timestamps on the millisecond, nulls and a
    column all null: the same JSON, value for value."""
    schema = TABLES[table]
    rows = _rows(schema, 3)
    ours = json.loads(delta_stats(spark.createDataFrame(rows, schema).toArrow(), schema))
    assert ours == _delta_stats(spark, tmp_path, table, rows)


def test_long_strings_and_microseconds_are_bounds_of_every_value(spark: SparkSession, tmp_path: Path) -> None:
    """Where Delta truncates (strings past 32 characters) or rounds (timestamps to the
    millisecond), the file's statistics still bound every value it holds."""
    table = "consumers"
    schema = TABLES[table]
    rows = _rows(schema, 3, micros=417, long_text=True)
    ours = json.loads(delta_stats(spark.createDataFrame(rows, schema).toArrow(), schema))
    delta = _delta_stats(spark, tmp_path, table, rows)
    assert ours["nullCount"] == delta["nullCount"] and ours["numRecords"] == delta["numRecords"]
    assert set(ours["minValues"]) == set(delta["minValues"])
    for position, field in enumerate(schema.fields):
        values = [r[position] for r in rows if r[position] is not None]
        if field.name not in ours["minValues"]:
            continue
        low, high = ours["minValues"][field.name], ours["maxValues"][field.name]
        if isinstance(field.dataType, T.TimestampType):
            low, high = (datetime.fromisoformat(v.replace("Z", "")) for v in (low, high))
            assert low < min(values) and max(values) < high  # rounded outwards, to the millisecond
        else:
            assert low == min(values) and high == max(values)  # exact, where Delta truncates
            if isinstance(field.dataType, T.StringType):
                assert len(delta["minValues"][field.name]) == 32


def _ledgers(spark: SparkSession, rows: list[tuple]):
    columns = (
        "topic string, partition int, ledger_id long, first_entry_id long, last_entry_id long, entries long"
    )
    return local_frame(spark, rows, columns + ", op string")


def test_a_small_rewrite_is_a_file_written_from_the_driver(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one partition, on a local table: one file per commit, written from the driver, whose
    statistics give the rewrite its topic partitions back; Delta reads the rows from it."""
    written: list[str] = []
    write = data_files.write_data_file

    def counting(path: str, rows: Any, schema: T.StructType) -> Any:
        written.append(path)
        return write(path, rows, schema)

    monkeypatch.setattr(data_files, "write_data_file", counting)
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledgers"])
    writer = DeltaWriter(warehouse, "app-1", rewrite=True)
    batches = [
        [("t", 0, 1, 0, 9, 10, "upsert"), ("t", 1, 1, 0, 3, 4, "upsert")],
        [("t", 0, 1, 0, 9, 0, "delete"), ("t", 1, 1, 0, 8, 9, "upsert"), ("u", 0, 1, 0, 0, 1, "upsert")],
    ]
    for version, rows in enumerate(batches, start=1):
        keys = sorted({(r[0], r[1]) for r in rows})
        with session_settings([spark], SINGLE_PARTITION):
            merge = writer.merge("ledgers", _ledgers(spark, rows)).changes()
            merge.within(keys, single_partition=True).execute(spark, version=version)
    assert written == [table_path(warehouse, "ledgers")] * 2
    assert sorted(tuple(r) for r in read_table(spark, warehouse, "ledgers").collect()) == [
        ("t", 1, 1, 0, 8, 9),
        ("u", 0, 1, 0, 0, 1),
    ]
    commits = commit_actions(warehouse, "ledgers")
    added = [[a["add"] for a in actions if "add" in a] for actions in commits[1:]]
    assert [len(files) for files in added] == [1, 1]
    assert [rewrite.partition_range(files[0]["stats"]) for files in added] == [
        (("t", 0), ("t", 1)),
        (("t", -(2**31)), ("u", 2**31)),  # two topics: any partition between them
    ]
    assert sum(1 for a in commits[2] if "remove" in a) == 1
    assert read_table(spark, warehouse, "ledgers").where("topic = 'u'").count() == 1


def test_a_null_in_a_not_null_column_is_refused_by_delta(spark: SparkSession, tmp_path: Path) -> None:
    """The driver does not write what Delta would refuse: the write goes to ``writeFiles``,
    which raises Delta's own NOT NULL error, and nothing is committed."""
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledgers"])
    writer = DeltaWriter(warehouse, "app-1", rewrite=True)
    rows = [("t", None, 1, 0, 9, 10, "upsert")]  # `partition` is NOT NULL
    with session_settings([spark], SINGLE_PARTITION), pytest.raises(Exception, match="NOT NULL"):
        writer.merge("ledgers", _ledgers(spark, rows)).changes().within(
            [("t", 0)], single_partition=True
        ).execute(spark, version=1)
    assert len(commit_actions(warehouse, "ledgers")) == 1  # the creation only


def _appended(warehouse: str, table: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The commitInfo and the added files of the table's last commit."""
    actions = commit_actions(warehouse, table)[-1]
    (info,) = [a["commitInfo"] for a in actions if "commitInfo" in a]
    return info, [a["add"] for a in actions if "add" in a]


@pytest.mark.parametrize("table", ["rejected_events", "send_receipts", "active_consumer_changes"])
def test_a_small_append_from_the_driver_commits_what_delta_commits(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    """The same rows appended through ``DataFrameWriter`` and from the driver: the same rows
    read back, the same statistics, and a commit Delta's history reads as the same append
    (``WRITE`` in mode Append, blind, the tag, the file, row and byte counts)."""
    written: list[str] = []
    write = data_files.write_data_file
    monkeypatch.setattr(data_files, "write_data_file", lambda *a: written.append(a[0]) or write(*a))
    schema = TABLES[table]
    rows = _rows(schema, 4)  # nulls only where the table allows them
    commits = {}
    for name, small in (("delta", False), ("driver", True)):
        warehouse = str(tmp_path / name)
        ensure_tables(spark, warehouse, [table])
        frame = spark.createDataFrame(rows, schema).coalesce(1)  # one file, as the driver writes
        DeltaWriter(warehouse, "app-1").append(spark, table, frame, tag="app-1:7", small=small)
        commits[name] = _appended(warehouse, table)
        read = sorted((tuple(r) for r in read_table(spark, warehouse, table).collect()), key=repr)
        assert read == sorted(rows, key=repr)
    assert written == [table_path(str(tmp_path / "driver"), table)]
    (delta_info, delta_files), (driver_info, driver_files) = commits["delta"], commits["driver"]
    assert [json.loads(f["stats"]) for f in driver_files] == [json.loads(f["stats"]) for f in delta_files]
    same = ("operation", "operationParameters", "isBlindAppend", "userMetadata", "readVersion")
    assert {k: driver_info.get(k) for k in same} == {k: delta_info.get(k) for k in same}
    counts = ("numFiles", "numOutputRows")
    assert {k: driver_info["operationMetrics"][k] for k in counts} == {
        k: delta_info["operationMetrics"][k] for k in counts
    }
    assert int(driver_info["operationMetrics"]["numOutputBytes"]) == driver_files[0]["size"]


def test_rows_from_the_driver_that_delta_would_refuse_go_to_delta(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An Arrow table with a null in a NOT NULL column is appended through ``DataFrameWriter``,
    which raises Delta's error; nothing is committed."""
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["send_receipts"])
    schema = TABLES["send_receipts"]
    rows = spark.createDataFrame(_rows(schema, 2), schema).toArrow()
    rows = rows.set_column(0, "topic", pa.array(["t", None], pa.string()))  # `topic` is NOT NULL
    with pytest.raises(Exception, match="NOT NULL"):
        DeltaWriter(warehouse, "app-1").append(spark, "send_receipts", rows, tag="app-1:1")
    assert len(commit_actions(warehouse, "send_receipts")) == 1  # the creation only


def test_a_table_whose_logged_schema_differs_is_appended_by_delta(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A table with a column more than ackstate declares (added by hand): ``append_rows``
    leaves it to Delta, whose append fills the column with nulls."""
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ingest_batches"])
    path = table_path(warehouse, "ingest_batches")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (note string)")
    schema = TABLES["ingest_batches"]
    rows = spark.createDataFrame(_rows(schema, 2), schema).toArrow()
    assert not data_files.append_rows(spark, path, rows, schema, "app-1:1")
    DeltaWriter(warehouse, "app-1").append(spark, "ingest_batches", rows, tag="app-1:1")
    assert spark.read.format("delta").load(path).where("note IS NULL").count() == 2
