"""One micro-batch of ``ackstate ingest``, exactly once: ``BatchWriter``, the query's ``foreachBatch``.

For each micro-batch of the query (``jobs.ingest.query``), ``BatchWriter``:

1. splits the records into valid events and rejected records (``jobs.ingest.validate``);
2. reads the state of the topic partitions the batch touches (``topic_partitions``, ``cursors``),
   or takes it from the last batch when no other writer has committed to them since
   (``jobs.ingest.warm``);
3. cogroups events and state by buckets of topic partitions and applies them in the Arrow UDF
   ``udfs.apply.apply_bucket``, which calls the engine for each topic partition: replays are
   dropped there (``stale_seq``), broker refusals recorded, new state and projection changes
   returned;
4. writes ``rejected_events``, ``cursors``, ``topic_partitions``, ``ack_ranges``,
   ``batch_acks``, ``ledgers``, the consumer and producer tables, touching only this batch's
   keys, up to ``write_threads`` tables at once (each write in a session of its own), and
   then ``ingest_batches``.

Exactly once without multi-table transactions: every output is a pure function of the batch's
input and the state it started from, and a write a crashed run already committed is skipped
when the batch runs again. Each write is tagged (``userMetadata``) with the batch and the
versions of ``cursors``, ``topic_partitions`` and ``ledger_trims`` it read. When the first
batch of a run repeats a batch an earlier run began (its checkpoint has offsets and no commit
for it, ``jobs.platform.checkpoints``), it reads those same versions and skips the appends
whose tag is in their table's history (``jobs.ingest.recovery``); the MERGEs carry Delta's
idempotent-write pair (``txnAppId`` = this query's app id, ``txnVersion`` = the batch id), so
Delta skips one already committed.

Ledger trims requested by ``ackstate compact`` (``ledger_trims``) are applied by the batch to
the partitions it writes, before their events (``udfs.apply``): a trim that compact commits
while the batch runs is then part of what the batch writes, not undone by it.
(``jobs.ingest.recovery`` reads the versions back.)
"""

from __future__ import annotations

import logging
import queue
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.compact.compaction import CompactOptions
from jobs.ingest.arrow_batches import apply_settings, event_row_bytes, state_row_bytes
from jobs.ingest.counts import (
    KindCounts,
    OutputCounts,
    classified_summary,
    counts_of_frame,
    counts_of_rows,
    input_summary,
    input_summary_of_rows,
)
from jobs.ingest.options import IngestOptions
from jobs.ingest.projections import (
    PROJECTIONS,
    SUBSCRIPTION_TABLES,
    Projection,
    refusals,
    state_input,
    unsubscribed_condition,
    with_trim_requests,
)
from jobs.ingest.recovery import NOTHING_WRITTEN, STATE_TABLES, Recovery, read_tag, read_versions, recover
from jobs.ingest.warm import PartitionKey, WarmState, state_changes_table, state_table
from jobs.platform import progress
from jobs.platform.columns import built_once, named
from jobs.platform.delta_writer import DeltaWriter
from jobs.platform.partitioning import bucket_column
from jobs.platform.session import session_settings
from jobs.platform.tables import (
    empty_frame,
    holds_no_rows,
    latest_version,
    local_copy,
    local_copy_and_rows,
    local_frame,
    read_table,
    release,
)
from schemas.tables import REJECTED_EVENT_COLUMNS, TABLES
from schemas.udf import (
    APPLY_OUTPUT,
    CURSOR,
    OUTPUT_UNPACKING,
    PACKED_EVENT_COLUMNS,
    PACKED_EVENTS,
    PACKED_OUTPUT,
    PARTITION,
    STATE_INPUT,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("ackstate.ingest")

INTERPRETED = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
"""The session settings of a batch whose expressions run interpreted (``[ingest]
interpreted_rows``). Spark generates the source of a projection's code in every task and only
then finds the compiled class in its cache; over Delta's nested log actions, which each MERGE
reads, that was a quarter of a small batch's driver CPU (README, "Benchmarks"). Interpreted
expressions skip it and cost more per row. The setting is internal to Spark (its tests run
every expression both ways) and has kept its name and values since Spark 2.4."""

EVENTS_PER_APPLY_CALL = 50_000
"""Input records per bucket of topic partitions that one call of the apply UDF gets
(``BatchWriter._apply_buckets``): few enough calls that Spark's cost per group is nothing, few
enough rows that a call's events (some 15 MB of Arrow) stay small in the Python worker."""

SINGLE_PARTITION = {"spark.sql.maxSinglePartitionBytes": str(2**63 - 1)}
"""The session settings of a batch that runs in one partition (``[ingest]
single_partition_rows``). Its input is coalesced to one partition, and so are the state it
reads and each table's rewrite (``jobs.platform.rewrite``), so that every join and cogroup
between them runs in one task with no shuffle. Spark keeps a join of single-partition sides
unshuffled only while it estimates each at most this many bytes (default 128 MiB), and its
estimates of a batch's frames are products over the joins they come from; the batch is known to
be small by its count of input records, so the limit is lifted for it. The state it reads and
the apply's output are copied into the plan (``local_copy``), whose estimates are their sizes, so
that the estimates do not multiply from batch to batch (the warm state is built from the
output) past what the setting can hold."""


def _packed_events() -> list[Column]:
    """The apply's event side: the key columns, and the events as ``PACKED_EVENTS``."""
    from pyspark.sql import functions as F

    return [*named(("topic", "partition")), F.struct(*named(PACKED_EVENT_COLUMNS)).alias(PACKED_EVENTS)]


def unpacked_output() -> list[Column]:
    """``APPLY_OUTPUT``'s columns from the UDF's ``PACKED_OUTPUT`` rows: each column is its slot
    in the rows of the kinds that fill it there, null in the others."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    unpacked = {
        name: (F.when(kind.isin(*kinds), F.col(slot)) if kinds else F.col(slot)).alias(name)
        for name, slot, kinds in OUTPUT_UNPACKING
    }
    return [unpacked[name] if name in unpacked else F.col(name) for name in APPLY_OUTPUT.names]


@dataclass(frozen=True)
class _Frames:
    """A batch's ``out`` (the UDF's rows), ``valid`` and ``marked`` (its input rows, valid or
    rejected: ``jobs.ingest.validate``) in one session."""

    out: DataFrame
    valid: DataFrame
    marked: DataFrame


_Write = Callable[["SparkSession", _Frames], None]


class _SharedFrames:
    """A batch's frames as global temp views, readable from every session of the context.

    A DataFrame belongs to the session that made it; a global temp view carries its plan (and
    the cached or checkpointed data under it) to the write sessions. Dropped on exit.
    """

    def __init__(self, spark: SparkSession, prefix: str, **frames: DataFrame) -> None:
        self.spark = spark
        clean = "".join(c if c.isalnum() else "_" for c in prefix)
        self.views = {name: f"ackstate_{clean}_{name}" for name in frames}
        self.frames = frames

    def __enter__(self) -> _SharedFrames:
        for name, frame in self.frames.items():
            frame.createOrReplaceGlobalTempView(self.views[name])
        return self

    def __exit__(self, *exc: object) -> None:
        for view in self.views.values():
            self.spark.catalog.dropGlobalTempView(view)

    def bound(self, session: SparkSession) -> _Frames:
        if session is self.spark:
            return _Frames(**self.frames)
        return _Frames(**{name: session.table(f"global_temp.{view}") for name, view in self.views.items()})


class _Phases:
    """Wall time of each phase of a batch, logged at DEBUG: where a slow batch spends its time.
    ``on_phase`` is called after each one (the crash tests kill the job there)."""

    def __init__(self, batch_id: int, on_phase: Callable[[int, str], None] | None) -> None:
        self.batch_id, self.last = batch_id, time.time()
        self.on_phase = on_phase

    def done(self, phase: str, since: float | None = None) -> None:
        """``phase`` ended now; it began at the previous phase's end, or at ``since`` for a
        write that ran beside others (those do not move the sequential clock)."""
        now = time.time()
        log.debug(
            "batch %d: %s took %.2f s", self.batch_id, phase, now - (self.last if since is None else since)
        )
        if since is None:
            self.last = now
        if self.on_phase is not None:
            self.on_phase(self.batch_id, phase)


class BatchWriter:
    """The ``foreachBatch`` function; see the module docstring for the exactly-once design."""

    def __init__(
        self,
        options: IngestOptions,
        *,
        on_phase: Callable[[int, str], None] | None = None,
    ) -> None:
        self.options = options
        self.on_phase = on_phase
        """Called after each phase of each batch (``batch id``, phase name, e.g. ``merge
        cursors``): tests interleave other jobs with a batch, or crash it there."""
        self._first_batch = True
        self._written = 0  # batches with input, for [ingest] compact_every
        self._sessions: list[SparkSession] = []  # for concurrent writes (_write_sessions)
        self.writer = DeltaWriter(
            options.warehouse,
            options.app_id,
            on_write=self._written_one,
            rewrite=options.write_mode == "rewrite",
        )
        self._single_partition = False
        """Whether the batch being written runs in one partition (``SINGLE_PARTITION``)."""
        self._touched: list[PartitionKey] | None = None
        """The topic partitions of the batch being written (None: not known, as in a bootstrap's
        ``write_output``): its MERGEs are then rewrites of their files (``jobs.platform.rewrite``)."""
        self.warm = WarmState() if options.warm_state else None
        """The state the last batches committed (``jobs.ingest.warm``); None: always read Delta."""
        self.repeats: int | None = -1
        """The batch an earlier run began and did not commit (set by ``start_ingest`` from the
        checkpoint; None: none; -1: unknown, so the first batch looks for its own commits)."""
        self._recovered: Recovery = NOTHING_WRITTEN
        """What an earlier run committed of the batch being written (``jobs.ingest.recovery``)."""

    def _written_one(self, what: str, began: float) -> None:
        """A table write ended: a phase of its own, beside the others (``_Phases.done``)."""
        self._phases.done(what, since=began)

    def __call__(self, raw: DataFrame, batch_id: int) -> None:
        spark = raw.sparkSession
        started = time.time()
        self._phases = _Phases(batch_id, self.on_phase)
        tag = f"{self.options.app_id}:{batch_id}"
        repeat = self._first_batch and self.repeats in (-1, batch_id)
        self._recovered = recover(spark, self.options.warehouse, tag) if repeat else NOTHING_WRITTEN
        pinned = self._recovered.versions
        self._first_batch = False

        raw = raw.persist()
        try:
            input_rows = raw.count()
            self._phases.done("read")
            if input_rows == 0:
                return
            self._single_partition = self.options.single_partition(input_rows)
            with self._execution(spark, batch_id, input_rows):
                batch = raw.coalesce(1) if self._single_partition else raw
                self._apply(spark, batch, batch_id, tag, pinned, input_rows, started)
        finally:
            raw.unpersist()
        self._written += 1
        every, compaction = self.options.compact_every, self.options.compaction
        if every and compaction is not None and self._written % every == 0:
            self._compact(spark, compaction, batch_id)

    def _execution(self, spark: SparkSession, batch_id: int, input_rows: int) -> AbstractContextManager[None]:
        """How the batch's Spark work runs, in the query's session and the write sessions:
        interpreted (``INTERPRETED``) up to ``interpreted_rows`` input records, in one partition
        (``SINGLE_PARTITION``) up to ``single_partition_rows``, else as Spark's default.
        Compaction after the batch runs with the default."""
        settings: dict[str, str] = {}
        if self.options.interpreted(input_rows):
            log.debug("batch %d: %d input records, expressions interpreted", batch_id, input_rows)
            settings.update(INTERPRETED)
        if self._single_partition:
            log.debug("batch %d: %d input records, in one partition", batch_id, input_rows)
            settings.update(SINGLE_PARTITION)
        if not settings:
            return nullcontext()
        sessions = [spark]
        if self.options.write_threads > 1:
            sessions += self._write_sessions(spark, self.options.write_threads)
        return session_settings(sessions, settings)

    def _compact(self, spark: SparkSession, compaction: CompactOptions, batch_id: int) -> None:
        """Compact between micro-batches: the query is then the warehouse's one writer. After
        the batch's writes and before its checkpoint commit, so a crash here repeats a batch
        whose writes are all in (idempotent) and a compaction that changes no row."""
        from jobs.compact.compaction import compact

        report = compact(spark, compaction)
        log.info("batch %d: compacted the warehouse in %.1f s", batch_id, report.seconds)
        self._phases.done("compact")

    def write_output(self, spark: SparkSession, out: DataFrame, batch_id: int) -> progress.BatchFigures:
        """Write ``schemas.udf.APPLY_OUTPUT`` rows that no input event produced.

        ``ackstate bootstrap`` computes a starting state outside any micro-batch; it goes to
        the tables through the same writes as a batch's (MERGEs idempotent on app id
        ``options.app_id`` and version ``batch_id``) and an ``ingest_batches`` row of 0 inputs.
        Nothing is looked up in the tables' history: each bootstrap writes a new ``batch_id``.
        """
        self._phases = _Phases(batch_id, self.on_phase)
        self._recovered = NOTHING_WRITTEN  # a bootstrap's batch id is new each time
        self._touched = None
        self._single_partition = False
        started = time.time()
        out = out.localCheckpoint(eager=True)
        none = out.limit(0)  # no input rows, so nothing valid and nothing rejected
        tag = f"{self.options.app_id}:{batch_id}"
        return self._write(spark, none, none, out, batch_id, tag, 0, started)

    def _apply(
        self,
        spark: SparkSession,
        raw: DataFrame,
        batch_id: int,
        tag: str,
        pinned: dict[str, int],
        input_rows: int,
        started: float,
    ) -> None:
        from pyspark.sql import functions as F

        from jobs.ingest.validate import (
            INPUT_ORDER_COLUMN,
            classify,
            duplicate_keys,
            mark_duplicates,
            mark_duplicates_in_partition,
            valid_records,
        )

        checkpoints: list[DataFrame] = []  # this batch's own, freed at its end (``release``)
        longest_record = 0  # octets of the longest valid record, where a job counts them
        try:
            if self._single_partition:
                # the rows themselves, in one job, in the driver and in the plan: every later
                # plan reads a small relation instead of classify's projections, which each
                # query would otherwise analyse, canonicalise (to find them in the cache) and
                # optimise again
                marked = mark_duplicates_in_partition(classify(raw))
                marked, marked_rows = local_copy_and_rows(spark, marked, marked.schema)
                touched, rejections = input_summary_of_rows(marked_rows)
            else:  # parsed and checked once: the valid and the rejected rows read them
                # Checkpointed rows, not Spark's cache: the cache encodes the rows into column
                # batches and decodes them on each read, 3-5 s of CPU per million records more
                # than copying the rows (README, "Benchmarks").
                classified = classify(raw).localCheckpoint(eager=True)
                checkpoints.append(classified)
                summary = classified_summary(classified)
                touched, rejections, marked = summary.touched, summary.rejections, classified
                longest_record = summary.longest_record
                if summary.repeated_hashes:  # a duplicate event id, or a hash collision
                    duplicates = duplicate_keys(classified).localCheckpoint(eager=True)
                    checkpoints.append(duplicates)
                    marked = mark_duplicates(classified, duplicates)
                    touched, rejections = input_summary(marked)
            # the rejected records (and their details) are planned only when there are some
            valid = valid_records(marked, keep_order=True).withColumnRenamed(INPUT_ORDER_COLUMN, "_row")
            self._phases.done("validate")
            self._touched = touched
            # pinned: the versions a crashed run of this batch read (a version of a table it
            # did not know, e.g. ledger_trims, is absent: nothing to read there)
            versions = pinned or read_versions(spark, self.options.warehouse)
            tag = read_tag(tag, versions)
            touched_keys = F.broadcast(local_frame(spark, touched, "topic string, partition int"))
            base_rows: pa.Table | None = None  # the state in the driver (one partition)
            out_rows: pa.Table | None = None  # the apply's rows in the driver (one partition)
            if self._single_partition:
                base_rows = self._state_rows(
                    spark, versions, touched, touched_keys, warm=not pinned, in_driver=True
                )
                base = spark.createDataFrame(base_rows, STATE_INPUT)
            else:
                base = self._state_rows(spark, versions, touched, touched_keys, warm=not pinned)
                checkpoints.append(base)
            trims = self._trim_requests(spark, versions, touched_keys)
            state = base if trims is None else with_trim_requests(base, trims)
            if self._single_partition:  # in the plan, with its size known (SINGLE_PARTITION)
                state = (state if trims is None else local_copy(spark, state, STATE_INPUT)).coalesce(1)
            self._phases.done("read state")
            settings = self.options.settings

            def apply(key: Any, events: Any, current: Any) -> Any:
                from udfs.apply import apply_bucket

                return apply_bucket(key, events, current, settings)

            # The events travel as one struct column (PACKED_EVENTS says why), the rows come back
            # packed into typed slots and are unpacked in the JVM (PACKED_OUTPUT says why), a
            # UDF call per bucket of topic partitions (``_apply_buckets``).
            # Materialised with its lineage cut: a cached plan that reads `cursors` would be
            # invalidated (and silently recomputed from the new state) by this batch's own MERGE.
            bucket = self._apply_buckets(spark, input_rows)
            out = (
                valid.select(*built_once("batch.packed_events", _packed_events))
                .groupBy(bucket)
                .cogroup(state.groupBy(bucket))
                .applyInArrow(apply, PACKED_OUTPUT)
                .select(*built_once("batch.unpacked_output", unpacked_output))
            )
            if self._single_partition:  # in the plan, with its size known (SINGLE_PARTITION)
                out, out_rows = local_copy_and_rows(spark, out, APPLY_OUTPUT)
                out, counts = out.coalesce(1), counts_of_rows(out_rows)
            else:  # Arrow batches of rows bounded by size, with no check of each row's size
                longest_row = max(event_row_bytes(longest_record), state_row_bytes(base))
                with session_settings([spark], apply_settings(spark, longest_row)):
                    out = out.localCheckpoint(eager=True)
                checkpoints.append(out)
                counts = None
            self._phases.done("apply")
            keep = None
            if self.warm is not None and not pinned:

                def keep(tables: Collection[str], lineage: list[Any]) -> None:
                    self._keep_state(
                        spark,
                        base,
                        base_rows,
                        out,
                        out_rows,
                        lineage,
                        touched,
                        touched_keys,
                        versions,
                        tables,
                    )

            figures = self._write(
                spark, valid, marked, out, batch_id, tag, input_rows, started, keep, rejections, counts
            )
        finally:
            for frame in checkpoints:
                release(frame)
        progress.record(figures)

    def _apply_buckets(self, spark: SparkSession, input_rows: int) -> Column:
        """The apply's grouping: buckets of topic partitions, about ``EVENTS_PER_APPLY_CALL``
        input records each, on the tasks grouping by topic partition would use
        (``jobs.platform.partitioning``). Spark's cogroup costs about 0.6 ms per group and the
        UDF call a little more: 1,250 topic partitions of a 1M-event batch, one group each, were
        some 0.8 s of a 4 s apply stage with a UDF that did nothing. A batch in one partition has
        one task, and its buckets only bound the rows per call."""
        tasks = 1 if self._single_partition else int(spark.conf.get("spark.sql.shuffle.partitions") or 1)
        per_task = max(1, -(-input_rows // (tasks * EVENTS_PER_APPLY_CALL)))
        return bucket_column(("topic", "partition"), tasks, per_task).alias("_bucket")

    def _state_rows(
        self,
        spark: SparkSession,
        versions: dict[str, int],
        touched: list[PartitionKey],
        touched_keys: DataFrame,
        *,
        warm: bool,
        in_driver: bool = False,
    ) -> DataFrame | pa.Table:
        """The ``STATE_INPUT`` rows (no trim requested) of the ``touched`` partitions
        (``touched_keys``: the same as a frame) at ``versions``: kept from the last batch
        (``jobs.ingest.warm``) when they still equal those versions, else read from Delta.
        Materialised: a plan that reads ``cursors`` would be invalidated (and silently
        recomputed from the new state) by this batch's own MERGE. ``in_driver``: collected
        into an Arrow table, for a batch that runs in one partition (rows the last batch kept
        in the driver then need no Spark job)."""
        if warm and self.warm is not None:
            take = self.warm.table_for if in_driver else self.warm.rows_for
            kept = take(versions, touched, touched_keys)
            if kept is not None:
                log.debug("batch state: %d topic partition(s) kept from the last batch", len(touched))
                return kept
        rows, from_delta = self._read_state(spark, versions, touched_keys)
        if in_driver:
            return state_table(rows.toArrow())
        return rows.localCheckpoint(eager=True) if from_delta else rows

    def _read_state(
        self, spark: SparkSession, versions: dict[str, int], touched_keys: DataFrame
    ) -> tuple[DataFrame, bool]:
        """The state rows of the touched partitions at ``versions``, not materialised, and
        whether they are read from Delta (False: the tables are known empty, and the rows are
        local relations that no write invalidates)."""
        keys = ["topic", "partition"]
        if all(
            t in versions and holds_no_rows(spark, self.options.warehouse, t, versions[t])
            for t in STATE_TABLES
        ):  # a new warehouse: nothing to read
            log.debug("batch state: the state tables are empty")
            empty = {t: empty_frame(spark, TABLES[t]) for t in STATE_TABLES}
            return state_input(empty["topic_partitions"], empty["cursors"]), False
        partitions = read_table(
            spark, self.options.warehouse, "topic_partitions", as_of=versions.get("topic_partitions")
        ).join(touched_keys, keys, "left_semi")
        cursors = read_table(spark, self.options.warehouse, "cursors", as_of=versions.get("cursors")).join(
            touched_keys, keys, "left_semi"
        )
        return state_input(partitions, cursors), True

    def _keep_state(
        self,
        spark: SparkSession,
        base: DataFrame,
        base_rows: pa.Table | None,
        out: DataFrame,
        out_rows: pa.Table | None,
        lineage: list[Any],
        touched: list[PartitionKey],
        touched_keys: DataFrame,
        read: dict[str, int],
        tables: Collection[str],
    ) -> None:
        """Keep the state this batch committed for the next (``jobs.ingest.warm``): the tables
        must be at the versions it read plus its own commits to them. A batch whose state is in
        the driver (``base_rows``) keeps it there, with its changes taken from the apply's rows
        that are there too (``out_rows``), with no Spark job."""
        assert self.warm is not None
        expected = {t: read[t] + (1 if t in tables else 0) for t in STATE_TABLES}
        latest = {t: latest_version(spark, self.options.warehouse, t) for t in STATE_TABLES}
        if base_rows is not None and out_rows is not None:
            changes = state_changes_table(out_rows)
            self.warm.keep_table(base_rows, changes, touched, read, expected, latest)
            return
        self.warm.keep(
            base,
            out,
            lineage,
            touched,
            touched_keys,
            read,
            expected,
            latest,
            single_partition=self._single_partition,
        )

    def _trim_requests(
        self, spark: SparkSession, versions: dict[str, int], touched_keys: DataFrame
    ) -> DataFrame | None:
        """The largest requested first retained ledger of each touched partition (trims only move
        forward; one already applied deletes nothing again). None: no trim was ever requested."""
        from pyspark.sql import functions as F

        version = versions.get("ledger_trims")
        if not version:  # version 0 is the empty table as created
            return None
        return (
            read_table(spark, self.options.warehouse, "ledger_trims", as_of=version)
            .join(touched_keys, ["topic", "partition"], "left_semi")
            .groupBy("topic", "partition")
            .agg(F.max("first_retained_ledger").alias("first_retained_ledger"))
        )

    # ---- writes -------------------------------------------------------------------------
    def _write(
        self,
        spark: SparkSession,
        valid: DataFrame,
        marked: DataFrame,
        out: DataFrame,
        batch_id: int,
        tag: str,
        input_rows: int,
        started: float,
        keep: Callable[[Collection[str], list[Any]], None] | None = None,
        rejections: Mapping[str, int] | None = None,
        counts: OutputCounts | None = None,
    ) -> progress.BatchFigures:
        """Write the batch's tables, then ``ingest_batches``; ``keep`` is called in between with
        the tables written (and the batch's lineage columns). ``marked``: the batch's input rows,
        valid or rejected (``jobs.ingest.validate``). ``rejections``: the batch's records
        rejected by validation, per reason; ``counts``: ``out`` counted, if it was already."""
        from pyspark.sql import functions as F

        lineage = [
            F.lit(self.options.app_id).alias("query_id"),
            F.lit(batch_id).cast("long").alias("batch_id"),
        ]
        # What the batch changed, per kind of UDF row, and the engine's refusals per reason
        # (``jobs.ingest.counts``): counted already when the rows are in the driver, else in one
        # Spark job. The refusals are few: they are broadcast to the valid rows (no shuffle of
        # the batch) and only the matched rows are rendered back to JSON (``_write_rejects``).
        if counts is None:
            counts = counts_of_frame(out)
        kinds, unsubscribed = counts.kinds, counts.unsubscribed
        reasons = dict(Counter(rejections or {}) + Counter(counts.refusals))
        self._phases.done("count")

        writes = self._table_writes(kinds, bool(reasons), lineage, batch_id, tag, unsubscribed)
        with _SharedFrames(
            spark, f"{self.options.app_id}_{batch_id}", out=out, valid=valid, marked=marked
        ) as frames:
            self._run_writes(spark, frames, writes)
        self._phases.done("writes")
        if keep is not None:
            keep([table for table, _ in writes], lineage)
            self._phases.done("keep state")

        partition_row = kinds.get(PARTITION)
        stale = int(reasons.get("stale_seq", 0))
        figures = progress.BatchFigures(
            batch_id=batch_id,
            input_rows=input_rows,
            applied_rows=partition_row.applied if partition_row else 0,
            rejected_rows=sum(int(v) for v in reasons.values()),
            stale_rows=stale,
            duplicate_rows=int(reasons.get("duplicate_event_id", 0)),
            partitions_touched=partition_row.rows if partition_row else 0,
            cursors_touched=kinds[CURSOR].changed if CURSOR in kinds else 0,
            duration_ms=max(1, int((time.time() - started) * 1000)),
        )
        self._append(spark, "ingest_batches", self._batch_row(figures, started), tag)
        return figures

    def _batch_row(self, figures: progress.BatchFigures, started: float) -> pa.Table:
        """The batch's ``ingest_batches`` row, made in the driver: it is appended from there
        (``DeltaWriter.append``). ``started_at`` is ``started`` to the microsecond, truncated
        as Spark casts seconds to a timestamp; ``finished_at`` is now."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        values = {
            **figures.as_dict(),  # the batch id, its counts and rows_per_second
            "query_id": self.options.app_id,
            "started_at": int(started * 1_000_000),
            "finished_at": int(time.time() * 1_000_000),
        }
        arrow = to_arrow_schema(TABLES["ingest_batches"])
        return pa.table({f.name: pa.array([values[f.name]], f.type) for f in arrow}, schema=arrow)

    def _append(self, spark: SparkSession, table: str, rows: DataFrame | pa.Table, tag: str) -> None:
        """Append the batch's new rows to ``table``, unless a crashed run of this batch did. A
        batch in one partition has few rows: they are collected and written from the driver."""
        if table in self._recovered.appended:
            log.info("batch %s: %s already holds this batch's rows; not appended again", tag, table)
            return
        self.writer.append(spark, table, rows, tag=tag, small=self._single_partition)

    # ---- the table writes of a batch ---------------------------------------------------------
    def _table_writes(
        self,
        kinds: Mapping[str, KindCounts],
        any_rejects: bool,
        lineage: list[Any],
        batch_id: int,
        tag: str,
        unsubscribed: list[tuple[str, int, str]],
    ) -> list[tuple[str, _Write]]:
        """One write per table this batch changes, as (table, function of (session, frames)).

        They are independent: each is skipped on its own when a crashed run committed it (an
        append by its tag in the table's history, a MERGE by ``txnAppId``/``txnVersion``), and
        each is a pure function of the batch and the state it started from, so they may
        commit in any order and a crash between any two of them is repaired by the re-run
        (module docstring). Only ``ingest_batches``, written after all of them, marks the
        batch done. Projections of one table (``send_receipts``: the batch's receipts, then
        the answers to earlier ones) are one write, in ``PROJECTIONS`` order. With subscriptions
        ``unsubscribed``, every table of ``SUBSCRIPTION_TABLES`` is written, and its MERGE also
        deletes the rows of those subscriptions that the batch does not write.
        """
        writes: list[tuple[str, _Write]] = []
        if any_rejects:
            writes.append(("rejected_events", lambda s, f: self._write_rejects(s, f, lineage, tag)))
        by_table: dict[str, list[Projection]] = {}
        for projection in PROJECTIONS:
            if projection.kind in kinds or (unsubscribed and projection.table in SUBSCRIPTION_TABLES):
                by_table.setdefault(projection.table, []).append(projection)
        gone = unsubscribed_condition(unsubscribed) if unsubscribed else None
        for table, projections in by_table.items():

            def write(s: SparkSession, f: _Frames, projections: list[Projection] = projections) -> None:
                for projection in projections:
                    rows = kinds[projection.kind].rows if projection.kind in kinds else 0
                    self._project(s, f.out, projection, lineage, batch_id, tag, gone, rows)

            writes.append((table, write))
        return writes

    def _project(
        self,
        spark: SparkSession,
        out: DataFrame,
        projection: Projection,
        lineage: list[Any],
        batch_id: int,
        tag: str,
        gone: str | None = None,
        source_rows: int | None = None,
    ) -> None:
        """Write one projection of the batch's UDF rows, as ``PROJECTIONS`` declares it; its
        MERGE into a table of ``SUBSCRIPTION_TABLES`` also deletes the rows of deleted
        subscriptions it does not write (``gone``: their condition, ``unsubscribed_condition``).
        ``source_rows``: the UDF rows of its kind, counted (``jobs.platform.rewrite`` merges few
        enough in the driver)."""
        rows = projection.rows(out, lineage)
        if projection.write is None:
            self._append(spark, projection.table, rows, tag)
            return
        merge = projection.write(self.writer.merge(projection.table, rows))
        if self._touched is not None:
            merge = merge.within(
                self._touched, single_partition=self._single_partition, source_rows=source_rows
            )
        if gone is not None and projection.table in SUBSCRIPTION_TABLES:
            merge = merge.when_not_matched_by_source_delete(gone)
        merge.execute(spark, version=batch_id, tag=tag)

    def _run_writes(
        self, spark: SparkSession, frames: _SharedFrames, writes: list[tuple[str, _Write]]
    ) -> None:
        """Run the writes ``write_threads`` at a time, each in a session of its own.

        A MERGE's idempotent-write pair is session configuration (Delta reads
        ``spark.databricks.delta.write.*`` from the session), so concurrent MERGEs need one
        session each; sessions share the SparkContext, the cached batch and the global temp
        views that carry ``out``/``valid``/``marked`` over. Most of a small MERGE is driver
        work and waiting (Delta log, planning, commit), which the others fill. Every write
        is waited for before the first error is raised: a restart must not race a write of
        the batch it repeats.
        """
        threads = max(1, min(self.options.write_threads, len(writes)))
        if threads == 1:
            for _, fn in writes:
                fn(spark, frames.bound(spark))
            return
        sessions: queue.SimpleQueue[SparkSession] = queue.SimpleQueue()
        for session in self._write_sessions(spark, threads):
            sessions.put(session)

        def run(fn: _Write) -> None:
            session = sessions.get()
            try:
                fn(session, frames.bound(session))
            finally:
                sessions.put(session)

        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ackstate-write") as pool:
            futures = [pool.submit(run, fn) for _, fn in writes]
            wait(futures)
        for future in futures:
            future.result()  # the first failure, in write order

    def _write_sessions(self, spark: SparkSession, n: int) -> list[SparkSession]:
        """``n`` sessions for concurrent writes, created once, with the query session's SQL conf."""
        while len(self._sessions) < n:
            session = spark.newSession()
            for key, value in spark.conf.getAll.items():
                if spark.conf.isModifiable(key):
                    session.conf.set(key, value)
            self._sessions.append(session)
        return self._sessions[:n]

    def _write_rejects(self, spark: SparkSession, frames: _Frames, lineage: list[Any], tag: str) -> None:
        from pyspark.sql import functions as F

        from jobs.ingest.validate import rejected_records

        out, valid = frames.out, frames.valid
        refused = refusals(out)
        engine_rejects = valid.join(F.broadcast(refused), "_row").select(
            *[c for c in REJECTED_EVENT_COLUMNS if c != "raw"],
            F.to_json(F.struct(*[c for c in valid.columns if c != "_row"])).alias("raw"),
        )
        all_rejects = rejected_records(frames.marked).unionByName(
            engine_rejects.select(*REJECTED_EVENT_COLUMNS)
        )
        self._append(
            spark,
            "rejected_events",
            all_rejects.select("*", *lineage, F.current_timestamp().alias("rejected_at")),
            tag,
        )
