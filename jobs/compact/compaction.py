"""``ackstate compact``: the scheduled batch job that keeps the warehouse small and fast to read.

One run: first the **ledger trim**, when asked (``--trim-ledgers-before``): a topic partition
whose oldest ledgers its retention deleted loses them here too, through the engine
(``PartitionState.trim_ledgers`` in the grouped Arrow UDF ``udfs.trim``), so ``cursors`` (the
encoded source of truth), ``topic_partitions.ledgers`` and every projection stay exact. Then,
per table (``parallelism`` tables at once), in this order:

1. **history retention**: rows older than ``[compact] <table>_retention_days`` leave the
   append-only history tables (``ingest_batches``, ``rejected_events``,
   ``active_consumer_changes``, ``send_receipts``, and delivered ``redeliveries``);
2. **OPTIMIZE**: small files are compacted and the data is (re)clustered by the tables'
   clustering columns, (``topic``, ``partition``) for every state table;
3. **VACUUM**: data files that the table stopped referencing more than
   ``vacuum_retention_hours`` ago are deleted;
4. **checkpoint**: a Delta checkpoint of the latest version, so readers (and the ingest's next
   batch) replay no JSON commits.

A table nobody wrote since an earlier compaction skips OPTIMIZE and the checkpoint, and VACUUM
runs only when a file the table dropped has been unused for the retention (each VACUUM lists
the whole table directory and commits twice). So the job is idempotent: a second run finds
nothing to compact, vacuum or trim, and says so. Every step is reported (files removed and
added, bytes, rows trimmed per table) as text or ``--json``.

**Next to a running ingest.** The per-table steps are safe while ``ackstate ingest`` runs: OPTIMIZE and
VACUUM change no row, and a commit that loses a race with the ingest is retried
(``jobs.platform.retry``); the ingest retries its own MERGEs the same way. Two rules keep it safe:

* VACUUM's retention must stay well above the longest time the ingest may be down after a
  crash. A restarted ingest reads the tables as of the versions its interrupted batch read
  (recorded in that batch's commits, found in the last 100 commits of each table) and
  VACUUM deletes the files of versions older than the retention; the same limit bounds how far
  back ``--as-of`` can look. Hence the default of 168 hours (Delta's own safety check), and a
  shorter retention only with ``allow_short_vacuum_retention``.
* The ledger trim rewrites the state the ingest reads and writes, so the two agree on it
  through the ``ledger_trims`` table (``LedgerTrimmer``): the trim is first recorded there, and
  every ingest batch applies the recorded trims of the partitions it writes before their
  events; compact then waits for the ingest batches that were already running when it recorded
  the trim (their checkpoints show them, ``jobs.platform.checkpoints``), and only then trims. Any batch
  that commits after compact's trim therefore began after the request and writes a state that
  holds the trim: it may overwrite compact's rows, never undo them.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from engine.topic import complete_name, partition_name
from jobs.platform import locations
from jobs.platform.delta_writer import DeltaWriter
from jobs.platform.errors import CompactError
from jobs.platform.java import prefer_quick_jit
from jobs.platform.retry import DEFAULT_ATTEMPTS, retry_on_conflict
from jobs.platform.session import session_settings
from jobs.platform.tables import current_snapshot, delta_log, latest_version, local_frame, table_path
from jobs.read.stats import TopicFilter
from schemas.tables import TABLE_KEYS, TABLES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("ackstate.compact")

COMPACT_QUERY_ID = "ackstate-compact"
"""``query_id`` of rows the ledger trim rewrites, and the ``userMetadata`` prefix of its commits."""

DELTA_MIN_RETENTION_HOURS = 168.0
"""Delta refuses a shorter VACUUM retention unless its check is turned off (7 days)."""


@dataclass(frozen=True)
class HistoryRule:
    """Which rows of an append-only history table a retention trims: older than the retention by
    ``time_column``, and only where ``condition`` holds (rows still in use are never trimmed)."""

    time_column: str
    condition: str | None = None


HISTORY_TABLES: Mapping[str, HistoryRule] = {
    "ingest_batches": HistoryRule("finished_at"),
    "rejected_events": HistoryRule("rejected_at"),
    "active_consumer_changes": HistoryRule("updated_at"),
    "send_receipts": HistoryRule("updated_at"),
    # a row that is still due is live state; only redeliveries that happened are history
    "redeliveries": HistoryRule("updated_at", "delivered_at IS NOT NULL"),
}


# ---- options --------------------------------------------------------------------------------
@dataclass(frozen=True)
class LedgerTrim:
    """``TOPIC[:PARTITION]=LEDGER_ID``: the first ledger a topic partition still has.

    ``TOPIC`` is named as Pulsar names it (``persistent://t/ns/x``, short forms as in
    ``pulsar-admin``); ``x-partition-3`` or ``x:3`` picks one partition, a bare partitioned
    topic every partition. The ledger id is the first entry of ``ledgers`` in
    ``pulsar-admin topics stats-internal`` after the broker trimmed.
    """

    topic: str
    partition: int | None
    first_retained_ledger: int

    @classmethod
    def parse(cls, text: str) -> LedgerTrim:
        target, sep, ledger = text.strip().rpartition("=")
        if not sep or not target or not re.fullmatch(r"\d+", ledger.strip()):
            raise CompactError(
                f"--trim-ledgers-before {text!r}: expected TOPIC[:PARTITION]=LEDGER_ID, "
                "e.g. persistent://acme/prod/orders:3=1234"
            )
        explicit = re.fullmatch(r"(.+[^:/]):(-?\d+)", target.strip())
        if explicit:
            return cls(complete_name(explicit[1]), int(explicit[2]), int(ledger))
        selected = TopicFilter.parse(target)
        if selected.base is not None:
            return cls(selected.base, selected.partition, int(ledger))
        return cls(selected.name, None, int(ledger))

    def matches(self, topic: str, partition: int) -> bool:
        return topic == self.topic and (self.partition is None or partition == self.partition)

    def __str__(self) -> str:
        where = self.topic if self.partition is None else partition_name(self.topic, self.partition)
        return f"{where}={self.first_retained_ledger}"


@dataclass(frozen=True)
class CompactOptions:
    warehouse: str
    tables: tuple[str, ...] = tuple(TABLES)
    optimize: bool = True
    vacuum: bool = True
    checkpoint: bool = True
    vacuum_retention_hours: float = DELTA_MIN_RETENTION_HOURS
    allow_short_vacuum_retention: bool = False
    retention_days: Mapping[str, int] = field(default_factory=dict)
    """History retention per table of ``HISTORY_TABLES``; 0 keeps the rows forever."""
    trims: tuple[LedgerTrim, ...] = ()
    trim_wait_seconds: float = 600.0
    """How long a ledger trim waits for the ingest batches running when it was requested."""
    parallelism: int = 2
    max_attempts: int = DEFAULT_ATTEMPTS

    def __post_init__(self) -> None:
        unknown = [t for t in self.tables if t not in TABLES]
        if unknown:
            raise CompactError(f"unknown table(s) {', '.join(unknown)}; tables are {', '.join(TABLES)}")
        if self.vacuum_retention_hours < 0:
            raise CompactError("the VACUUM retention cannot be negative")
        if (
            self.vacuum
            and self.vacuum_retention_hours < DELTA_MIN_RETENTION_HOURS
            and not self.allow_short_vacuum_retention
        ):
            raise CompactError(
                f"a VACUUM retention of {self.vacuum_retention_hours:g} hours is below Delta's safety "
                f"minimum of {DELTA_MIN_RETENTION_HOURS:g}: it can delete files a running or restarting "
                "ingest still reads, and limits time travel to it. Set "
                "allow_short_vacuum_retention = true in [compact] (or --allow-short-retention) to do it"
            )
        for name, days in self.retention_days.items():
            if name not in HISTORY_TABLES:
                raise CompactError(
                    f"{name} is not a history table; history retention applies to {', '.join(HISTORY_TABLES)}"
                )
            if days < 0:
                raise CompactError(f"{name} retention of {days} days: use 0 to keep its rows forever")
        if self.parallelism < 1:
            raise CompactError("[compact] parallelism must be at least 1")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CompactOptions:
        """``[compact]`` of the configuration, overridden by the command line."""
        conf: Mapping[str, Any] = getattr(args.config, "compact", {}) or {}
        retention = {name: int(conf.get(f"{name}_retention_days", 0)) for name in HISTORY_TABLES}
        for spec in getattr(args, "retention", None) or []:
            name, sep, days = spec.partition("=")
            if not sep or not days.strip().isdigit():
                raise CompactError(f"--retention {spec!r}: expected TABLE=DAYS, e.g. rejected_events=30")
            retention[name.strip()] = int(days)
        trims = [LedgerTrim.parse(s) for s in conf.get("trim_ledgers_before", [])]
        trims += [LedgerTrim.parse(s) for s in getattr(args, "trim_ledgers_before", None) or []]
        tables = tuple(TABLES)
        if getattr(args, "tables", None):
            tables = tuple(t.strip() for t in args.tables.split(",") if t.strip())
        hours = getattr(args, "vacuum_retention_hours", None)
        return cls(
            warehouse=locations.resolve(args.warehouse),
            tables=tables,
            optimize=bool(conf.get("optimize", True)) and not getattr(args, "no_optimize", False),
            vacuum=bool(conf.get("vacuum", True)) and not getattr(args, "no_vacuum", False),
            checkpoint=bool(conf.get("checkpoint", True)) and not getattr(args, "no_checkpoint", False),
            vacuum_retention_hours=float(
                hours if hours is not None else conf.get("vacuum_retention_hours", DELTA_MIN_RETENTION_HOURS)
            ),
            allow_short_vacuum_retention=bool(conf.get("allow_short_vacuum_retention", False))
            or bool(getattr(args, "allow_short_retention", False)),
            retention_days=retention,
            trims=tuple(trims),
            trim_wait_seconds=float(
                getattr(args, "trim_wait", None)
                if getattr(args, "trim_wait", None) is not None
                else conf.get("trim_wait_seconds", 600)
            ),
            parallelism=int(conf.get("parallelism", 2)),
            max_attempts=int(conf.get("max_attempts", DEFAULT_ATTEMPTS)),
        )


# ---- what a run did -------------------------------------------------------------------------
@dataclass
class FileChange:
    files_removed: int = 0
    bytes_removed: int = 0
    files_added: int = 0
    bytes_added: int = 0


@dataclass
class TableReport:
    name: str
    optimize: FileChange | None = None
    vacuum: FileChange | None = None
    """Files VACUUM deleted (``files_removed``/``bytes_removed``); none are added."""
    rows_trimmed: int | None = None
    """History rows older than the retention, deleted (None: not a history table, or kept)."""
    retention_cutoff: str | None = None
    rows_trimmed_by_ledger: int = 0
    checkpoint_version: int | None = None
    checkpoint_written: bool = False
    conflicts_retried: int = 0
    unchanged: bool = False
    """Nothing was written to it since an earlier compaction: OPTIMIZE and checkpoint skipped."""
    skipped: str | None = None


@dataclass
class PartitionTrim:
    topic: str
    partition: int
    first_retained_ledger: int
    ledgers_removed: list[int] = field(default_factory=list)
    entries_removed: int = 0
    cursors_advanced: list[str] = field(default_factory=list)
    ack_ranges_deleted: int = 0
    ack_ranges_upserted: int = 0
    batch_acks_deleted: int = 0
    batch_acks_upserted: int = 0
    status: str = "trimmed"
    """``trimmed``; ``trimmed by the ingest`` (an ingest batch wrote the partition, trim included,
    after this run read it); ``nothing to trim``; ``skipped: ...`` (its state changed meanwhile
    and still holds the ledgers) or ``deferred: ...`` (an ingest batch kept running)."""

    @property
    def name(self) -> str:
        return partition_name(self.topic, self.partition)


@dataclass
class CompactReport:
    warehouse: str
    started_at: str
    tables: dict[str, TableReport] = field(default_factory=dict)
    trims: list[PartitionTrim] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def totals(self) -> dict[str, int]:
        files_removed = bytes_removed = files_added = bytes_added = rows = 0
        for t in self.tables.values():
            for change in (t.optimize, t.vacuum):
                if change is not None:
                    files_removed += change.files_removed
                    bytes_removed += change.bytes_removed
                    files_added += change.files_added
                    bytes_added += change.bytes_added
            rows += (t.rows_trimmed or 0) + t.rows_trimmed_by_ledger
        vacuumed = sum(t.vacuum.bytes_removed for t in self.tables.values() if t.vacuum)
        return {
            "files_removed": files_removed,
            "bytes_removed": bytes_removed,
            "files_added": files_added,
            "bytes_added": bytes_added,
            "bytes_freed": vacuumed,
            "rows_trimmed": rows,
            "ledgers_trimmed": sum(len(t.ledgers_removed) for t in self.trims),
            "conflicts_retried": sum(t.conflicts_retried for t in self.tables.values()),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "warehouse": self.warehouse,
            "started_at": self.started_at,
            "seconds": round(self.seconds, 3),
            "tables": {name: _drop_none(asdict(t)) for name, t in self.tables.items()},
            "ledger_trims": [{"name": t.name, **_drop_none(asdict(t))} for t in self.trims],
            "totals": self.totals,
        }

    def format_text(self) -> str:
        lines = [f"ackstate compact: {self.warehouse}"]
        for trim in self.trims:
            if not trim.status.startswith("trimmed"):
                lines.append(f"  trim       {trim.name}: {trim.status}")
                continue
            ids = trim.ledgers_removed
            span = f"{ids[0]}" if len(ids) == 1 else f"{ids[0]}..{ids[-1]}"
            lines.append(
                f"  trim       {trim.name}: {len(ids)} ledger(s) below {trim.first_retained_ledger} "
                f"deleted{' by the ingest' if trim.status != 'trimmed' else ''} "
                f"({span}, {trim.entries_removed:,} entries), "
                f"{len(trim.cursors_advanced)} cursor(s) moved, ack ranges -{trim.ack_ranges_deleted}"
                f"/+{trim.ack_ranges_upserted}, batch entries -{trim.batch_acks_deleted}"
            )
        for name, t in self.tables.items():
            if t.skipped:
                lines.append(f"  {'skip':<10} {name:<24} {t.skipped}")
                continue
            if t.rows_trimmed is not None:
                lines.append(
                    f"  {'retention':<10} {name:<24} {t.rows_trimmed:,} row(s) before {t.retention_cutoff}"
                )
            if t.rows_trimmed_by_ledger:
                lines.append(
                    f"  {'trim':<10} {name:<24} {t.rows_trimmed_by_ledger:,} row(s) in deleted ledgers"
                )
            if t.unchanged and t.optimize is None and t.vacuum is None and t.rows_trimmed_by_ledger == 0:
                lines.append(f"  {'unchanged':<10} {name:<24} nothing written since the last compaction")
            if t.optimize is not None:
                o = t.optimize
                what = (
                    f"{o.files_removed} file(s) {_size(o.bytes_removed)} -> {o.files_added} file(s) "
                    f"{_size(o.bytes_added)}"
                    if o.files_removed or o.files_added
                    else "already compact"
                )
                lines.append(f"  {'optimize':<10} {name:<24} {what}")
            if t.vacuum is not None:
                v = t.vacuum
                what = (
                    f"deleted {v.files_removed} file(s), {_size(v.bytes_removed)}"
                    if v.files_removed
                    else "nothing to delete"
                )
                lines.append(f"  {'vacuum':<10} {name:<24} {what}")
            if t.checkpoint_version is not None:
                what = "written" if t.checkpoint_written else "already there"
                lines.append(f"  {'checkpoint':<10} {name:<24} version {t.checkpoint_version} ({what})")
            if t.conflicts_retried:
                lines.append(f"  {'conflicts':<10} {name:<24} {t.conflicts_retried} retried")
        totals = self.totals
        lines.append(
            f"total: {totals['files_removed']} file(s) removed ({_size(totals['bytes_removed'])}), "
            f"{totals['files_added']} added ({_size(totals['bytes_added'])}), "
            f"{_size(totals['bytes_freed'])} freed on disk, {totals['rows_trimmed']:,} row(s) trimmed, "
            f"{totals['ledgers_trimmed']} ledger(s) trimmed, in {self.seconds:.1f} s"
        )
        return "\n".join(lines)


# ---- the job --------------------------------------------------------------------------------
def compact(spark: SparkSession, options: CompactOptions) -> CompactReport:
    """Run one compaction of ``options.warehouse``; see the module docstring for the steps."""
    from delta.tables import DeltaTable

    started = time.time()
    run_id = int(started * 1000)
    report = CompactReport(str(options.warehouse), _iso(started))
    present = [
        name for name in options.tables if DeltaTable.isDeltaTable(spark, table_path(options.warehouse, name))
    ]
    if not present:
        raise CompactError(
            f"warehouse {options.warehouse} has no ackstate tables: run `ackstate init` "
            "or `ackstate ingest` with this --warehouse first"
        )
    for name in options.tables:
        report.tables[name] = TableReport(name)
        if name not in present:
            report.tables[name].skipped = "not in this warehouse (`ackstate init` creates it)"

    run_tag = f"{COMPACT_QUERY_ID}:{run_id}"
    settings = {"spark.databricks.delta.commitInfo.userMetadata": run_tag}
    if options.vacuum and options.vacuum_retention_hours < DELTA_MIN_RETENTION_HOURS:
        settings["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    if spark.conf.get(_LISTING_PARALLELISM, None) in (None, "10000"):
        # VACUUM lists the table directory with this many tasks (Spark's default: 10,000), which
        # costs about a minute per table on two cores however small the table; the cluster's
        # parallelism is plenty. A value the user set is kept.
        settings[_LISTING_PARALLELISM] = str(max(1, spark.sparkContext.defaultParallelism))
    with session_settings([spark], settings):
        if options.trims:
            report.trims = LedgerTrimmer(spark, options, report, run_id).run()
        lock = threading.Lock()

        def one_table(name: str) -> None:
            _compact_table(spark, options, report.tables[name], started, run_tag, lock)

        with ThreadPoolExecutor(max_workers=options.parallelism, thread_name_prefix="compact") as pool:
            for future in [pool.submit(one_table, name) for name in present]:
                future.result()
    report.seconds = time.time() - started
    return report


_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def _compact_table(
    spark: SparkSession,
    options: CompactOptions,
    table: TableReport,
    started: float,
    run_tag: str,
    lock: threading.Lock,
) -> None:
    from delta.tables import DeltaTable

    path = table_path(options.warehouse, table.name)

    def retried(what: str, action: Callable[[], Any]) -> Any:
        def count(_: BaseException) -> None:
            with lock:
                table.conflicts_retried += 1

        began = time.perf_counter()
        result = retry_on_conflict(
            action, what=f"compact {table.name}: {what}", attempts=options.max_attempts, on_retry=count
        )
        log.debug("%s of %s took %.2f s", what, table.name, time.perf_counter() - began)
        return result

    # A table nobody wrote since an earlier compaction (or since it was created) has nothing to
    # compact or checkpoint; on the warehouse of a running ingest that is the idle tables only.
    began = time.perf_counter()
    latest = DeltaTable.forPath(spark, path).history(1).first()
    log.debug("history of %s took %.2f s", table.name, time.perf_counter() - began)
    tag = (latest["userMetadata"] or "") if latest is not None else ""
    unchanged = (
        latest is None
        or latest["operation"] == "CREATE TABLE"
        or (tag.startswith(f"{COMPACT_QUERY_ID}:") and tag != run_tag)
    )

    rule = HISTORY_TABLES.get(table.name)
    days = options.retention_days.get(table.name, 0)
    if rule is not None and days > 0:
        cutoff = datetime.fromtimestamp(started, UTC).replace(tzinfo=None) - timedelta(days=days)
        stamp = cutoff.strftime("%Y-%m-%d %H:%M:%S.%f")
        where = f"`{rule.time_column}` < TIMESTAMP '{stamp}'"
        if rule.condition:
            where += f" AND ({rule.condition})"
        row = retried("retention", lambda: spark.sql(f"DELETE FROM {_sql_path(path)} WHERE {where}").first())
        table.rows_trimmed = int(row[0]) if row is not None and row[0] is not None else 0
        table.retention_cutoff = cutoff.strftime("%Y-%m-%dT%H:%M:%SZ")
        unchanged = unchanged and table.rows_trimmed == 0
    table.unchanged = unchanged

    if options.optimize and not unchanged:
        metrics = retried(
            "optimize", lambda: DeltaTable.forPath(spark, path).optimize().executeCompaction().first()
        )
        m = metrics["metrics"] if metrics is not None else None
        table.optimize = FileChange(
            files_removed=int(m["numFilesRemoved"] or 0) if m else 0,
            bytes_removed=int(m["filesRemoved"]["totalSize"] or 0) if m else 0,
            files_added=int(m["numFilesAdded"] or 0) if m else 0,
            bytes_added=int(m["filesAdded"]["totalSize"] or 0) if m else 0,
        )

    if options.vacuum:
        # VACUUM lists the whole table directory and commits twice even when it deletes nothing;
        # it runs when a file the table dropped has been unused for the retention (Delta
        # remembers each dropped file with its time: a "tombstone"), or when that is unknown
        cutoff_ms = (time.time() - options.vacuum_retention_hours * 3600) * 1000
        began = time.perf_counter()
        oldest = oldest_tombstone(spark, path, cutoff_ms)
        log.debug("tombstones of %s took %.2f s", table.name, time.perf_counter() - began)
        if oldest is None or (oldest >= 0 and oldest <= cutoff_ms):
            table.vacuum = retried(
                "vacuum",
                lambda: _vacuum(spark, options.warehouse, table.name, options.vacuum_retention_hours),
            )
        else:
            table.vacuum = FileChange()

    if options.checkpoint and not (unchanged and not (table.vacuum and table.vacuum.files_removed)):
        table.checkpoint_version, table.checkpoint_written = retried(
            "checkpoint", lambda: _checkpoint(spark, path)
        )


def _delta_log(spark: SparkSession, path: str) -> Any:
    """Delta's ``DeltaLog`` of a table and its latest snapshot, through the JVM (internal API)."""
    table_log = delta_log(spark, path)
    return table_log, current_snapshot(table_log)


def oldest_tombstone(spark: SparkSession, path: str, cutoff_ms: float) -> int | None:
    """Epoch ms at which the table dropped the oldest file it still remembers; -1 when it
    remembers none, or when it was created after ``cutoff_ms`` (then none is old enough for
    VACUUM); None when Delta's JVM API is not reachable (then VACUUM just runs).

    A table created after the cutoff (its ``metaData.createdTime``, read from the snapshot Delta
    already holds) cannot have dropped a file before it, so it is answered without the Spark
    job that collects the tombstones: 14 such jobs were most of a compaction that found nothing
    to do. Its unreferenced files are younger than the cutoff too, so VACUUM would keep them.
    ``ALTER TABLE`` keeps ``createdTime``; ``REPLACE TABLE`` (never run by ackstate) renews it,
    so the files a replaced table dropped before then are vacuumed once that time is past the
    cutoff (Delta 4.4, checked 2026-12-07).
    """
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    try:
        snapshot = _delta_log(spark, path)[1]
        created = snapshot.metadata().createdTime()
        if not created.isEmpty() and int(created.get()) > cutoff_ms:
            return -1
        tombstones = DataFrame(snapshot.tombstones().toDF(), spark)
        row = tombstones.agg(F.min("deletionTimestamp").alias("oldest")).first()
    except Exception as exc:
        log.debug("tombstones of %s unknown: %s", path, exc)
        return None
    return -1 if row is None or row["oldest"] is None else int(row["oldest"])


def _vacuum(spark: SparkSession, warehouse: str, name: str, hours: float) -> FileChange:
    """VACUUM, and what it deleted as Delta logged it (``VACUUM START``/``VACUUM END`` commits)."""
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, table_path(warehouse, name))
    since = latest_version(spark, warehouse, name)
    table.vacuum(hours)
    rows = [row for row in commits_after(table, since) if row["operation"] in ("VACUUM START", "VACUUM END")]
    change = FileChange()
    for row in rows:
        metrics = row["operationMetrics"] or {}
        if row["operation"] == "VACUUM START":
            change.bytes_removed += int(metrics.get("sizeOfDataToDelete", 0))
        else:
            change.files_removed += int(metrics.get("numDeletedFiles", 0))
    return change


def commits_after(table: Any, version: int, first_read: int = 8) -> list[Any]:
    """The history rows (``version``, ``operation``, ``operationMetrics``) of ``table``'s
    commits after ``version``, newest first: the latest ``first_read`` commits, then twice as
    many until the oldest read is at most ``version + 1`` or the history has no more.

    Why not ``history()`` filtered: that reads every commit file the log still holds before
    any filter, and Delta keeps 30 days of them (``delta.logRetentionDuration``), one per
    micro-batch of a continuous ingest. VACUUM's own commits are its two and any a running
    ingest made meanwhile: a few of the newest. Measured on a local table of commit-only
    commits (2026-12-02, three runs each): 3,000 commits 0.9-2.2 s against 0.8 s; 30,000
    commits 4.6-8.5 s against 3.3 s, most of which is listing the log directory, which both do.
    """
    limit = first_read
    while True:
        rows = table.history(limit).select("version", "operation", "operationMetrics").collect()
        if len(rows) < limit or min(int(row["version"]) for row in rows) <= version + 1:
            return [row for row in rows if int(row["version"]) > version]
        limit *= 2


def _checkpoint(spark: SparkSession, path: str) -> tuple[int | None, bool]:
    """Write a Delta checkpoint of the latest version unless it has one; (version, written).

    Delta's Python API has no checkpoint call; ``DeltaLog.checkpoint`` is reached through the
    JVM. Where that is not possible (Spark Connect, another Delta build) the step is skipped
    with a warning: Delta still checkpoints by itself every ``delta.checkpointInterval`` commits.
    """
    try:
        table_log, snapshot = _delta_log(spark, path)
        version = int(snapshot.version())
        if int(snapshot.checkpointProvider().version()) == version:
            return version, False
        table_log.checkpoint(snapshot, getattr(table_log, "checkpoint$default$2")())
        return version, True
    except Exception as exc:  # the JVM API is internal to Delta: degrade, do not fail the run
        log.warning("checkpoint of %s skipped: %s", path, str(exc).strip().splitlines()[0][:200])
        return None, False


# ---- ledger trim ----------------------------------------------------------------------------
_CHANGED_MEANWHILE = "skipped: its state changed while trimming (is an ingest writing it?); run again"


class LedgerTrimmer:
    """The ledger trim of one run: decide in the engine, then write in Pulsar's order.

    1. read ``topic_partitions`` and ``cursors`` of the selected topic partitions at one version
       each, and run ``udfs.trim.trim_partition`` per topic partition;
    2. advance the cursors (``advanceCursorsIfNecessary``): MERGE the moved cursors, each only if
       its row is still the one read, then their ``ack_ranges``/``batch_acks`` changes;
    3. delete the ledgers (``doDeleteLedgers``), only in topic partitions whose cursors all
       moved: MERGE ``topic_partitions`` (same condition) and delete the ``ledgers`` rows.

    The moved cursors carry their subscription state: replays in the deleted ledgers are gone
    (``Subscription.forget_deleted``; their ``redeliveries`` rows are deleted in step 2), pending
    acks stay until their consumer acks them, as in Pulsar.

    Each step leaves a consistent warehouse on its own (a moved cursor over ledgers not yet
    deleted is a state Pulsar passes through too), so a crash between steps is repaired by the
    next run.
    """

    def __init__(self, spark: SparkSession, options: CompactOptions, report: CompactReport, run_id: int):
        self.spark, self.options, self.report, self.run_id = spark, options, report, run_id
        # its commits carry the run's tag through the session (``compact``), not a txn version
        self.writer = DeltaWriter(options.warehouse, COMPACT_QUERY_ID, attempts=options.max_attempts)
        self.stamp = datetime.fromtimestamp(run_id / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")

    def path(self, name: str) -> str:
        return table_path(self.options.warehouse, name)

    def run(self) -> list[PartitionTrim]:
        from delta.tables import DeltaTable

        from jobs.platform.tables import ensure_tables, read_table

        spark = self.spark
        for name in ("cursors", "topic_partitions"):
            if not DeltaTable.isDeltaTable(spark, self.path(name)):
                raise CompactError(f"--trim-ledgers-before: warehouse has no {name} table")
        ensure_tables(spark, self.options.warehouse)  # ledger_trims, in a warehouse older than it
        keys = read_table(spark, self.options.warehouse, "topic_partitions").select("topic", "partition")
        wanted: dict[tuple[str, int], int] = {}
        for row in keys.collect():
            for trim in self.options.trims:
                if trim.matches(row["topic"], row["partition"]):
                    key = (row["topic"], row["partition"])
                    wanted[key] = max(wanted.get(key, -1), trim.first_retained_ledger)
        unmatched = [str(t) for t in self.options.trims if not any(t.matches(*k) for k in wanted)]
        if unmatched:
            raise CompactError(f"--trim-ledgers-before {', '.join(unmatched)}: no such topic partition")
        results = {
            key: PartitionTrim(key[0], key[1], first, status="nothing to trim")
            for key, first in sorted(wanted.items())
        }
        self._request(wanted)
        still_running = self._wait_for_ingest()
        if still_running:
            for result in results.values():
                result.status = (
                    f"deferred: ingest {still_running} kept running for {self.options.trim_wait_seconds:g} s "
                    "after the trim was requested; the ingest trims the partitions it writes, run again "
                    "for the others"
                )
            return list(results.values())
        self._trim(wanted, results)
        self._settle(results)
        return list(results.values())

    def _request(self, wanted: Mapping[tuple[str, int], int]) -> None:
        """Record the trims in ``ledger_trims`` before anything is read: every ingest batch that
        starts from now on applies them to the partitions it writes."""
        from pyspark.sql import functions as F

        rows = local_frame(
            self.spark,
            [(t, p, first) for (t, p), first in sorted(wanted.items())],
            "topic string, partition int, first_retained_ledger long",
        ).select(
            "*",
            F.lit(f"{COMPACT_QUERY_ID}:{self.run_id}").alias("requested_by"),
            F.to_timestamp(F.lit(self.stamp)).alias("requested_at"),
        )
        retry_on_conflict(
            lambda: rows.write.format("delta").mode("append").save(self.path("ledger_trims")),
            what="request ledger trims",
            attempts=self.options.max_attempts,
        )

    def _wait_for_ingest(self) -> str | None:
        """Wait until the ingest batches running now have committed (a batch that began before
        the request may have read the state without it and write it back after our trim).
        Batches that start later read the request. Returns the one still running at the
        deadline, if any."""
        from jobs.platform.checkpoints import running_batches

        running = running_batches(self.options.warehouse)
        deadline = time.monotonic() + self.options.trim_wait_seconds
        while running:
            log.info("ledger trim: waiting for %s", ", ".join(map(str, running)))
            if time.monotonic() >= deadline:
                return ", ".join(map(str, running))
            time.sleep(0.5)
            running = [r for r in running if not r.finished()]
        return None

    def _settle(self, results: Mapping[tuple[str, int], PartitionTrim]) -> None:
        """A partition skipped because an ingest batch wrote it after this run read it: that
        batch began after the request, so it applied the trim itself. Confirmed from the table:
        no ledger below the first retained one is left (but the last, never deleted)."""
        from engine import Ledgers
        from jobs.platform.tables import read_table

        skipped = {k: r for k, r in results.items() if r.status == _CHANGED_MEANWHILE}
        if not skipped:
            return
        rows = (
            read_table(self.spark, self.options.warehouse, "topic_partitions")
            .join(self._keys(skipped, "topic string, partition int"), ["topic", "partition"], "left_semi")
            .select("topic", "partition", "ledgers")
            .collect()
        )
        for row in rows:
            result = skipped[(row["topic"], row["partition"])]
            ids = [lid for lid, _ in Ledgers.decode(bytes(row["ledgers"]))]
            if not [lid for lid in ids[:-1] if lid < result.first_retained_ledger]:
                result.status = "trimmed by the ingest"

    def _trim(
        self, wanted: Mapping[tuple[str, int], int], results: Mapping[tuple[str, int], PartitionTrim]
    ) -> None:
        """Run the trim UDF over the partitions asked for and write its rows (``_write_trims``);
        the checkpoint of those rows is freed whether the writes finish or fail."""
        from jobs.ingest.projections import state_input, with_trim_requests
        from jobs.platform.tables import latest_version, release
        from schemas.udf import APPLY_OUTPUT
        from udfs.apply import FIRST_RETAINED
        from udfs.trim import trim_partition

        spark = self.spark
        versions = {
            name: latest_version(spark, self.options.warehouse, name)
            for name in ("cursors", "topic_partitions")
        }
        requests = local_frame(
            spark,
            [(t, p, first) for (t, p), first in wanted.items()],
            f"topic string, partition int, {FIRST_RETAINED} long",
        )
        # the partitions asked for, each with its first retained ledger
        asked = requests.select("topic", "partition")
        partitions = self._read("topic_partitions", versions).join(asked, ["topic", "partition"], "left_semi")
        cursors = self._read("cursors", versions).join(asked, ["topic", "partition"], "left_semi")
        state = with_trim_requests(state_input(partitions, cursors), requests)
        out = (
            state.groupBy("topic", "partition")
            .applyInArrow(trim_partition, APPLY_OUTPUT)
            .localCheckpoint(eager=True)
        )
        try:
            self._write_trims(out, partitions, cursors, results)
        finally:
            release(out)  # else held until a garbage collection of the driver finds it unreachable

    def _write_trims(
        self,
        out: DataFrame,
        partitions: DataFrame,
        cursors: DataFrame,
        results: Mapping[tuple[str, int], PartitionTrim],
    ) -> None:
        """Write the trims of ``out`` (the UDF's rows) over the ``partitions`` and ``cursors`` read."""
        from pyspark.sql import functions as F

        from schemas.udf import BATCH, CURSOR, DELETE, LEDGER, PARTITION, RANGE, REDELIVERY

        summary = out.groupBy("topic", "partition", "kind", "op").agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("entries").alias("entries"),
            F.collect_list("ledger_id").alias("ledgers"),
            F.collect_list("subscription").alias("subscriptions"),
        )
        for row in summary.collect():
            result = results[(row["topic"], row["partition"])]
            kind, op = row["kind"], row["op"]
            if kind == LEDGER:
                result.ledgers_removed = sorted(int(x) for x in row["ledgers"])
                result.entries_removed = int(row["entries"] or 0)
                result.status = "trimmed"
            elif kind == CURSOR:
                result.cursors_advanced = sorted(row["subscriptions"])
            elif kind == RANGE:
                if op == DELETE:
                    result.ack_ranges_deleted = int(row["n"])
                else:
                    result.ack_ranges_upserted = int(row["n"])
            elif kind == BATCH:
                if op == DELETE:
                    result.batch_acks_deleted = int(row["n"])
                else:
                    result.batch_acks_upserted = int(row["n"])
        if not any(r.status == "trimmed" for r in results.values()):
            return

        # 2. advanceCursorsIfNecessary
        lineage = {
            "query_id": F.lit(COMPACT_QUERY_ID),
            "batch_id": F.lit(self.run_id).cast("long"),
            "updated_at": F.to_timestamp(F.lit(self.stamp)),
        }
        moved = out.filter(F.col("kind") == CURSOR).select(
            "topic",
            "partition",
            "subscription",
            F.concat_ws(":", "mark_delete_ledger_id", "mark_delete_entry_id").alias("mark_delete"),
            "mark_delete_ledger_id",
            "mark_delete_entry_id",
            "state",
            "subscription_state",
            "msg_backlog",
            "non_contiguous_deleted_ranges",
            "partial_batch_entries",
        )
        keys3 = ["topic", "partition", "subscription"]
        expected_cursors = {(r.topic, r.partition, r.subscription) for r in moved.select(*keys3).collect()}
        if expected_cursors:
            self._guarded_merge("cursors", moved, cursors, keys3, lineage)
            done_cursors = self._rewritten("cursors", keys3)
        else:
            done_cursors = set()
        missed = expected_cursors - done_cursors
        if done_cursors:
            done = self._keys(done_cursors, "topic string, partition int, subscription string")
            for kind, name in ((RANGE, "ack_ranges"), (BATCH, "batch_acks"), (REDELIVERY, "redeliveries")):
                changes = self._projection(out, kind).join(done, keys3, "left_semi")
                rows = self._merge_changes(name, changes)
                if kind == REDELIVERY and rows:
                    table = self.report.tables.setdefault(name, TableReport(name))
                    table.rows_trimmed_by_ledger += rows

        # 3. doDeleteLedgers, where every cursor behind the deleted ledgers moved
        blocked = {(t, p) for t, p, _ in missed}
        for key in blocked:
            results[key].status = _CHANGED_MEANWHILE
        trimmed = [k for k, r in results.items() if r.status == "trimmed"]
        if not trimmed:
            return
        keys2 = ["topic", "partition"]
        new_partitions = (
            out.filter(F.col("kind") == PARTITION)
            .join(self._keys(trimmed, "topic string, partition int"), keys2, "left_semi")
            .select("topic", "partition", "ledgers")
        )
        self._guarded_merge("topic_partitions", new_partitions, partitions, keys2, lineage)
        done_partitions = self._rewritten("topic_partitions", keys2)
        for key in trimmed:
            if key not in done_partitions:
                results[key].status = _CHANGED_MEANWHILE
        finished = [k for k in trimmed if k in done_partitions]
        if not finished:
            return
        deleted = out.filter(F.col("kind") == LEDGER).join(
            self._keys(finished, "topic string, partition int"), keys2, "left_semi"
        )
        self._merge_changes(
            "ledgers", deleted.select("topic", "partition", "ledger_id", F.lit(DELETE).alias("op"))
        )

    def _keys(self, keys: Iterable[tuple[Any, ...]], schema: str) -> DataFrame:
        return local_frame(self.spark, sorted(keys), schema)

    def _read(self, name: str, versions: Mapping[str, int]) -> DataFrame:
        from jobs.platform.tables import read_table

        return read_table(self.spark, self.options.warehouse, name, as_of=versions[name])

    def _guarded_merge(
        self,
        name: str,
        rows: DataFrame,
        read: DataFrame,
        keys: Sequence[str],
        lineage: Mapping[str, Any],
    ) -> None:
        """MERGE ``rows`` into ``name``, updating a row only if it is still the row ``read`` held:
        same writer, batch and time (``query_id``, ``batch_id``, ``updated_at``). Never inserts."""
        from pyspark.sql import functions as F

        guards = read.select(
            *keys,
            F.col("query_id").alias("_read_query_id"),
            F.col("batch_id").alias("_read_batch_id"),
            F.col("updated_at").alias("_read_updated_at"),
        )
        source = rows.join(guards, list(keys)).select("*", *[v.alias(k) for k, v in lineage.items()])
        on = " AND ".join(
            [f"t.`{k}` = s.`{k}`" for k in keys]
            + [f"t.`{c}` <=> s.`_read_{c}`" for c in ("query_id", "batch_id", "updated_at")]
        )
        columns = [c for c in rows.columns if c not in keys] + list(lineage)
        self.writer.merge(name, source).on_condition(on).when_matched_update(columns=columns).execute(
            self.spark
        )

    def _rewritten(self, name: str, keys: Sequence[str]) -> set[tuple[Any, ...]]:
        """Keys of ``name`` that this run's trim wrote (its ``query_id`` and ``batch_id``)."""
        from pyspark.sql import functions as F

        from jobs.platform.tables import read_table

        rows = (
            read_table(self.spark, self.options.warehouse, name)
            .where((F.col("query_id") == COMPACT_QUERY_ID) & (F.col("batch_id") == self.run_id))
            .select(*keys)
            .collect()
        )
        return {tuple(r) for r in rows}

    @staticmethod
    def _projection(out: DataFrame, kind: str) -> DataFrame:
        """The trim UDF's changes of one projection table, shaped as the ingest writes them."""
        from pyspark.sql import functions as F

        from jobs.ingest.projections import PROJECTION
        from schemas.udf import REDELIVERY

        if kind == REDELIVERY:  # the trim only deletes them
            return out.filter(F.col("kind") == kind).select(*TABLE_KEYS["redeliveries"], "op")
        return PROJECTION[kind].rows(out)

    def _merge_changes(self, name: str, changes: DataFrame) -> int:
        """Upsert / delete projection rows by key, as the ingest maintains them; returns the
        number of rows deleted."""
        if changes.isEmpty():
            return 0
        metrics = self.writer.merge(name, changes).changes().execute(self.spark)
        return int(metrics["num_deleted_rows"] or 0) if metrics is not None else 0


# ---- command line ---------------------------------------------------------------------------
SMALL_WAREHOUSE_BYTES = 64 * 2**20
"""``ackstate compact`` of a local warehouse whose files (tables, checkpoints, everything under
it) hold at most this many bytes starts its driver with the C1 compiler alone
(``jobs.platform.java.QUICK_JIT``), as the short-lived commands do: its work is a few small
Spark jobs per table, over before C2's compiles pay for themselves on two cores. The demo's
warehouse (0.9 MB), copied and compacted twice in new processes, alternated (2026-12-07): the
first run 41.4 and 44.3 → 35.5 and 36.0 s, the second 19.8 and 23.2 → 17.0 and 18.8 s. No
larger warehouse was measured; the bound leaves a margin of seventy times that one, and a
warehouse past it, or on S3, keeps both compilers."""


def run(args: argparse.Namespace) -> int:
    """``ackstate compact``."""
    from jobs.platform.session import get_spark

    options = CompactOptions.from_args(args)
    if locations.holds_at_most(options.warehouse, SMALL_WAREHOUSE_BYTES):
        prefer_quick_jit(args.config.spark)
    spark = get_spark(args.config)
    refuse_beside_live_ingest(spark, options.warehouse)
    report = compact(spark, options)
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(report.format_text() + "\n")
    sys.stdout.flush()
    # 1: a topic partition could not be trimmed now (its state changed meanwhile, or an ingest
    # batch kept running); run again
    skipped = [t for t in report.trims if t.status.startswith(("skipped", "deferred"))]
    return 1 if skipped else 0


SINGLE_WRITER_SCHEMES = ("s3", "s3a", "s3n")
"""Where Delta's default log store serialises commits only within one driver (S3 has no
put-if-absent for it); HDFS, GCS and Azure log stores are safe across applications."""


def refuse_beside_live_ingest(spark: SparkSession, warehouse: str) -> None:
    """A ``CompactError`` when a second application must not commit to ``warehouse`` now: it is
    on S3, no multi-writer log store is configured, and an ingest keeps a fresh heartbeat."""
    from jobs.platform.checkpoints import live_ingests

    scheme = locations.scheme(warehouse)
    if scheme not in SINGLE_WRITER_SCHEMES:
        return
    store = spark.conf.get(f"spark.delta.logStore.{scheme}.impl", None) or spark.conf.get(
        "spark.delta.logStore.class", None
    )
    if store:
        log.info("warehouse on %s with log store %s: compacting beside a running ingest", scheme, store)
        return
    live = live_ingests(warehouse)
    if live:
        ages = ", ".join(f"{b.app_id} ({time.time() - b.at:.0f} s ago)" for b in live)
        raise CompactError(
            f"warehouse {warehouse} is on S3 and an ingest is running there (heartbeat of {ages}): "
            "Delta's S3 log store lets only one application commit, so a compaction beside it can "
            "lose a commit. Set [ingest] compact_every = N to compact inside the ingest, stop the "
            f"ingest first, or give both a multi-writer log store (spark.delta.logStore.{scheme}.impl)"
        )


# ---- helpers --------------------------------------------------------------------------------
def _sql_path(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}
