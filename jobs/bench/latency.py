"""``ackstate bench --latency``: how long a warm small micro-batch takes, trigger to last commit.

Issue 13: a warm micro-batch of at most 1,000 mixed events, from its trigger until every table
it changes is committed, at most 3 s median on local[2], with the time of each phase printed.

One run, in the one session ``jobs.platform.session.get_spark`` gives, over the same JSON Lines files
(``jobs.bench.generate``: consecutive slices of one mixed stream, one file per micro-batch,
``maxFilesPerTrigger=1``, available-now trigger, one checkpoint), so that every batch after the
first finds the query, the JVM and the state of the topic partitions warm:

* **ackstate**: ``jobs.ingest.query.start_ingest`` into a fresh warehouse. A batch's latency is
  Spark's ``durationMs.triggerExecution`` of its progress: from the trigger (offsets, write-ahead
  log) through ``foreachBatch`` (every table write and the ``ingest_batches`` append) to the
  checkpoint's commit. The ``ackstate.ingest`` DEBUG lines "batch N: <phase> took X s" give
  the phases inside ``foreachBatch``; what the trigger spends outside it is printed as
  ``streaming``. The Delta commits of each batch are counted from the tables' logs (commits
  tagged with the query's id and the batch).
* **pass-through** (``jobs.bench.ingest.run_passthrough``), the same-run floor: parse, a
  grouped Arrow UDF per topic partition, one Delta append, through the same kind of query.

The first ``warm-up`` batches are left out; the figure is the median of the others.
Generating the files is not part of any figure.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.bench.figures import Figure
from jobs.bench.ingest import ackstate_options, capture_ingest_log, run_passthrough
from jobs.ingest.recovery import batch_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.ingest.options import IngestOptions
    from jobs.platform.config import AckstateConfig

LATENCY_TARGET_S = 3.0
SEED = 11


@dataclass(frozen=True)
class LatencyWorkload:
    """``warmup + measured`` files of ``events_per_batch`` generated events (one batch each)."""

    events_per_batch: int
    warmup: int
    measured: int
    topics: int = 8
    partitions: int = 4
    subscriptions_per_topic: int = 8

    @property
    def batches(self) -> int:
        return self.warmup + self.measured


def workload(runs: int, quick: bool) -> LatencyWorkload:
    """``--runs`` measured batches (at most 2 with ``--quick``), after the warm-up ones."""
    if quick:
        return LatencyWorkload(events_per_batch=200, warmup=1, measured=max(1, min(runs, 2)))
    return LatencyWorkload(events_per_batch=1_000, warmup=2, measured=max(1, runs))


@dataclass(frozen=True)
class BatchLatency:
    """One micro-batch: input rows, trigger-to-commit seconds, seconds inside ``foreachBatch``."""

    batch_id: int
    rows: int
    trigger_s: float
    add_batch_s: float
    phases: list[tuple[str, float]] = field(default_factory=list)
    commits: dict[str, int] = field(default_factory=dict)

    @property
    def streaming_s(self) -> float:
        """What the trigger spends outside ``foreachBatch``: offsets, WAL, checkpoint commit."""
        return max(0.0, self.trigger_s - self.add_batch_s)


def batch_latencies(progress: Sequence[Any]) -> list[BatchLatency]:
    """The batches with input among a query's ``recentProgress``, in batch order."""
    out = []
    for p in progress:
        durations = p.durationMs or {}
        if not p.numInputRows or "triggerExecution" not in durations:
            continue
        out.append(
            BatchLatency(
                int(p.batchId),
                int(p.numInputRows),
                durations["triggerExecution"] / 1000.0,
                durations.get("addBatch", 0) / 1000.0,
            )
        )
    return sorted(out, key=lambda b: b.batch_id)


def commits_by_batch(warehouse: Path, app_id: str) -> dict[int, dict[str, int]]:
    """Delta commits per batch and table, from the ``userMetadata`` tags of the local tables' logs."""
    out: dict[int, dict[str, int]] = {}
    for log_dir in sorted(warehouse.glob("*/_delta_log")):
        table = log_dir.parent.name
        for commit in log_dir.glob("*.json"):
            for line in commit.read_text(encoding="utf-8").splitlines():
                info = json.loads(line).get("commitInfo")
                if info is None:
                    continue
                batch = batch_of(info.get("userMetadata"), app_id)
                if batch is not None:
                    per = out.setdefault(batch, {})
                    per[table] = per.get(table, 0) + 1
    return out


def run_ackstate(spark: SparkSession, options: IngestOptions) -> list[BatchLatency]:
    """``ackstate ingest`` with ``options`` (``ackstate_options``) into a fresh warehouse."""
    from jobs.ingest.query import end_heartbeat, start_ingest
    from jobs.platform import progress
    from jobs.platform.errors import AckstateError

    warehouse = Path(options.warehouse)
    with capture_ingest_log() as (phase_log, _):
        query = start_ingest(spark, options)
        query.awaitTermination()
        end_heartbeat(query)
        progress.wait_until_reported(str(query.id))
    if query.exception() is not None:
        raise AckstateError(f"bench ingest query failed: {query.exception()}")
    commits = commits_by_batch(warehouse, options.app_id)
    return [
        BatchLatency(
            b.batch_id,
            b.rows,
            b.trigger_s,
            b.add_batch_s,
            phase_log.phases.get(b.batch_id, []),
            commits.get(b.batch_id, {}),
        )
        for b in batch_latencies(query.recentProgress)
    ]


def phase_medians(batches: Sequence[BatchLatency]) -> list[tuple[str, float]]:
    """Median seconds of each phase over ``batches`` (0 where a batch lacks it), first-seen order,
    then ``streaming`` (outside ``foreachBatch``)."""
    names: list[str] = []
    for b in batches:
        names.extend(name for name, _ in b.phases if name not in names)
    medians = []
    for name in names:
        medians.append((name, statistics.median(sum(s for n, s in b.phases if n == name) for b in batches)))
    medians.append(("streaming", statistics.median(b.streaming_s for b in batches)))
    return medians


def breakdown_lines(batches: Sequence[BatchLatency]) -> list[str]:
    """The per-phase medians, the table writes (which run side by side inside ``writes``) apart."""
    medians = phase_medians(batches)
    sequential = [(n, s) for n, s in medians if not _is_table_write(n)]
    writes = [(n, s) for n, s in medians if _is_table_write(n)]
    commits = Counter[str]()
    for b in batches:
        commits.update(b.commits)
    per_batch = statistics.median(sum(b.commits.values()) for b in batches)
    lines = [
        "  median per phase (s): " + ", ".join(f"{n} {s:.2f}" for n, s in sequential),
        "  table writes inside 'writes', side by side (s): "
        + (", ".join(f"{n.split(' ', 1)[1]} {s:.2f}" for n, s in writes) or "none"),
        f"  Delta commits per batch (median): {per_batch:g}; tables written in {len(batches)} batches: "
        + ", ".join(f"{t} {c}" for t, c in sorted(commits.items())),
    ]
    return lines


def _is_table_write(phase: str) -> bool:
    """``merge T`` and ``write T`` run beside each other; ``write ingest_batches`` comes after."""
    return phase.startswith("merge ") or (phase.startswith("write ") and phase != "write ingest_batches")


def bench_latency(
    config: AckstateConfig | None,
    runs: int,
    quick: bool,
    *,
    echo: Callable[[str], None] | None = None,
    workdir: Path | None = None,
) -> list[Figure]:
    """Generate the files, run ackstate and the pass-through over them; return the figures
    (each batch and the per-phase medians are printed through ``echo``)."""
    from jobs.bench.generate import generate
    from jobs.platform.session import get_spark

    echo = echo or _print
    work = Path(tempfile.mkdtemp(prefix="ackstate-bench-latency-", dir=workdir))
    w = workload(runs, quick)
    try:
        source = work / "events"
        summary = generate(
            source,
            events=w.events_per_batch * w.batches,
            topics=w.topics,
            partitions=w.partitions,
            subscriptions_per_topic=w.subscriptions_per_topic,
            seed=SEED,
            files=w.batches,
        )
        echo(
            f"  workload: {w.batches} files x {w.events_per_batch:,} generated events "
            f"({summary.partitions} topic partitions, {summary.subscriptions} subscriptions), "
            f"{w.warmup} warm-up batch(es) not in the median"
        )
        spark = get_spark(config)
        started = time.perf_counter()
        ackstate = run_ackstate(spark, ackstate_options(config, str(source.absolute()), work / "warehouse"))
        progress: list[Any] = []
        with capture_ingest_log() as (_, forward):
            forward.quiet = True  # the progress listener would report the pass-through's batches
            run_passthrough(spark, str(source.absolute()), work / "passthrough", progress=progress)
        passthrough = batch_latencies(progress)
        echo(f"  measured in {time.perf_counter() - started:.0f} s")
        for b in ackstate:
            note = "  (warm-up)" if b.batch_id < w.warmup else ""
            echo(
                f"    ackstate batch {b.batch_id}: {b.rows:,} events, trigger to commits {b.trigger_s:.2f} s "
                f"(foreachBatch {b.add_batch_s:.2f} s, {sum(b.commits.values())} Delta commits){note}"
            )
            echo("      phases (s): " + ", ".join(f"{n} {s:.2f}" for n, s in b.phases))
        warm = [b for b in ackstate if b.batch_id >= w.warmup]
        warm_thru = [b for b in passthrough if b.batch_id >= w.warmup]
        if not warm or not warm_thru:
            from jobs.platform.errors import AckstateError

            raise AckstateError(
                f"bench: {len(ackstate)} ackstate and {len(passthrough)} pass-through batches ran, "
                f"fewer than the {w.batches} files"
            )
        for line in breakdown_lines(warm):
            echo(line)
        latency = [b.trigger_s for b in warm]
        floor = [b.trigger_s for b in warm_thru]
        return [
            Figure(
                f"ingest latency, warm batch of {w.events_per_batch:,} events",
                statistics.median(latency),
                "s",
                f"<= {LATENCY_TARGET_S:g}",
                latency,
            ),
            Figure("Spark pass-through, same files", statistics.median(floor), "s", "(reference)", floor),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print(line: str) -> None:
    print(line, flush=True)
