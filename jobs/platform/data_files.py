"""A Delta table's data file written from the driver with Arrow: the Parquet file and the
statistics its ``AddFile`` carries.

Why: a small batch's rewrite (``jobs.platform.rewrite``) leaves a few dozen rows per table, and
Delta's ``writeFiles`` spends most of its time around them, not on them: it plans the write,
builds the statistics expressions of every column, starts a Spark job whose task opens a
Parquet writer, and commits a file-output protocol. For a table's 6-18 rows read from its files
in one partition, ``writeFiles`` took 224-362 ms and collecting the rows with ``toArrow`` and
writing them with ``pyarrow.parquet`` 76-103 ms (README, "Benchmarks"). The rows are the same
rows (``merged``'s, collected), so only the file that holds them is written another way.

The statistics are Delta's (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``) for the
columns Delta collects them for: the first ``delta.dataSkippingNumIndexedCols`` (32) columns of
the table, a minimum and a maximum for numbers, strings, dates and timestamps, a null count for
every column (Delta nests a struct's; no table has one, and one would be left out here). They
differ from Delta's own in two ways, both bounds of every value the file holds: a string is not
truncated to 32 characters (Delta keeps a prefix and, for a maximum, a character above the
rest), and a timestamp, written to the millisecond as Delta writes it, has its minimum rounded
down and its maximum up. A column all null has no minimum or maximum, as in Delta.
``tests/jobs/platform/test_data_files.py`` holds the JSON to Delta's, table by table.

Only local tables are written this way (``is_local``): a table on object storage goes through
Delta's ``writeFiles``, whose file system settings the driver's Python does not have.

``append_rows`` appends a small batch's rows the same way (``ingest_batches``, and the appends
of a batch that runs in one partition): a file written here and Delta's own append commit,
with no Spark job. An ``ingest_batches`` append through ``DataFrameWriter`` took 0.22-0.31 s of
a warm 1,000-event batch, after every other write (README, "Benchmarks").
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.platform import locations
from jobs.platform.java import jvm_class, scala_seq
from jobs.platform.tables import delta_log

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

INDEXED_COLUMNS = 32
"""Delta's default ``delta.dataSkippingNumIndexedCols``: the leading columns it keeps statistics
for. ackstate's tables do not set the property."""


@dataclass(frozen=True)
class DataFile:
    """A Parquet file written into a table's directory: what its ``AddFile`` records."""

    name: str
    """Relative to the table, as ``AddFile.path`` (no character that needs encoding)."""
    size: int
    modification_time: int
    """Milliseconds since the epoch, as the file system gives it."""
    stats: str
    """Delta's statistics JSON."""


def is_local(table_path: str) -> bool:
    """Whether the table lies on the local file system (a path or a ``file:`` URI)."""
    return not locations.is_uri(table_path)


def write_data_file(table_path: str, rows: pa.Table, schema: StructType) -> DataFile | None:
    """Write ``rows`` (the table's columns, in its order) as one Parquet file in the table's
    directory, with the table's Arrow types; None for no rows (Delta's ``writeFiles`` writes no
    file then either)."""
    import pyarrow.parquet as pq

    if rows.num_rows == 0:
        return None
    arrow = table_arrow_schema(schema)
    rows = rows.select(schema.fieldNames()).cast(arrow)
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    directory = Path(locations.resolve(table_path))
    path = directory / name
    pq.write_table(rows, path, compression="snappy")
    status = os.stat(path)
    return DataFile(name, status.st_size, status.st_mtime_ns // 1_000_000, delta_stats(rows, schema))


def delta_stats(rows: pa.Table, schema: StructType) -> str:
    """Delta's statistics of ``rows`` (module docstring)."""
    import pyarrow.compute as pc

    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in schema.fields[:INDEXED_COLUMNS]:
        kind = field.dataType.typeName()
        if kind == "struct":  # Delta nests a struct's statistics; none of ackstate's tables has one
            continue
        column = rows.column(field.name)
        nulls[field.name] = column.null_count
        if kind in ("array", "map", "binary", "boolean") or column.null_count == rows.num_rows:
            continue
        low, high = (value.as_py() for value in pc.min_max(column).values())
        if kind == "timestamp":
            low, high = _millis(low, up=False), _millis(high, up=True)
        elif kind == "date":
            low, high = low.isoformat(), high.isoformat()
        minimum[field.name], maximum[field.name] = low, high
    stats = {"numRecords": rows.num_rows, "minValues": minimum, "maxValues": maximum, "nullCount": nulls}
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)


def append_rows(spark: SparkSession, table_path: str, rows: pa.Table, schema: StructType, tag: str) -> bool:
    """Append ``rows`` (the table's columns, ``schema``) to the local table at ``table_path``
    as one file written here, in Delta's own append commit: operation ``WRITE`` in mode
    ``Append``, a blind append (nothing read, so no concurrent commit conflicts with it but a
    change of the table's metadata), ``tag`` as its ``userMetadata`` and the file, row and byte
    counts ``DataFrameWriter`` reports. False, with nothing written, where Delta's own append
    must decide: a table on object storage, a table whose schema in its log is not ``schema``
    (Delta refuses or merges it), one with column mapping or CHECK constraints, or a null in a
    NOT NULL column (Delta refuses it with its error)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    if not is_local(table_path) or has_null_in_required(rows, schema):
        return False
    txn = delta_log(spark, table_path).startTransaction()
    if not files_are_rows(txn) or _has_constraints(txn) or _logged_schema(txn) != schema:
        return False
    actions = file_actions(spark, txn, table_path, rows, schema)
    txn.commit(scala_seq(jvm, actions), write_operation(jvm, tag, predicate=None, partition_by=[]))
    return True


def file_actions(
    spark: SparkSession, txn: Any, table_path: str, rows: pa.Table, schema: StructType
) -> list[Any]:
    """Write ``rows`` as the table's file (``write_data_file``) and return its ``AddFile`` (none
    for no rows), with the metrics ``writeFiles`` would have registered in ``txn``."""
    written = write_data_file(table_path, rows, schema)
    files = [] if written is None else [written]
    register_write_metrics(spark, txn, files, rows.num_rows)
    return [add_file(spark._jvm, f) for f in files]  # type: ignore[attr-defined]


def has_null_in_required(rows: pa.Table, schema: StructType) -> bool:
    """Whether a column the table declares NOT NULL holds a null in ``rows``."""
    return any(not f.nullable and rows.column(f.name).null_count for f in schema.fields)


def files_are_rows(txn: Any) -> bool:
    """Whether a table's rows are exactly its files' rows, with its columns under their own
    names: no deletion vectors, no column mapping (the only table features of Delta that change
    what a file's rows mean). ``txn``: a Delta transaction on it."""
    configuration = txn.metadata().configuration()
    mapping = configuration.get("delta.columnMapping.mode")
    if not mapping.isEmpty() and mapping.get() != "none":
        return False
    return "deletionVectors" not in str(txn.protocol().toString())


def _logged_schema(txn: Any) -> StructType:
    """The table's schema as its log holds it."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(txn.metadata().schema().json()))


def _has_constraints(txn: Any) -> bool:
    """Whether the table has CHECK constraints (``delta.constraints.*``), which Delta's own
    writes check row by row."""
    return "delta.constraints." in str(txn.metadata().configuration().keySet().mkString(","))


def register_write_metrics(spark: SparkSession, txn: Any, written: list[DataFile], rows: int) -> None:
    """Give ``txn`` the metrics ``writeFiles`` registers for the files it writes (files, output
    rows and bytes), so that the commit's ``operationMetrics`` in the history count the files
    written here as they count Delta's."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    sql_metrics = jvm_class(jvm, "org.apache.spark.sql.execution.metric.SQLMetrics")
    context = spark.sparkContext._jsc.sc()  # type: ignore[attr-defined]
    metrics = getattr(jvm_class(jvm, "scala.collection.immutable.Map$"), "MODULE$").empty()
    for name, value in (
        ("numFiles", len(written)),
        ("numOutputRows", rows),
        ("numOutputBytes", sum(f.size for f in written)),
    ):
        metric = sql_metrics.createMetric(context, name)
        metric.set(value)
        metrics = metrics.updated(name, metric)
    txn.registerSQLMetrics(spark._jsparkSession, metrics)  # type: ignore[attr-defined]


def add_file(jvm: Any, written: DataFile) -> Any:
    """Delta's ``AddFile`` of ``written`` (a JVM object): no partition values, a data change,
    no tags, no deletion vector, no row ids (Delta assigns them in the commit where the table
    tracks rows), as ``writeFiles`` makes one for an unpartitioned table."""
    none = jvm_class(jvm, "scala.Option").empty()
    no_values = getattr(jvm_class(jvm, "scala.collection.immutable.Map$"), "MODULE$").empty()
    add = jvm_class(jvm, "org.apache.spark.sql.delta.actions.AddFile")
    return add(
        written.name,
        no_values,
        written.size,
        written.modification_time,
        True,
        written.stats,
        None,
        None,
        none,
        none,
        none,
        none,
        none,
    )


def write_operation(
    jvm: Any, tag: str | None, *, predicate: str | None, partition_by: list[str] | None
) -> Any:
    """Delta's ``WRITE`` operation in mode ``Append`` with ``tag`` as its user metadata, the
    ``predicate`` a rewrite names itself by (None: an append has none) and ``partition_by`` (an
    append's empty list, as ``DataFrameWriter`` gives it).

    A rewrite commits it too: Delta has no operation for "replace these files", and its other
    ones either rebuild the table's state after the commit (``MANUAL UPDATE``: a Spark job) or
    claim to be a command that did not run."""
    option = jvm_class(jvm, "scala.Option")
    none = option.empty()
    metadata = option.apply(tag) if tag is not None else none
    where = option.apply(predicate) if predicate is not None else none
    partitions = option.apply(scala_seq(jvm, list(partition_by))) if partition_by is not None else none
    write = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaOperations$Write")
    append = jvm_class(jvm, "org.apache.spark.sql.SaveMode").valueOf("Append")
    return write(append, partitions, where, metadata, none, none, none, none, none)


def table_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow types a table's rows are written in: Spark's for ``schema``, with every
    timestamp in UTC (the instant is what Parquet stores)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema)
    fields = [
        f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f for f in arrow
    ]
    return pa.schema(fields)


def _millis(value: dt.datetime, *, up: bool) -> str:
    """A timestamp as Delta's statistics write it (UTC, to the millisecond), rounded down or up
    so that it stays a bound."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    value = value.astimezone(dt.UTC)
    extra = value.microsecond % 1000
    value = value - dt.timedelta(microseconds=extra)
    if up and extra:
        value += dt.timedelta(milliseconds=1)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
