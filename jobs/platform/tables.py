"""The warehouse: where each Delta table lives, creating them, and reading them (with time travel).

Every job reaches a table through this module, so the layout (one directory per table under the
warehouse, CONTRACT.md section 2) is decided in one place.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.platform import locations
from schemas.tables import TABLE_CLUSTERING, TABLES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("ackstate.tables")


def table_path(warehouse: str | Path, name: str) -> str:
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; tables are {sorted(TABLES)}")
    return locations.join(warehouse, name)


def ensure_tables(
    spark: SparkSession, warehouse: str | Path, names: Sequence[str] | None = None
) -> list[str]:
    """Create every missing table (or those of ``names``), clustered by topic partition; return
    the names created.

    Idempotent. Columns are only ever added (CONTRACT.md), so a table that an older ackstate
    created gets the columns it lacks, appended (``ALTER TABLE ... ADD COLUMNS``): the writers
    name every column of the current schema. Each table costs a Delta commit or a log read
    (seconds for all of them), so a caller that needs one names it.
    """
    from delta.tables import DeltaTable

    created = []
    for name in TABLES if names is None else names:
        schema = TABLES[name]
        path = table_path(warehouse, name)
        if DeltaTable.isDeltaTable(spark, path):
            _add_missing_columns(spark, path, name)
            continue
        builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
        builder = builder.clusterBy(*TABLE_CLUSTERING[name])
        builder.execute()
        created.append(name)
    if created:
        log.info("created tables %s under %s", ", ".join(created), warehouse)
    return created


def _add_missing_columns(spark: SparkSession, path: str, name: str) -> None:
    from delta.tables import DeltaTable

    existing = set(DeltaTable.forPath(spark, path).toDF().columns)
    missing = [f for f in TABLES[name].fields if f.name not in existing]
    if missing:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
        log.info("table %s: added column(s) %s", name, ", ".join(f.name for f in missing))


def latest_version(spark: SparkSession, warehouse: str | Path, name: str) -> int:
    """The table's current Delta version: what a job reads with ``as_of`` to know what it read.

    Asked of Delta's log (``DeltaLog.update``, the listing of ``_delta_log``) rather than of
    ``history(1)``, which runs a Spark job per table: an ingest batch asks three times. A read
    ``as_of`` that version then finds Delta's snapshot of it already loaded. Where the JVM is
    not reachable from Python (Spark Connect), ``history(1)`` answers.
    """
    from delta.tables import DeltaTable

    path = table_path(warehouse, name)
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]
        snapshot = delta_log.update(
            False, getattr(delta_log, "update$default$2")(), getattr(delta_log, "update$default$3")()
        )
        version = int(snapshot.version())
        if version >= 0:
            return version
    return int(DeltaTable.forPath(spark, path).history(1).first()["version"])


def holds_no_rows(spark: SparkSession, warehouse: str | Path, name: str, version: int) -> bool:
    """Whether the table is known, without a Spark job, to have no rows at ``version``: that is
    its newest version as last read (``latest_version``) and its checksum counts no file.

    A batch into a new warehouse reads its state from tables just created; learning from their
    files that they are empty costs a snapshot and a scan each (about 2 s of that batch).
    False means "not known", not "has rows"."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    path = table_path(warehouse, name)
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]
    snapshot = delta_log.unsafeVolatileSnapshot()
    return int(snapshot.version()) == version and counts_no_file(snapshot)


def version_checksum(snapshot: Any) -> Any | None:
    """The checksum (``.crc``) Delta wrote with a snapshot's version (a JVM ``VersionChecksum``),
    if any: the table's file count and idempotent-write versions, known without a Spark job."""
    checksum = snapshot.checksumOpt()
    return None if checksum.isEmpty() else checksum.get()


def counts_no_file(snapshot: Any) -> bool:
    """Whether the checksum of a snapshot's version says the table has no file (False: it has
    some, or there is no checksum)."""
    checksum = version_checksum(snapshot)
    return checksum is not None and int(checksum.numFiles()) == 0


def empty_frame(spark: SparkSession, schema: StructType | str) -> DataFrame:
    """A frame of ``schema`` (a struct type or a DDL string) with no rows, which Spark's optimizer
    knows is empty (a local relation): a join with it becomes a projection, with no shuffle and
    no job. ``createDataFrame([])`` is a Python RDD, found empty only when it runs."""
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no JVM to build it in
        return spark.createDataFrame([], schema)
    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    session = spark._jsparkSession  # type: ignore[attr-defined]
    no_rows = session.createDataFrame(jvm.java.util.ArrayList(), session.parseDataType(struct.json()))
    return DataFrame(no_rows, spark)


def read_table(
    spark: SparkSession, warehouse: str | Path, name: str, *, as_of: str | int | None = None
) -> DataFrame:
    """A table as a DataFrame; ``as_of`` is a Delta version (int or digits) or a timestamp."""
    reader = spark.read.format("delta")
    if as_of is not None:
        text = str(as_of)
        reader = (
            reader.option("versionAsOf", int(text))
            if text.isdigit()
            else reader.option("timestampAsOf", text)
        )
    return reader.load(table_path(warehouse, name))


def init_command(args: argparse.Namespace) -> int:
    """``ackstate init``: create the warehouse tables."""
    from jobs.platform.session import get_spark

    spark = get_spark(args.config)
    created = ensure_tables(spark, args.warehouse)
    print(
        f"warehouse {args.warehouse}: created {len(created)} table(s), {len(TABLES) - len(created)} existed"
    )
    return 0
