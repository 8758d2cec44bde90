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

if TYPE_CHECKING:
    import pyarrow as pa
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
    from pyspark.sql.pandas.types import to_arrow_schema

    if rows.num_rows == 0:
        return None
    arrow = _utc(to_arrow_schema(schema))
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


def add_file(jvm: Any, written: DataFile) -> Any:
    """Delta's ``AddFile`` of ``written`` (a JVM object): no partition values, a data change,
    no tags, no deletion vector, no row ids (Delta assigns them in the commit where the table
    tracks rows), as ``writeFiles`` makes one for an unpartitioned table."""
    from jobs.platform.java import jvm_class

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


def _utc(arrow: pa.Schema) -> pa.Schema:
    """``arrow`` with every timestamp in UTC: the instant is what Parquet stores."""
    import pyarrow as pa

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
