"""A batch's MERGE into a projection table, written as a Delta transaction of ackstate's own.

Why: a MERGE of a thousand changed rows costs a small table 1.3-1.6 s of a two-core machine
(README, "Benchmarks"): Delta plans and runs about five Spark jobs, among them the state of the
table's current version and a join that finds the files holding matched rows. A batch's
changes all lie in the topic partitions it touched, and every table is keyed by topic partition
first, so the files to replace can be found from each file's statistics (the smallest and
largest ``topic`` and ``partition`` it holds) without a join. ``FileRewrite`` then:

1. starts a transaction (``DeltaLog.startTransaction``) and marks the whole table read, so that
   any concurrent commit that adds or removes data conflicts (``jobs.platform.retry``);
2. finds the files whose statistics may hold a touched topic partition, from a list of the
   table's files it keeps between batches (``_Files``): while the table's newest version is the
   one this writer committed, nobody else changed the list;
3. reads those files' rows, applies the MERGE's clauses to them and the source in one full
   outer join (``merged``: the same rows a MERGE would leave), writes the result as new files
   (``writeFiles``), and commits their adds with the removes of the files read and, for a
   batch's write, Delta's idempotent-write action (``SetTransaction``: the app id and the
   batch id, as a MERGE with ``txnAppId``/``txnVersion`` commits it).

A batch that a crashed run already committed to the table is skipped: the transaction asks
Delta for the app id's last version unless this writer knows it, because the table's newest
version is its own commit. The list of files is rebuilt from Delta's snapshot (one Spark job)
when the table moved under the writer (compaction, another writer, a new run). Both come from
the checksum Delta wrote with the version read where it has them (``committed_version``; a
table with no files), so that the first batch into a new warehouse runs no job per table to
learn that it is empty.

The commit is Delta's ``WRITE`` operation with ``userMetadata`` = the batch's tag and a
``predicate`` that names it a rewrite (``rewrite_predicate``: an append has none); the rows
are those a MERGE would leave, in files of their own. A table with deletion vectors or column
mapping is not read this way (its files alone do not give its rows): such a write stays a MERGE.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.platform import locations
from jobs.platform.data_files import (
    file_actions,
    files_are_rows,
    has_null_in_required,
    is_local,
    write_operation,
)
from jobs.platform.java import java_list, jvm_class, scala_items, scala_seq
from jobs.platform.tables import counts_no_file, delta_log, empty_frame, version_checksum
from schemas.tables import TABLES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("ackstate.rewrite")

PartitionKey = tuple[str, int]

REWRITE_PREDICATE = "ackstate rewrite"
"""How a rewrite's commit is told from an append in the history: its ``predicate`` begins so."""

SINGLE_PARTITION_BYTES = 128 * 1024 * 1024
"""The most bytes of files a rewrite reads in one task when its source is small (Spark's default
of ``spark.sql.maxSinglePartitionBytes``), and into the driver (``DRIVER_SOURCE_ROWS``); past it
the rewrite spreads as usual."""

DRIVER_SOURCE_ROWS = 2_000_000
"""The most rows of a large batch's changes to one table that a rewrite collects into the
driver and merges there (``jobs.platform.arrow_merge``), beside files of at most
``SINGLE_PARTITION_BYTES``. A 1M-event batch of the bench's workload (10,000 subscriptions)
rewrote its seven tables side by side in 4.4-5.4 s through Spark and 1.3-1.8 s in the driver
(README, "Benchmarks"); the bound keeps what a batch brings to the driver's memory (the JVM's,
which passes the rows on, and Python's) to a few hundred MB."""

_DELETE, _KEEP, _INSERT = "d", "k", "i"
_IN_TARGET, _IN_SOURCE = "__ackstate_t", "__ackstate_s"


@dataclass(frozen=True)
class Clause:
    """One MERGE clause (``jobs.platform.delta_writer``): ``delete``, ``update`` (``columns``:
    None for every column), ``insert`` or ``delete_unmatched``; ``condition`` None: always."""

    kind: str
    condition: str | None
    columns: tuple[str, ...] | None


@dataclass
class _File:
    """A data file of the table: its ``AddFile`` (a JVM object, for its remove), its size in
    bytes and the range of topic partitions its statistics give (None: unknown, so it may hold
    any)."""

    add: Any
    size: int
    lowest: PartitionKey | None
    highest: PartitionKey | None

    def may_hold(self, key: PartitionKey) -> bool:
        if self.lowest is None or self.highest is None:
            return True
        return self.lowest <= key <= self.highest


@dataclass
class _Files:
    """The table's files at ``version``, and the idempotent-write versions known at it."""

    version: int
    files: dict[str, _File]
    txn_versions: dict[str, int] = field(default_factory=dict)


def merged(
    target: DataFrame,
    source: DataFrame,
    on: str,
    clauses: Sequence[Clause],
    schema: StructType,
    source_columns: Iterable[str],
) -> DataFrame:
    """The rows a MERGE of ``source`` (alias ``s``) into ``target`` (alias ``t``, the table's
    ``schema``) on ``on`` leaves of ``target``'s rows, with Delta's clause semantics: a matched
    row takes the first matched clause whose condition holds (delete, or update of its columns)
    and is kept as it is if none does; a target row no source row matches is deleted by the
    first ``delete_unmatched`` whose condition holds; a source row that matches nothing is
    inserted by the first insert clause whose condition holds. A condition that is null does
    not hold.

    Built as SQL text in two projections: each DataFrame call crosses to the JVM and may
    analyse the plan again, and with seven tables written at once that cost more than the
    rows (``FileRewrite.write`` logs the planning time)."""
    from pyspark.sql import functions as F

    given = set(source_columns)
    in_t, in_s = f"t.`{_IN_TARGET}` IS NOT NULL", f"s.`{_IN_SOURCE}` IS NOT NULL"

    def holds(condition: str | None) -> str:
        return "true" if condition is None else f"coalesce(({condition}), false)"

    whens: list[str] = []
    updates: list[tuple[str, tuple[str, ...] | None]] = []
    for clause in clauses:
        if clause.kind == "delete":
            whens.append(f"WHEN {in_t} AND {in_s} AND {holds(clause.condition)} THEN '{_DELETE}'")
        elif clause.kind == "update":
            name = f"u{len(updates)}"
            updates.append((name, clause.columns))
            whens.append(f"WHEN {in_t} AND {in_s} AND {holds(clause.condition)} THEN '{name}'")
        elif clause.kind == "insert":
            whens.append(f"WHEN NOT ({in_t}) AND {in_s} AND {holds(clause.condition)} THEN '{_INSERT}'")
        elif clause.kind == "delete_unmatched":
            whens.append(f"WHEN {in_t} AND NOT ({in_s}) AND {holds(clause.condition)} THEN '{_DELETE}'")
        else:
            raise ValueError(f"unknown MERGE clause {clause.kind!r}")
    action = f"CASE {' '.join(whens)} WHEN {in_t} THEN '{_KEEP}' ELSE '{_DELETE}' END AS _action"

    def source_value(column: str) -> str:
        return f"_s{position[column]}" if column in given else "NULL"

    names = schema.fieldNames()
    position = {column: i for i, column in enumerate(names)}
    carried = [f"t.`{c}` AS _t{i}" for i, c in enumerate(names)]
    carried += [f"s.`{c}` AS _s{position[c]}" for c in names if c in given]
    columns = []
    for column, kind in ((f.name, f.dataType.simpleString()) for f in schema.fields):
        cases = [f"WHEN '{_INSERT}' THEN {source_value(column)}"]
        for name, updated in updates:  # an update of every column sets those the source has
            if column in (given if updated is None else updated):
                cases.append(f"WHEN '{name}' THEN {source_value(column)}")
        value = f"CASE _action {' '.join(cases)} ELSE _t{position[column]} END"
        columns.append(f"CAST({value} AS {kind}) AS `{column}`")
    t = target.selectExpr("*", f"true AS `{_IN_TARGET}`").alias("t")
    s = source.selectExpr("*", f"true AS `{_IN_SOURCE}`").alias("s")
    joined = t.join(s, F.expr(on), "full_outer").selectExpr(action, *carried)
    return joined.where(f"_action <> '{_DELETE}'").selectExpr(*columns)


class FileRewrite:
    """The rewrites of one writer (an ingest query's ``DeltaWriter``) and its lists of files.

    The lists are per table; a table is written by one thread at a time (one write per table
    per batch), so they need no lock beyond the one that guards the dictionary.
    """

    def __init__(self) -> None:
        self._files: dict[str, _Files] = {}
        self._lock = threading.Lock()

    def write(
        self,
        spark: SparkSession,
        path: str,
        table: str,
        source: DataFrame,
        columns: Sequence[str],
        on: str,
        clauses: Sequence[Clause],
        partitions: Iterable[PartitionKey],
        *,
        app_id: str | None,
        version: int | None,
        tag: str | None,
        single_partition: bool = False,
        keys: Sequence[str] | None = None,
        source_rows: int | None = None,
    ) -> bool:
        """Apply the MERGE of ``source`` (whose table columns are ``columns``: the caller has
        them, and asking a DataFrame for its columns analyses its plan) to the files holding
        ``partitions`` and commit; False (nothing done)
        when the table is one this cannot read by its files (module docstring). Raises Delta's
        conflict errors for ``jobs.platform.retry``.

        ``single_partition``: the source is small (a batch of ``[ingest] single_partition_rows``
        at most). If the files read are at most ``SINGLE_PARTITION_BYTES``, both sides are then
        read in one partition, so that the join and the write run in one task with no shuffle
        (in a session with ``jobs.ingest.batch.SINGLE_PARTITION``) and write one file.

        On a local table matched on ``keys`` (the columns ``on`` matches equal), the rows are
        computed and written as one file in the driver (``jobs.platform.arrow_merge``), with no
        Spark job over the files, where the clauses allow it and the files read are at most
        ``SINGLE_PARTITION_BYTES``: for a small source, and for a large one of at most
        ``DRIVER_SOURCE_ROWS`` rows (``source_rows``: how many the caller counted; None:
        unknown)."""
        began = time.time()
        jvm = spark._jvm  # type: ignore[attr-defined]
        txn = delta_log(spark, path).startTransaction()
        if not files_are_rows(txn):
            return False
        read_version = int(txn.readVersion())
        known = self._current(txn, path, read_version)
        if version is not None and app_id is not None:
            if app_id not in known.txn_versions:
                known.txn_versions[app_id] = committed_version(jvm, txn, app_id)
            if known.txn_versions[app_id] >= version:
                log.info("%s: batch %d of %s already committed; not written again", table, version, app_id)
                return True
        txn.readWholeTable()
        wanted = sorted(set(partitions))
        candidates = [(name, f) for name, f in known.files.items() if any(f.may_hold(key) for key in wanted)]
        txn.trackFilesRead(scala_seq(jvm, [f.add for _, f in candidates]))
        schema = TABLES[table]
        files = [data_file(path, name) for name, _ in candidates]
        files_bytes = sum(f.size for _, f in candidates)
        in_one_task = single_partition and files_bytes <= SINGLE_PARTITION_BYTES
        few_rows = single_partition or (source_rows is not None and source_rows <= DRIVER_SOURCE_ROWS)
        in_driver = few_rows and files_bytes <= SINGLE_PARTITION_BYTES and is_local(path)
        written, planned, by = None, time.time(), "Arrow"
        if in_driver and keys is not None:
            written = _merged_in_driver(spark, txn, path, table, source, files, keys, clauses, columns)
        if written is None:
            by = "Spark"
            target = spark.read.schema(schema).parquet(*files) if files else empty_frame(spark, schema)
            if in_one_task:
                target, source = target.coalesce(1), source.coalesce(1)
            rows = merged(target, source, on, clauses, schema, columns)
            planned = time.time()
            if in_one_task and is_local(path):
                written = _written_from_driver(spark, txn, path, rows, schema)
            if written is None:
                written = scala_items(jvm, txn.writeFiles(rows._jdf))
        wrote = time.time()
        now = int(time.time() * 1000)
        actions = [f.add.removeWithTimestamp(now, True) for _, f in candidates] + written
        if version is not None and app_id is not None:
            at = jvm_class(jvm, "scala.Option").apply(jvm_class(jvm, "java.lang.Long").valueOf(str(now)))
            set_transaction = jvm_class(jvm, "org.apache.spark.sql.delta.actions.SetTransaction")
            actions.append(set_transaction(app_id, version, at))
        operation = write_operation(jvm, tag, predicate=rewrite_predicate(len(wanted)), partition_by=None)
        committed = int(txn.commit(scala_seq(jvm, actions), operation))
        self._committed(path, known, read_version, committed, candidates, written, app_id, version)
        log.debug(
            "%s: version %d replaced %d of %d file(s) with %d (%s): "
            "files %.2f s, write %.2f s, commit %.2f s",
            table,
            committed,
            len(candidates),
            len(known.files),
            len(written),
            by,
            planned - began,
            wrote - planned,
            time.time() - wrote,
        )
        return True

    def _current(self, txn: Any, path: str, read_version: int) -> _Files:
        """The table's files at ``read_version``: kept, or read from Delta's snapshot."""
        with self._lock:
            kept = self._files.get(path)
        if kept is not None and kept.version == read_version:
            return kept
        files = {}
        if not counts_no_file(txn.snapshot()):  # a table just created has none to list
            for add in java_list(txn.snapshot().allFiles().collectAsList()):
                files[add.path()] = _file(add)
        log.debug("%s: %d file(s) at version %d read from Delta", path, len(files), read_version)
        return _Files(read_version, files)

    def _committed(
        self,
        path: str,
        known: _Files,
        read_version: int,
        committed: int,
        removed: list[tuple[str, _File]],
        written: list[Any],
        app_id: str | None,
        version: int | None,
    ) -> None:
        """Keep the files after this commit, if it is the only one since ``read_version``."""
        if committed != read_version + 1:
            with self._lock:
                self._files.pop(path, None)
            return
        files = dict(known.files)
        for name, _ in removed:
            files.pop(name, None)
        for add in written:
            files[add.path()] = _file(add)
        txn_versions = dict(known.txn_versions)
        if app_id is not None and version is not None:
            txn_versions[app_id] = version
        with self._lock:
            self._files[path] = _Files(committed, files, txn_versions)


def _merged_in_driver(
    spark: SparkSession,
    txn: Any,
    path: str,
    table: str,
    source: DataFrame,
    files: list[str],
    keys: Sequence[str],
    clauses: Sequence[Clause],
    columns: Sequence[str],
) -> list[Any] | None:
    """The ``AddFile``s of the rows the MERGE leaves, computed and written in the driver with
    no Spark job over the files (``jobs.platform.arrow_merge``): the source's rows collected,
    the files read with ``pyarrow.parquet``. None, with nothing written, when a clause is one
    Arrow does not compute here or a NOT NULL column would hold a null: Spark then writes it
    (and Delta refuses the null with its own error)."""
    from jobs.platform import arrow_merge

    schema = TABLES[table]
    try:
        for clause in clauses:  # refused before any row is read
            if clause.condition is not None:
                arrow_merge.condition(clause.condition)
        rows = arrow_merge.merged_rows(
            arrow_merge.read_files([locations.resolve(f) for f in files], schema),
            source.toArrow(),
            keys,
            clauses,
            schema,
            columns,
        )
    except arrow_merge.Unsupported as refused:
        log.debug("%s: rewritten by Spark: %s", table, refused)
        return None
    if has_null_in_required(rows, schema):
        return None
    return file_actions(spark, txn, path, rows, schema)


def _written_from_driver(
    spark: SparkSession, txn: Any, path: str, rows: DataFrame, schema: StructType
) -> list[Any] | None:
    """The ``AddFile``s of ``rows`` written from the driver (``jobs.platform.data_files``), with
    the metrics ``writeFiles`` would have registered in ``txn``; None when a column the table
    declares NOT NULL holds a null, so that Delta's ``writeFiles`` refuses the write with its
    own error, as for any other write."""
    collected = rows.toArrow()
    if has_null_in_required(collected, schema):
        return None
    return file_actions(spark, txn, path, collected, schema)


def _file(add: Any) -> _File:
    lowest, highest = partition_range(add.stats())
    return _File(add, int(add.size()), lowest, highest)


def committed_version(jvm: Any, txn: Any, app_id: str) -> int:
    """The last batch ``app_id`` committed to the table, as ``txnVersion`` answers it.

    ``txnVersion`` reads it from the table's state, which Delta computes in a Spark job (about a
    second of a first batch, per table). The checksum of the version read holds the same
    ``SetTransaction``s when Delta could keep them there; they are then read from it, and the
    app id is recorded as read, as ``txnVersion`` records it, so that a concurrent commit of the
    same app id still conflicts."""
    checksum = version_checksum(txn.snapshot())
    known = None if checksum is None else checksum.setTransactions()
    if known is None or known.isEmpty():
        return int(txn.txnVersion(app_id))
    txn.readTxn().addOne(app_id)
    versions = [int(t.version()) for t in scala_items(jvm, known.get()) if t.appId() == app_id]
    return max(versions, default=-1)


def partition_range(stats: str | None) -> tuple[PartitionKey | None, PartitionKey | None]:
    """The smallest and largest (topic, partition) a file's statistics allow (None: unknown).

    Delta truncates string statistics to a prefix, the largest with a last character above any
    other, so the range still covers every value in the file."""
    if not stats:
        return None, None
    parsed = json.loads(stats)
    low, high = parsed.get("minValues") or {}, parsed.get("maxValues") or {}
    try:
        lowest_topic, highest_topic = low["topic"], high["topic"]
    except KeyError:
        return None, None
    if lowest_topic != highest_topic or "partition" not in low or "partition" not in high:
        return (lowest_topic, -(2**31)), (highest_topic, 2**31)
    return (lowest_topic, int(low["partition"])), (highest_topic, int(high["partition"]))


def data_file(table_path: str, file_path: str) -> str:
    """A file of the table by its ``AddFile.path``: relative to the table and URL-encoded (or
    absolute, then only URL-encoded)."""
    decoded = urllib.parse.unquote(file_path)
    if "://" in file_path or file_path.startswith("/"):
        return decoded
    return table_path.rstrip("/") + "/" + decoded


def rewrite_predicate(partitions: int) -> str:
    """The ``predicate`` a rewrite's commit shows in the table's history (an append has none)."""
    return f"{REWRITE_PREDICATE} of {partitions} topic partition(s)"
