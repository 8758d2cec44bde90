"""The warehouse: where each Delta table lives, creating them, and reading them (with time travel).

Every job reaches a table through this module, so the layout (one directory per table under the
warehouse, CONTRACT.md section 2) is decided in one place.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from jobs.platform import locations
from jobs.platform.java import jvm_class
from jobs.platform.new_tables import (
    CreationSettings,
    commit_like,
    creation_settings,
    find_model,
    keep_model,
    model_key,
)
from schemas.tables import TABLE_CLUSTERING, TABLES

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("ackstate.tables")


CHECKPOINT_INTERVAL = 100
"""``delta.checkpointInterval`` of the tables ackstate creates: Delta writes a checkpoint of a
table's log inside every 100th commit instead of every 10th (its default).

Why: an ingest batch commits once to each table it changes, so the state tables reach each
multiple of the interval together, and that batch writes all their checkpoints inside its
commits: 7 to 8 s more on two cores, every 10th batch (README, "Benchmarks"). A reader that
rebuilds a table's state reads the last checkpoint and the commits after it, at most 99 small
JSON files; ``ackstate compact`` writes a checkpoint of every table it compacts."""


def table_path(warehouse: str | Path, name: str) -> str:
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; tables are {sorted(TABLES)}")
    return locations.join(warehouse, name)


TABLE_THREADS = 4
"""Tables ``ensure_tables`` creates or checks side by side. Each is a Delta commit or a log
read driven from the driver, one call at a time per table: in a warm JVM the 14 tables of a
new warehouse took 1.39 s one after the other and 0.93 s four at a time, and checking those of
an existing one 0.28 s against 0.20 s (medians of six, alternated, 2026-12-04). A new
warehouse is every demo's and most tests' start; every ingest, compaction and bootstrap checks
the tables."""


def ensure_tables(
    spark: SparkSession, warehouse: str | Path, names: Sequence[str] | None = None
) -> list[str]:
    """Create every missing table (or those of ``names``), clustered by topic partition and
    checkpointed every ``CHECKPOINT_INTERVAL`` commits; return the names created, in
    ``TABLES`` order (or that of ``names``).

    Idempotent. Columns are only ever added (CONTRACT.md), so a table that an older ackstate
    created gets the columns it lacks, appended (``ALTER TABLE ... ADD COLUMNS``): the writers
    name every column of the current schema. Each table costs a Delta commit or a log read, so
    a caller that needs one names it, and several go ``TABLE_THREADS`` at a time.
    """
    wanted = list(TABLES if names is None else names)
    settings = creation_settings(spark) if getattr(spark, "_jvm", None) is not None else None
    if len(wanted) == 1:  # a caller that names one table: no thread, no py4j connection of its own
        made = [_ensure_table(spark, warehouse, wanted[0], settings)]
    else:
        with ThreadPoolExecutor(max_workers=TABLE_THREADS, thread_name_prefix="ackstate-tables") as pool:
            made = list(pool.map(lambda name: _ensure_table(spark, warehouse, name, settings), wanted))
    created = [name for name, was_made in zip(wanted, made, strict=True) if was_made]
    if created:
        log.info("created tables %s under %s", ", ".join(created), warehouse)
    return created


def _ensure_table(
    spark: SparkSession, warehouse: str | Path, name: str, settings: CreationSettings | None
) -> bool:
    """Create the table ``name`` if it is missing (True), else add the columns it lacks.

    A table whose kind was created before, in this process or another one, is created as that
    one was (``jobs.platform.new_tables``); the first goes through Delta's table builder.
    Whether it exists, and its columns, are read from Delta's log (``DeltaLog.update``) rather
    than by ``DeltaTable.isDeltaTable`` and a DataFrame of the table, which Spark analyses: the
    14 tables of a warehouse 0.14 s against 0.39 s one after the other. Where the JVM is not
    reachable from Python (Spark Connect, ``settings`` None), Delta's Python API answers and
    creates."""
    from delta.tables import DeltaTable

    path = table_path(warehouse, name)
    definition: dict[str, Any] = {  # what the builder is given
        "schema": TABLES[name].jsonValue(),
        "clustering": list(TABLE_CLUSTERING[name]),
        "properties": {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)},
    }
    key = None if settings is None else model_key(name, definition, settings)
    if key is None:
        exists = DeltaTable.isDeltaTable(spark, path)
        columns = set(DeltaTable.forPath(spark, path).toDF().columns) if exists else set()
    else:
        model = find_model(key)
        if model is not None and not locations.exists(path):
            table_log = delta_log(spark, path)
            try:
                if commit_like(spark, table_log, model, definition["clustering"]):
                    return True
            except Exception:
                if int(current_snapshot(table_log).version()) < 0:
                    raise
                log.info("table %s at %s was created by another writer first", name, path)
        snapshot = current_snapshot(delta_log(spark, path))
        exists = int(snapshot.version()) >= 0
        columns = set(snapshot.schema().fieldNames()) if exists else set()
    if exists:
        _add_missing_columns(spark, path, name, columns)
        return False
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(TABLES[name])
    builder = builder.clusterBy(*definition["clustering"])
    for prop, value in definition["properties"].items():
        builder = builder.property(prop, value)
    builder.execute()
    if key is not None:
        snapshot = current_snapshot(delta_log(spark, path))
        if int(snapshot.version()) == 0:  # nobody wrote to it since
            keep_model(spark, key, snapshot)
    return True


def _add_missing_columns(spark: SparkSession, path: str, name: str, existing: set[str]) -> None:
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
    if getattr(spark, "_jvm", None) is not None:
        version = int(current_snapshot(delta_log(spark, path)).version())
        if version >= 0:
            return version
    return int(DeltaTable.forPath(spark, path).history(1).first()["version"])


def holds_no_rows(spark: SparkSession, warehouse: str | Path, name: str, version: int) -> bool:
    """Whether the table is known, without a Spark job, to have no rows at ``version``: that is
    its newest version as last read (``latest_version``) and its checksum counts no file.

    A batch into a new warehouse reads its state from tables just created; learning from their
    files that they are empty costs a snapshot and a scan each (about 2 s of that batch).
    False means "not known", not "has rows"."""
    if getattr(spark, "_jvm", None) is None:
        return False
    snapshot = delta_log(spark, table_path(warehouse, name)).unsafeVolatileSnapshot()
    return int(snapshot.version()) == version and counts_no_file(snapshot)


def delta_log(spark: SparkSession, path: str) -> Any:
    """Delta's ``DeltaLog`` of the table at ``path`` (a JVM object, Delta's internal API; Delta
    keeps one per table and session's file system settings)."""
    return jvm_class(spark._jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]


def current_snapshot(table_log: Any) -> Any:
    """The snapshot of a ``DeltaLog``'s newest version, after listing the log for commits made
    since Delta last looked (``DeltaLog.update`` with its default arguments)."""
    return table_log.update(
        False, getattr(table_log, "update$default$2")(), getattr(table_log, "update$default$3")()
    )


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


def local_frame(spark: SparkSession, rows: Sequence[tuple[Any, ...]], schema: StructType | str) -> DataFrame:
    """The driver's ``rows`` (tuples in the order of ``schema``'s columns; a struct type or a
    DDL string) as a frame Spark holds in its plan (a local relation, through Arrow).

    Why: ``createDataFrame(list)`` is a Python RDD. Each plan that reads it runs a job whose
    tasks start Python workers, so a batch's topic partitions cost a job per join they were
    broadcast to, and its one-row ``ingest_batches`` append a job of Python tasks. A local
    relation is read in the driver: it is broadcast with no job, and the optimizer knows when
    it is empty (a join with an empty one becomes a projection, with no shuffle)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    arrow = to_arrow_schema(struct)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in struct.fields]
    if len(columns) != len(struct.fields):
        raise ValueError(f"rows of {len(columns)} values for {len(struct.fields)} columns")
    table = pa.Table.from_arrays(
        [pa.array(list(values), type=f.type) for values, f in zip(columns, arrow, strict=True)], schema=arrow
    )
    return spark.createDataFrame(table, struct)


def local_copy(spark: SparkSession, frame: DataFrame, schema: StructType) -> DataFrame:
    """``frame``'s rows (of ``schema``), collected into the driver and held in the plan as a
    local relation (``local_frame``), for a frame known to be small.

    Why: Spark's estimate of a local relation's size is its size. The estimate of any other
    frame is derived from its plan, and over a join or cogroup it is the product of the sides':
    a single-partition batch's apply output was estimated at 10^17 bytes for 1,000 events, and
    its state, kept from that output, made the next batch's overflow. Spark plans a join of two
    single-partition frames without a shuffle only while it estimates each below
    ``spark.sql.maxSinglePartitionBytes`` (``jobs.ingest.batch``)."""
    return local_copy_and_rows(spark, frame, schema)[0]


def local_copy_and_rows(
    spark: SparkSession, frame: DataFrame, schema: StructType
) -> tuple[DataFrame, pa.Table]:
    """``local_copy``, and the rows it holds as the Arrow table collected: for a caller that
    also reads them in the driver.

    Fields inside structs, arrays and maps are made nullable on the way: Spark may call such a
    field non-null (``coalesce(batch_index, -1)`` in a message id) while the struct that holds
    it is null in some row, and pyspark's conversion to Arrow then refuses the column."""
    from pyspark.sql import functions as F

    loose = [(f.name, f.dataType, _nested_nullable(f.dataType)) for f in frame.schema.fields]
    changed = {name: data_type for name, was, data_type in loose if data_type != was}
    if changed:  # only the columns that change: each column built costs a few py4j calls
        frame = frame.withColumns({name: F.col(name).cast(t) for name, t in changed.items()})
    rows = frame.toArrow()
    schema = T.StructType(
        [T.StructField(f.name, _nested_nullable(f.dataType), f.nullable, f.metadata) for f in schema.fields]
    )
    return spark.createDataFrame(rows, schema), rows


def release(frame: DataFrame) -> None:
    """Free the blocks that hold ``frame``'s rows if ``localCheckpoint`` made it; else nothing.

    A persisted frame is freed by ``unpersist``. A locally checkpointed one is freed only once
    the driver's garbage collector finds its RDD unreachable, which Spark forces every 30
    minutes (``spark.cleaner.periodicGC.interval``). Until then the checkpoints of every
    micro-batch, a million input rows each, stay in the block manager, which spills the older
    ones to disk to make room. Not blocking: the blocks are removed in the background.
    """
    plan = frame._jdf.queryExecution().analyzed()  # type: ignore[attr-defined]
    if plan.nodeName() == "LogicalRDD":
        plan.rdd().unpersist(False)


def _nested_nullable(data_type: T.DataType) -> T.DataType:
    """``data_type`` with every field, element and value inside it nullable."""
    if isinstance(data_type, T.StructType):
        return T.StructType(
            [T.StructField(f.name, _nested_nullable(f.dataType), True, f.metadata) for f in data_type.fields]
        )
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_nested_nullable(data_type.elementType), True)
    if isinstance(data_type, T.MapType):
        return T.MapType(data_type.keyType, _nested_nullable(data_type.valueType), True)
    return data_type


def empty_frame(spark: SparkSession, schema: StructType | str) -> DataFrame:
    """A frame of ``schema`` with no rows that Spark's optimizer knows is empty (``local_frame``)."""
    return local_frame(spark, [], schema)


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
