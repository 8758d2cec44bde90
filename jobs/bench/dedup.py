"""``ackstate bench --dedup``: producer sends through the real ingest, deduplication on.

The workload is a producer-heavy event log (no consumers): on every topic partition a few
producers send (some batches of several messages), the ledger persists the accepted sends first
in, first out (PUBLISH), producers resend ids that were already persisted (``Dup``) or are still
in flight (``Unknown``), and now and then a write fails (SEND_FAILED) and the producers resend
what was in flight. One JSON Lines file per micro-batch.

Each run, in the one session ``jobs.platform.session.get_spark`` gives, over the same files:

* **pass-through** (``jobs.bench.ingest.run_passthrough``): parse every record with the event
  schema, group by topic partition, append to Delta: the same-run baseline;
* **ackstate**: ``jobs.ingest.query.start_ingest`` with ``broker_deduplication_enabled`` into a fresh
  warehouse; per-batch time is its ``ingest_batches.duration_ms``.

Sustained = median over the batches after the first (the first pays query start-up); each figure
is the median of the runs' figures. Sends/s counts SEND events only; events/s counts them all.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.bench.figures import Figure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.platform.config import AckstateConfig

SEED = 29


@dataclass(frozen=True)
class DedupWorkload:
    batches: int
    events_per_batch: int
    partitions: int  # topic partitions, each with its own producers
    producers_per_partition: int = 3
    seed: int = SEED

    def describe(self) -> str:
        return (
            f"{self.batches} batches x {self.events_per_batch:,} events over {self.partitions:,} topic "
            f"partitions x {self.producers_per_partition} producers, seed {self.seed}"
        )


FULL = DedupWorkload(batches=3, events_per_batch=500_000, partitions=500)
QUICK = DedupWorkload(batches=3, events_per_batch=20_000, partitions=40)


@dataclass(frozen=True)
class WorkloadSummary:
    files: list[Path]
    sends: list[int]  # SEND events per file
    events: list[int]


def partition_events(n: int, producers: int, rng: random.Random) -> list[dict]:
    """One topic partition's events (no seq or topic yet), a plausible producer life."""
    out: list[dict] = []
    next_id = [0] * producers
    in_flight: deque[tuple[int, int, int]] = deque()  # (producer, lowest, highest)
    persisted: list[list[int]] = [[] for _ in range(producers)]
    entry = 0
    while len(out) < n:
        r = rng.random()
        p = rng.randrange(producers)
        name = f"producer-{p}"
        if in_flight and (len(in_flight) > 16 or r < 0.40):  # the ledger keeps up with the sends
            q, lo, hi = in_flight.popleft()
            persisted[q].append(lo)
            out.append(
                {
                    "type": "PUBLISH",
                    "ledger_id": 100 + entry // 50_000,
                    "entry_id": entry % 50_000,
                    "producer_name": f"producer-{q}",
                    "sequence_id": lo,
                    "highest_sequence_id": hi,
                    "batch_size": hi - lo + 1,
                }
            )
            entry += 1
        elif r < 0.80:
            size = 1 if rng.random() < 0.8 else rng.randint(2, 10)
            lo = next_id[p]
            next_id[p] += size
            in_flight.append((p, lo, lo + size - 1))
            out.append(
                {
                    "type": "SEND",
                    "producer_name": name,
                    "sequence_id": lo,
                    "highest_sequence_id": lo + size - 1,
                    "num_messages": size,
                }
            )
        elif r < 0.92 and persisted[p]:  # a resend of a persisted id: Dup
            out.append({"type": "SEND", "producer_name": name, "sequence_id": rng.choice(persisted[p])})
        elif r < 0.995 and in_flight:  # a resend of an id in flight: Unknown
            q, lo, hi = rng.choice(in_flight)
            out.append(
                {
                    "type": "SEND",
                    "producer_name": f"producer-{q}",
                    "sequence_id": lo,
                    "highest_sequence_id": hi,
                    "num_messages": hi - lo + 1,
                }
            )
        elif r >= 0.995:
            out.append({"type": "SEND_FAILED"})
            for q, lo, hi in in_flight:  # the producers resend what failed, as it was built
                out.append(
                    {
                        "type": "SEND",
                        "producer_name": f"producer-{q}",
                        "sequence_id": lo,
                        "highest_sequence_id": hi,
                        "num_messages": hi - lo + 1,
                    }
                )
    return out[:n]


def generate_dedup_workload(workload: DedupWorkload, out: Path) -> WorkloadSummary:
    """Write ``workload.batches`` JSON Lines files: batch b holds slice b of every partition."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(workload.seed)
    per_partition = workload.batches * workload.events_per_batch // workload.partitions
    slice_size = per_partition // workload.batches
    handles = [open(out / f"dedup-{b:03d}.jsonl", "w") for b in range(workload.batches)]  # noqa: SIM115
    sends = [0] * workload.batches
    events = [0] * workload.batches
    try:
        for k in range(workload.partitions):
            topic = f"persistent://bench/dedup/topic-{k}"
            stream = partition_events(slice_size * workload.batches, workload.producers_per_partition, rng)
            for i, event in enumerate(stream):
                b = i // slice_size
                record = {
                    "event_id": f"{k}-{i}",
                    "seq": i + 1,
                    "event_time": 1_700_000_000_000 + i,
                    "topic": topic,
                    "partition": -1,
                    **event,
                }
                handles[b].write(json.dumps(record, separators=(",", ":")) + "\n")
                sends[b] += event["type"] == "SEND"
                events[b] += 1
    finally:
        for handle in handles:
            handle.close()
    files = [Path(h.name) for h in handles]
    for b, path in enumerate(files):  # the file source reads the oldest first
        stamp = time.time() - 3600 + b
        os.utime(path, (stamp, stamp))
    return WorkloadSummary(files, sends, events)


@dataclass(frozen=True)
class BatchRate:
    batch_id: int
    events: int
    sends: int
    seconds: float


def run_ackstate_dedup(
    spark: SparkSession, source: str, warehouse: Path, sends: Sequence[int]
) -> list[BatchRate]:
    from pyspark.sql import functions as F

    from engine import EngineSettings
    from jobs.ingest.options import IngestOptions
    from jobs.ingest.query import start_ingest
    from jobs.platform import progress
    from jobs.platform.errors import AckstateError
    from jobs.platform.tables import read_table

    options = IngestOptions(
        source=source,
        warehouse=warehouse,
        max_files_per_trigger=1,
        settings=EngineSettings(broker_deduplication_enabled=True),
    )
    query = start_ingest(spark, options)
    query.awaitTermination()
    progress.wait_until_reported(str(query.id))
    if query.exception() is not None:
        raise AckstateError(f"bench dedup ingest failed: {query.exception()}")
    rows = (
        read_table(spark, warehouse, "ingest_batches")
        .where(F.col("query_id") == options.app_id)
        .orderBy("batch_id")
        .select("batch_id", "input_rows", "duration_ms")
        .collect()
    )
    return [
        BatchRate(
            int(r["batch_id"]), int(r["input_rows"]), sends[int(r["batch_id"])], r["duration_ms"] / 1000
        )
        for r in rows
    ]


def _sustained(values: Sequence[float]) -> float | None:
    return statistics.median(values[1:]) if len(values) > 1 else None


def bench_dedup(
    config: AckstateConfig | None,
    runs: int,
    quick: bool,
    *,
    echo: Callable[[str], None] | None = None,
    workdir: Path | None = None,
) -> list[Figure]:
    from jobs.bench.ingest import capture_ingest_log, phases_line, run_passthrough
    from jobs.platform.session import get_spark

    echo = echo or (lambda line: print(line, flush=True))
    workload = QUICK if quick else FULL
    work = Path(tempfile.mkdtemp(prefix="ackstate-bench-dedup-", dir=workdir))
    try:
        started = time.perf_counter()
        summary = generate_dedup_workload(workload, work / "events")
        echo(
            f"  workload: {workload.describe()}; {sum(summary.sends):,} of {sum(summary.events):,} events "
            f"are SENDs; generated in {time.perf_counter() - started:.0f} s (not measured)"
        )
        spark = get_spark(config)
        source = str((work / "events").absolute())
        send_rates, event_rates, thru_rates, ratios = [], [], [], []
        for run in range(1, runs + 1):
            run_dir = work / f"run-{run}"
            with capture_ingest_log() as (phase_log, forward):
                forward.quiet = True
                try:
                    thru = run_passthrough(spark, source, run_dir / "passthrough")
                finally:
                    forward.quiet = False
                ack = run_ackstate_dedup(spark, source, run_dir / "warehouse", summary.sends)
            echo(f"  run {run}:")
            for t in thru:
                echo(f"    pass-through  batch {t.batch_id}: {t.rows:>9,} events in {t.seconds:7.2f} s")
            for a in ack:
                echo(
                    f"    ackstate      batch {a.batch_id}: {a.events:>9,} events ({a.sends:,} sends) "
                    f"in {a.seconds:7.2f} s = {a.sends / a.seconds:,.0f} sends/s"
                )
                if a.batch_id in phase_log.phases:
                    echo(phases_line(phase_log.phases[a.batch_id], a.seconds))
            s = _sustained([a.sends / a.seconds for a in ack])
            e = _sustained([a.events / a.seconds for a in ack])
            p = _sustained([t.events_per_second for t in thru])
            if s is not None and e is not None and p:
                send_rates.append(s)
                event_rates.append(e)
                thru_rates.append(p)
                ratios.append(e / p)
            shutil.rmtree(run_dir, ignore_errors=True)
        figures = []
        for name, values, unit, target in (
            ("ackstate ingest, dedup on, sustained", send_rates, "sends/s", "(none set)"),
            ("  the same, all events", event_rates, "events/s", "(none set)"),
            ("Spark pass-through, sustained (same files)", thru_rates, "events/s", "(reference)"),
            ("ackstate / pass-through (events)", ratios, "ratio", "(reference)"),
        ):
            if values:
                figures.append(Figure(name, statistics.median(values), unit, target, values))
        return figures
    finally:
        shutil.rmtree(work, ignore_errors=True)
