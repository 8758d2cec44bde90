"""Every write ackstate makes to its Delta tables: appends and MERGEs, idempotent per batch.

A MERGE is built clause by clause, as with Delta's own ``DeltaMergeBuilder``, and run by
``execute``::

    writer.merge("cursors", rows).when_matched_update().when_not_matched_insert().execute(
        spark, version=batch_id, tag=tag
    )

A MERGE with a ``version`` carries Delta's idempotent-write pair (``txnAppId`` = the writer's
app id, ``txnVersion`` = the version), so a MERGE that a crashed run already committed is
skipped when the batch runs again. Without one (compaction's ledger trims, which guard their
rows in the MERGE condition instead) it is a plain commit. An append is always a plain commit:
its caller skips an append a crashed run made by its ``tag`` (``jobs.ingest.recovery``). The
``tag`` of either goes into the commit's ``userMetadata``. A commit that loses a race with a
concurrent writer is run again (``jobs.platform.retry``): every source here is deterministic
and already materialised, and a losing commit wrote nothing.

Columns are the table's own (``schemas.tables.TABLES``), in its order; a MERGE matches on the
table's key (``TABLE_KEYS``) unless told otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from jobs.platform.data_files import append_rows, is_local
from jobs.platform.retry import DEFAULT_ATTEMPTS, retry_on_conflict
from jobs.platform.rewrite import Clause, FileRewrite, PartitionKey
from jobs.platform.session import session_settings
from jobs.platform.tables import table_path
from schemas.tables import TABLE_KEYS, TABLES
from schemas.udf import DELETE

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Row, SparkSession

_MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"

IS_DELETE = f"s.op = '{DELETE}'"
"""A projection change row that removes its key (``op`` of the apply UDF's rows)."""


@dataclass(frozen=True)
class TableMerge:
    """One MERGE into one table, built clause by clause; clauses run in the order given."""

    writer: DeltaWriter
    table: str
    source: DataFrame
    on: str
    clauses: tuple[Clause, ...] = ()
    app_id: str | None = None
    partitions: tuple[PartitionKey, ...] | None = None
    """The topic partitions that hold every source row and every row a clause may delete
    (``within``); None: unknown, so the write is a MERGE."""
    single_partition: bool = False
    """Whether the rewrite may run in one task (``within``)."""
    keys: tuple[str, ...] | None = None
    """The columns ``on`` matches equal (None: ``on`` is another condition)."""
    source_rows: int | None = None
    """How many rows ``source`` holds, where the caller counted them (``within``)."""

    def on_keys(self, keys: Sequence[str]) -> TableMerge:
        """Match on ``keys`` instead of the table's key (another unique column set)."""
        return replace(self, on=_key_condition(keys), keys=tuple(keys))

    def on_condition(self, condition: str) -> TableMerge:
        """Match on any condition over ``t`` (the table) and ``s`` (the source)."""
        return replace(self, on=condition, keys=None)

    def with_app_id(self, app_id: str) -> TableMerge:
        """A second idempotent write to one table in one batch needs an app id of its own:
        Delta skips a second commit of the same (app id, version) to a table."""
        return replace(self, app_id=app_id)

    def within(
        self,
        partitions: Sequence[PartitionKey],
        *,
        single_partition: bool = False,
        source_rows: int | None = None,
    ) -> TableMerge:
        """Every source row, and every table row a clause may delete, lies in ``partitions``
        (topic, partition): a writer with a ``FileRewrite`` then replaces the files holding
        them instead of running a MERGE (``jobs.platform.rewrite``), in one task when
        ``single_partition`` (a small source) and the files are small enough, in the driver
        when the source is small or has few enough ``source_rows``."""
        return replace(
            self, partitions=tuple(partitions), single_partition=single_partition, source_rows=source_rows
        )

    def when_matched_delete(self, condition: str | None = None) -> TableMerge:
        return self._add("delete", condition, None)

    def when_matched_update(
        self, condition: str | None = None, columns: Sequence[str] | None = None
    ) -> TableMerge:
        return self._add("update", condition, tuple(columns) if columns is not None else None)

    def when_not_matched_insert(self, condition: str | None = None) -> TableMerge:
        return self._add("insert", condition, None)

    def when_not_matched_by_source_delete(self, condition: str) -> TableMerge:
        """Delete the table's rows that no source row matches and that meet ``condition`` (over
        ``t`` only). Delta then reads every file the condition does not rule out."""
        return self._add("delete_unmatched", condition, None)

    def changes(self) -> TableMerge:
        """The clauses of a projection's changes: rows with ``op = delete`` remove their key, the
        others are upserted."""
        return (
            self.when_matched_delete(IS_DELETE)
            .when_matched_update(f"NOT ({IS_DELETE})")
            .when_not_matched_insert(f"NOT ({IS_DELETE})")
        )

    def execute(
        self, spark: SparkSession, *, version: int | None = None, tag: str | None = None
    ) -> Row | None:
        """Run the MERGE (again on a conflict); its metrics row (``num_deleted_rows``, ...), or
        None when it was written as a rewrite (``within``)."""
        from delta.tables import DeltaTable

        columns = self.writer.columns(self.table, self.source.columns)
        began = time.time()

        rewrite = self.writer.rewrite if self._by_partition() else None

        def run() -> Row | None:
            if rewrite is not None and self.partitions is not None:
                path = table_path(self.writer.warehouse, self.table)
                if rewrite.write(
                    spark,
                    path,
                    self.table,
                    self.source,
                    columns,
                    self.on,
                    self.clauses,
                    self.partitions,
                    app_id=(self.app_id or self.writer.app_id) if version is not None else None,
                    version=version,
                    tag=tag,
                    single_partition=self.single_partition,
                    keys=self.keys,
                    source_rows=self.source_rows,
                ):
                    return None
            merge = (
                DeltaTable.forPath(spark, table_path(self.writer.warehouse, self.table))
                .alias("t")
                .merge(self.source.alias("s"), self.on)
            )
            for clause in self.clauses:
                if clause.kind == "delete":
                    merge = merge.whenMatchedDelete(condition=clause.condition)
                elif clause.kind == "update":
                    cols = clause.columns if clause.columns is not None else columns
                    merge = merge.whenMatchedUpdate(clause.condition, {c: f"s.`{c}`" for c in cols})
                elif clause.kind == "insert":
                    merge = merge.whenNotMatchedInsert(clause.condition, {c: f"s.`{c}`" for c in columns})
                else:
                    merge = merge.whenNotMatchedBySourceDelete(condition=clause.condition)
            return merge.execute().first()

        metrics = self.writer.commit(spark, run, f"merge {self.table}", version, tag, self.app_id)
        self.writer.written(f"merge {self.table}", began)
        return metrics

    def _by_partition(self) -> bool:
        """Whether the match is on topic and partition among its keys, so that a source row
        matches only rows of its own topic partition (``within``)."""
        return self.partitions is not None and all(
            _key_condition([k]) in self.on.split(" AND ") for k in ("topic", "partition")
        )

    def _add(self, kind: str, condition: str | None, columns: tuple[str, ...] | None) -> TableMerge:
        return replace(self, clauses=(*self.clauses, Clause(kind, condition, columns)))


class DeltaWriter:
    """The writes of one application (an ingest query, a compaction run) to one warehouse.

    ``app_id`` is the idempotency key of its versioned writes; ``on_write`` is called with a
    write's name (``merge cursors``, ``write send_receipts``) and its start time when it is done
    (the ingest's per-phase timing); ``attempts`` bounds the retries of a conflicting commit;
    ``rewrite``: a MERGE told its topic partitions (``TableMerge.within``) is written as a rewrite.
    """

    def __init__(
        self,
        warehouse: str,
        app_id: str,
        *,
        on_write: Callable[[str, float], None] | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        rewrite: bool = False,
    ) -> None:
        self.warehouse = warehouse
        self.app_id = app_id
        self.on_write = on_write
        self.attempts = attempts
        self.rewrite = FileRewrite() if rewrite else None
        """The MERGEs told ``within`` which topic partitions they touch are written as
        rewrites (``jobs.platform.rewrite``), with the files of each table kept between them."""

    def merge(self, table: str, source: DataFrame) -> TableMerge:
        """A MERGE of ``source`` (alias ``s``) into ``table`` (alias ``t``) on the table's key."""
        keys = TABLE_KEYS[table]
        return TableMerge(self, table, source, _key_condition(keys), keys=tuple(keys))

    def append(
        self, spark: SparkSession, table: str, rows: DataFrame | pa.Table, *, tag: str, small: bool = False
    ) -> None:
        """Append ``rows`` (the table's columns, in its order) with ``tag`` in the commit.

        Rows already in the driver (an Arrow table), and a ``small`` frame's rows collected
        there, go to a local table as a file written from the driver in Delta's own append
        commit (``jobs.platform.data_files.append_rows``): no Spark job, where
        ``DataFrameWriter`` plans one and Delta builds the statistics expressions of every
        column. Anything that function leaves to Delta goes through ``DataFrameWriter``.

        Not idempotent on its own: Delta's idempotent-write check costs a job over the table's
        whole log state per append (most of a small append's time, in Delta 4.4), so the
        ingest skips an append a crashed run made by its tag instead (``jobs.ingest.recovery``).
        """
        import pyarrow as pa

        began = time.time()
        path = table_path(self.warehouse, table)
        schema = TABLES[table]
        collected = rows if isinstance(rows, pa.Table) else None
        if collected is None and small and is_local(path):
            collected = rows.select(*schema.fieldNames()).toArrow()
        if collected is None or not append_rows(spark, path, collected, schema, tag):
            # Arrow rows as a frame of their own types (every column nullable), so that a null
            # in a NOT NULL column reaches Delta, which refuses it with its own error
            frame = spark.createDataFrame(rows) if isinstance(rows, pa.Table) else rows
            (
                frame.select(*schema.fieldNames())
                .write.format("delta")
                .mode("append")
                .option("userMetadata", tag)
                .save(path)
            )
        self.written(f"write {table}", began)

    def columns(self, table: str, available: Sequence[str]) -> list[str]:
        """The table's columns that the source has, in the table's order."""
        present = set(available)
        return [f.name for f in TABLES[table].fields if f.name in present]

    def commit(
        self,
        spark: SparkSession,
        action: Callable[[], Any],
        what: str,
        version: int | None,
        tag: str | None,
        app_id: str | None = None,
    ) -> Any:
        """Run ``action`` (one commit) with the session settings of an idempotent write."""
        settings: dict[str, str] = {}
        if version is not None:
            settings[_TXN_APP_ID] = app_id or self.app_id
            settings[_TXN_VERSION] = str(version)
            # A batch's MERGE sources are projections of the apply UDF's local checkpoint:
            # deterministic and materialised. Delta's "auto" would still copy them to disk first
            # (it trusts only sources that read Delta tables alone): one job and one write per MERGE.
            settings[_MATERIALIZE_SOURCE] = "none"
        if tag is not None:
            settings[_USER_METADATA] = tag
        with session_settings([spark], settings):
            return retry_on_conflict(action, what=f"{what} ({tag or self.app_id})", attempts=self.attempts)

    def written(self, what: str, began: float) -> None:
        if self.on_write is not None:
            self.on_write(what, began)


def _key_condition(keys: Sequence[str]) -> str:
    return " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
