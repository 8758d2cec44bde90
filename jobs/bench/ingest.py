"""``ackstate bench --ingest``: end-to-end ingest throughput against a same-run Spark pass-through.

DESIGN.md, "Performance targets": local[2], 1M-event micro-batches, 10,000 subscriptions. Issue
13 replaced its absolute 250,000 events/s by a ratio: ackstate sustained >= 0.5 of a Spark
pass-through of the same events in the same run, so the sustained figure has no target of its own.

One run, in the one session ``jobs.platform.session.get_spark`` gives, over the same JSON Lines files
(one file of ``events_per_batch`` events per micro-batch, ``maxFilesPerTrigger=1``,
available-now trigger):

* **pass-through**, the floor of this design: a Structured Streaming query (text source) whose
  ``foreachBatch`` parses every record with ``schemas.events.EVENT_SCHEMA`` (``from_json``),
  sends the columns the apply UDF gets (``schemas.udf.APPLY_EVENT_COLUMNS``) through a grouped
  Arrow UDF per (topic, partition), as the apply must, and appends what the UDF returns (one
  row per topic partition: events, last seq, last event time) to a Delta table. It times each
  batch itself, from entering ``foreachBatch`` to the end of the Delta write. ackstate has to
  parse every field, so the pass-through does too (JSON expression optimisation is off for
  that query only, or Spark would prune the schema to the fields the query reads);
* **ackstate**: ``jobs.ingest.query.start_ingest`` into a fresh warehouse; its per-batch figures are
  the ``ingest_batches`` rows it writes (``duration_ms``: from entering ``foreachBatch`` to
  before that row's own write), and the ``ackstate.ingest`` DEBUG lines "batch N: <phase> took
  X s" are captured to show where each batch's time goes.

Sustained events/s is the median over the batches after the first (the first pays JVM, JIT and
query start-up); the first is reported on its own. Beside them, **whole process**: ``ackstate
ingest`` run as a user runs it, in a process of its own, over the first ``WHOLE_PROCESS_FILES``
files (2M events in the full bench) into a fresh warehouse with the command's defaults (one
available-now micro-batch), timed from the command's start to its exit: Python and JVM start,
Delta's table creation and the query's start included. With ``--runs N`` the whole run is repeated
over the same files (fresh warehouse and checkpoints) and each figure is the median of the
runs' figures. Generating the files is not part of any figure.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.bench.figures import Figure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.ingest.options import IngestOptions
    from jobs.platform.config import AckstateConfig

log = logging.getLogger("ackstate.bench")

RATIO_TARGET = 0.5
SUBSCRIPTIONS_PER_TOPIC = 8  # every role name once, each subscription type twice, per topic partition
PARTITIONS = 4  # every other topic has this many partitions, the others are not partitioned
SEED = 7
JSON_OPTIMIZATION_CONF = "spark.sql.optimizer.enableJsonExpressionOptimization"
_PHASE_MESSAGE = "batch %d: %s took %.2f s"  # jobs.ingest.batch._Phases.done


# ---- workload sizing (pure) ----------------------------------------------------------------
def topic_partitions(topics: int, partitions: int) -> int:
    """How many topic partitions ``jobs.bench.generate`` lays out: every other topic (0, 2, ...) has
    ``partitions`` partitions when ``partitions > 0``, the others are non-partitioned (one each)."""
    if partitions <= 0:
        return topics
    partitioned = (topics + 1) // 2
    return partitioned * partitions + (topics - partitioned)


@dataclass(frozen=True)
class Workload:
    """``batches`` JSON Lines files of ``events_per_batch`` events each (one micro-batch per file)."""

    batches: int
    events_per_batch: int
    topics: int
    partitions: int
    subscriptions_per_topic: int
    seed: int = SEED

    @property
    def events(self) -> int:
        return self.batches * self.events_per_batch

    @property
    def topic_partitions(self) -> int:
        return topic_partitions(self.topics, self.partitions)

    @property
    def subscriptions(self) -> int:
        """Cursors, as ``GenerateSummary.subscriptions`` counts them: one per subscription per
        topic partition."""
        return self.topic_partitions * self.subscriptions_per_topic

    def describe(self) -> str:
        return (
            f"{self.batches} batches x {self.events_per_batch:,} events, "
            f"{self.subscriptions:,} subscriptions ({self.topics} topics, "
            f"{self.topic_partitions:,} topic partitions, "
            f"{self.subscriptions_per_topic} subscriptions each), seed {self.seed}"
        )


def sized(
    subscriptions: int,
    events_per_batch: int,
    batches: int,
    *,
    subscriptions_per_topic: int = SUBSCRIPTIONS_PER_TOPIC,
    partitions: int = PARTITIONS,
    seed: int = SEED,
) -> Workload:
    """The workload with exactly ``subscriptions`` cursors: the number of topics whose layout
    gives ``subscriptions / subscriptions_per_topic`` topic partitions."""
    if subscriptions <= 0 or subscriptions % subscriptions_per_topic:
        raise ValueError(
            f"{subscriptions} subscriptions are not a multiple of {subscriptions_per_topic} per topic"
        )
    units = subscriptions // subscriptions_per_topic
    topics = 1
    while topic_partitions(topics, partitions) < units:
        topics += 1
    if topic_partitions(topics, partitions) != units:
        raise ValueError(f"no number of topics with {partitions} partitions gives {units} topic partitions")
    return Workload(batches, events_per_batch, topics, partitions, subscriptions_per_topic, seed)


WHOLE_PROCESS_FILES = 2  # issue 13: "the whole-process figure for 2M events from a fresh warehouse"
FULL = sized(10_000, 1_000_000, batches=3)
QUICK = sized(1_000, 50_000, batches=3)


# ---- figures (pure) -----------------------------------------------------------------------
@dataclass(frozen=True)
class BatchTiming:
    batch_id: int
    rows: int
    seconds: float

    @property
    def events_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def warmup_and_sustained(rates: Sequence[float]) -> tuple[float, float | None]:
    """(first batch, median of the others); the median is None with fewer than two batches."""
    if not rates:
        raise ValueError("no batches were measured")
    rest = rates[1:]
    return rates[0], (statistics.median(rest) if rest else None)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def batch_line(label: str, timing: BatchTiming, *, first: bool) -> str:
    note = "  (warm-up, not in the median)" if first else ""
    return (
        f"    {label:<13} batch {timing.batch_id}: {timing.rows:>10,} events in {timing.seconds:8.2f} s "
        f"= {timing.events_per_second:>10,.0f} events/s{note}"
    )


def phases_line(phases: Sequence[tuple[str, float]], duration_s: float | None = None) -> str:
    """``read 1.20, validate and apply 8.00, ... (sum 9.2 s of 9.5 s)``."""
    total = sum(s for _, s in phases)
    parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases)
    of = f" of {duration_s:.2f} s" if duration_s is not None else ""
    return f"      phases (s): {parts} (sum {total:.2f} s{of})"


# ---- capturing the ingest phase log -------------------------------------------------------
class _PhaseLog(logging.Handler):
    """Collects ``jobs.ingest.batch`` "batch N: <phase> took X s" DEBUG records, by batch id."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.phases: dict[int, list[tuple[str, float]]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == _PHASE_MESSAGE and isinstance(record.args, tuple) and len(record.args) == 3:
            batch_id, phase, seconds = record.args
            self.phases.setdefault(int(batch_id), []).append((str(phase), float(seconds)))


class _Forward(logging.Handler):
    """Passes the ``ackstate.ingest`` records the user asked for (``--log-level``) to the
    ``ackstate`` handlers, so that capturing DEBUG does not print it; while ``quiet`` it drops
    the streaming progress listener's lines (it reports any query, the pass-through included)."""

    def __init__(self, parent: logging.Logger, threshold: int) -> None:
        super().__init__(logging.NOTSET)
        self.parent_logger, self.threshold, self.quiet = parent, threshold, False

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < self.threshold or (self.quiet and record.module == "progress"):
            return
        self.parent_logger.handle(record)


@contextmanager
def capture_ingest_log() -> Iterator[tuple[_PhaseLog, _Forward]]:
    logger = logging.getLogger("ackstate.ingest")
    saved = (logger.level, logger.propagate)
    threshold = logger.getEffectiveLevel()
    phases, forward = _PhaseLog(), _Forward(logging.getLogger("ackstate"), threshold)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(phases)
    logger.addHandler(forward)
    try:
        yield phases, forward
    finally:
        logger.removeHandler(phases)
        logger.removeHandler(forward)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


# ---- one run --------------------------------------------------------------------------------
@dataclass
class RunResult:
    ackstate: list[BatchTiming] = field(default_factory=list)
    passthrough: list[BatchTiming] = field(default_factory=list)
    phases: dict[int, list[tuple[str, float]]] = field(default_factory=dict)


PASSTHROUGH_OUTPUT = "topic string, partition int, events long, last_seq long, last_event_time long"


def passthrough_group(key: Any, events: Any) -> Any:
    """The pass-through's UDF: what a group cost to receive, and one row back (no engine)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    topic, partition = (k.as_py() for k in key)
    return pa.table(
        {
            "topic": [topic],
            "partition": pa.array([partition], pa.int32()),
            "events": [events.num_rows],
            "last_seq": [pc.max(events["seq"]).as_py()],
            "last_event_time": [pc.max(events["event_time"]).as_py()],
        }
    )


def run_passthrough(
    spark: SparkSession, source: str, work: Path, *, progress: list[Any] | None = None
) -> list[BatchTiming]:
    """The Spark pass-through over ``source``: parse, a grouped Arrow UDF per (topic, partition)
    over the apply's columns, append to Delta. ``progress`` receives the query's progress
    reports (the latency bench reads each batch's trigger-to-commit time there)."""
    from pyspark.sql import functions as F

    from jobs.ingest.query import register_listener
    from jobs.platform.progress import wait_until_reported
    from schemas.events import EVENT_SCHEMA
    from schemas.udf import APPLY_EVENT_COLUMNS

    table = str(work / "table")
    seconds: dict[int, float] = {}
    columns = [c for c in APPLY_EVENT_COLUMNS if c != "_row"]

    def write(raw: Any, batch_id: int) -> None:
        started = time.perf_counter()
        events = raw.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
        per_partition = (
            events.select(F.monotonically_increasing_id().alias("_row"), *columns)
            .groupBy("topic", "partition")
            .applyInArrow(passthrough_group, PASSTHROUGH_OUTPUT)
            .select("*", F.lit(batch_id).cast("long").alias("batch_id"))
        )
        per_partition.write.format("delta").mode("append").save(table)
        seconds[batch_id] = time.perf_counter() - started

    saved = spark.conf.get(JSON_OPTIMIZATION_CONF, None)
    spark.conf.set(JSON_OPTIMIZATION_CONF, "false")
    register_listener(spark)
    try:
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(source)
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(work / "_checkpoint"))
            .queryName("ackstate-bench-passthrough")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        # the session's progress listener hears of this query too: a process that exited before
        # it had made Spark log the callbacks it could no longer deliver as stack traces
        wait_until_reported(str(query.id))
    finally:
        if saved is None:
            spark.conf.unset(JSON_OPTIMIZATION_CONF)
        else:
            spark.conf.set(JSON_OPTIMIZATION_CONF, saved)
    if query.exception() is not None:
        from jobs.platform.errors import AckstateError

        raise AckstateError(f"bench pass-through query failed: {query.exception()}")
    if progress is not None:
        progress.extend(query.recentProgress)
    rows = {int(p.batchId): int(p.numInputRows) for p in query.recentProgress}
    return [BatchTiming(b, rows.get(b, 0), seconds[b]) for b in sorted(seconds)]


def ackstate_options(config: AckstateConfig | None, source: str, warehouse: Path) -> IngestOptions:
    """The ingest a bench measures: one file per micro-batch, and what ``--conf`` says of the
    engine (``EngineSettings``) and of the batch's table writes (``[ingest] write_threads``, ``write_mode``),
    as ``ackstate ingest --conf`` would run it; the packaged defaults without one."""
    from jobs.ingest.options import IngestOptions, batch_settings, engine_settings
    from jobs.platform.config import load_config

    config = config or load_config()
    return IngestOptions(
        source=source,
        warehouse=str(warehouse),
        max_files_per_trigger=1,
        settings=engine_settings(config),
        **batch_settings(config),
    )


def run_ackstate(spark: SparkSession, options: IngestOptions) -> list[BatchTiming]:
    """``ackstate ingest`` with ``options`` into a fresh warehouse; its ``ingest_batches`` rows."""
    from pyspark.sql import functions as F

    from jobs.ingest.query import start_ingest
    from jobs.platform import progress
    from jobs.platform.errors import AckstateError
    from jobs.platform.tables import read_table

    warehouse = options.warehouse
    query = start_ingest(spark, options)
    query.awaitTermination()
    progress.wait_until_reported(str(query.id))
    if query.exception() is not None:
        raise AckstateError(f"bench ingest query failed: {query.exception()}")
    batches = (
        read_table(spark, warehouse, "ingest_batches")
        .where(F.col("query_id") == options.app_id)
        .orderBy("batch_id")
        .select("batch_id", "input_rows", "duration_ms")
        .collect()
    )
    return [BatchTiming(int(r["batch_id"]), int(r["input_rows"]), r["duration_ms"] / 1000.0) for r in batches]


def one_run(spark: SparkSession, config: AckstateConfig | None, source: str, work: Path) -> RunResult:
    result = RunResult()
    with capture_ingest_log() as (phase_log, forward):
        forward.quiet = True
        try:
            result.passthrough = run_passthrough(spark, source, work / "passthrough")
        finally:
            forward.quiet = False
        result.ackstate = run_ackstate(spark, ackstate_options(config, source, work / "warehouse"))
        result.phases = dict(phase_log.phases)
    return result


def run_whole_process(files: Sequence[Path], work: Path) -> BatchTiming:
    """``ackstate ingest`` of ``files`` in a process of its own, into a fresh warehouse, with the
    command's defaults: its events and its wall time from start to exit."""
    source = work / "source"
    source.mkdir(parents=True)
    events = 0
    for file in files:
        os.link(file, source / file.name)
        with open(file, "rb") as fh:
            events += sum(1 for _ in fh)
    command = [sys.executable, "-m", "jobs.cli", "ingest", "--source", str(source), "--warehouse"]
    started = time.perf_counter()
    done = subprocess.run([*command, str(work / "warehouse")], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"ackstate ingest exited with {done.returncode}: {done.stderr[-2000:]}")
    return BatchTiming(0, events, seconds)


# ---- the command ------------------------------------------------------------------------------
def generate_workload(workload: Workload, out: Path) -> None:
    from jobs.bench.generate import generate

    started = time.perf_counter()
    summary = generate(
        out,
        events=workload.events,
        topics=workload.topics,
        partitions=workload.partitions,
        subscriptions_per_topic=workload.subscriptions_per_topic,
        malformed_rate=0.0,
        seed=workload.seed,
        files=workload.batches,
        overwrite=True,
    )
    if summary.subscriptions != workload.subscriptions or summary.partitions != workload.topic_partitions:
        raise RuntimeError(
            f"generator laid out {summary.subscriptions} subscriptions over {summary.partitions} topic "
            f"partitions; the bench sized {workload.subscriptions} over {workload.topic_partitions}"
        )
    size = sum(p.stat().st_size for p in summary.files)
    _print(
        f"  workload: {workload.describe()}; {size / 2**20:,.0f} MiB of JSON Lines, "
        f"generated in {time.perf_counter() - started:.0f} s (not measured)"
    )


def bench_ingest(
    config: AckstateConfig | None,
    runs: int,
    quick: bool,
    *,
    echo: Callable[[str], None] | None = None,
    workdir: Path | None = None,
) -> list[Figure]:
    """Generate the workload, run pass-through and ackstate ``runs`` times; return the figures
    (each batch's figure and phases are printed through ``echo`` as they come)."""
    from jobs.platform.session import get_spark

    echo = echo or _print
    workload = QUICK if quick else FULL
    work = Path(tempfile.mkdtemp(prefix="ackstate-bench-ingest-", dir=workdir))
    try:
        source = work / "events"
        generate_workload(workload, source)
        # before this process starts its own JVM: the command's process is alone, as a user's is
        files = sorted(source.glob("events-*.jsonl"))[:WHOLE_PROCESS_FILES]
        whole = run_whole_process(files, work / "whole-process")
        echo(
            f"  whole process: ackstate ingest of {whole.rows:,} events ({len(files)} files) into a fresh "
            f"warehouse, start to exit, in {whole.seconds:.1f} s = {whole.events_per_second:,.0f} events/s"
        )
        shutil.rmtree(work / "whole-process", ignore_errors=True)
        spark = get_spark(config)
        sc = spark.sparkContext
        echo(
            f"  Spark {spark.version}, master {sc.master}, driver memory "
            f"{sc.getConf().get('spark.driver.memory', '?')}, shuffle partitions "
            f"{spark.conf.get('spark.sql.shuffle.partitions')}; load average {_load()} at start"
        )
        results: list[RunResult] = []
        for run in range(1, runs + 1):
            result = one_run(spark, config, str(source.absolute()), work / f"run-{run}")
            results.append(result)
            _print_run(run, result, echo)
            shutil.rmtree(work / f"run-{run}", ignore_errors=True)
        echo(f"  load average {_load()} at end")
        return [*figures(workload, results), whole_process_figure(whole)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print_run(run: int, result: RunResult, echo: Callable[[str], None]) -> None:
    echo(f"  run {run}:")
    for label, timings in (("pass-through", result.passthrough), ("ackstate", result.ackstate)):
        for i, timing in enumerate(timings):
            echo(batch_line(label, timing, first=i == 0))
            if label == "ackstate" and timing.batch_id in result.phases:
                echo(phases_line(result.phases[timing.batch_id], timing.seconds))


def figures(workload: Workload, results: Sequence[RunResult]) -> list[Figure]:
    """Median over each run's batches after the first; median over runs."""
    ack = [warmup_and_sustained([t.events_per_second for t in r.ackstate]) for r in results]
    thru = [warmup_and_sustained([t.events_per_second for t in r.passthrough]) for r in results]
    ack_runs = [s for _, s in ack if s is not None]
    thru_runs = [s for _, s in thru if s is not None]
    ratio_runs = [r for r in (ratio(a[1], p[1]) for a, p in zip(ack, thru, strict=True)) if r is not None]
    out: list[Figure] = []
    sustained = (
        (
            f"ackstate ingest, sustained ({workload.subscriptions:,} subs)",
            ack_runs,
            "events/s",
            "(see the ratio)",
        ),
        ("Spark pass-through, sustained (same files)", thru_runs, "events/s", "(reference)"),
        ("ackstate / pass-through", ratio_runs, "ratio", f">= {RATIO_TARGET}"),
    )
    for name, runs, unit, target in sustained:
        if runs:
            out.append(Figure(name, statistics.median(runs), unit, target, runs))
    for name, pairs in (("ackstate ingest", ack), ("Spark pass-through", thru)):
        first = [f for f, _ in pairs]
        out.append(
            Figure(
                f"{name}, first batch (warm-up)",
                statistics.median(first),
                "events/s",
                "(not a target)",
                first,
            )
        )
    return out


def whole_process_figure(whole: BatchTiming) -> Figure:
    return Figure(
        f"ackstate ingest, whole process ({whole.rows:,} events)",
        whole.events_per_second,
        "events/s",
        "(reported beside)",
        [],
    )


def _print(line: str) -> None:
    print(line, flush=True)


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"
