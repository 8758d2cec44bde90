"""``ackstate bench --subscriptions``: per-subscription work over 100,000 subscriptions.

A list of named measurements (``MEASUREMENTS``), run in order, each returning its figures; a new
one is appended to that list. They share one ``Context``: the settings, the sizes, and a Spark
session started only if a measurement asks for it.

Failover assignment (``engine.failover``; ``udfs.failover``): the active consumer of every
subscription of a generated ``consumers`` table:

* 100,000 Failover subscriptions (20,000 in ``--quick``), 5 per topic partition; half the
  topics have 4 partitions (the modulo rule), half are not partitioned (the hash ring); 1-5
  connected consumers each; in 30 % of subscriptions consumers have priority levels 0-2, in the
  others all 0. Consumer names are
  Pulsar's default (5 random hex digits, ``ConsumerName.generateRandomName``) and a
  subscription's consumers keep their names on every partition of the topic, as a consumer of a
  partitioned topic does;
* **engine, vectorised**: ``select_active_many`` over the flat arrays, one core;
* **engine, scalar loop** (the baseline of the one above, same run): ``select_active`` once per
  subscription, over the first 10,000 subscriptions (its rate does not depend on how many);
* **Spark UDF, local[2]**: ``udfs.failover.active_consumers`` over the table (written to
  Parquet, read and cached in memory), every output row produced (``noop`` sink); its baseline,
  same run and same cached rows: a plain ``groupBy("topic", "partition").count()``, also to the
  ``noop`` sink; and, to show what Spark itself charges per group, the same grouping through a
  grouped Arrow UDF that selects nothing; and the UDF grouped by 64 hash buckets of topic
  partitions instead (``active_consumers(buckets=64)``), which pays that per-group cost 64 times
  instead of once per topic partition.

Rates are subscriptions per second; each figure is the median of ``--runs`` runs, and ratios are
taken within a run, then their median reported.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.failover import FailoverSettings, select_active, select_active_many
from engine.topic import partition_name
from jobs.bench.figures import Figure

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from jobs.platform.config import AckstateConfig

SUBSCRIPTIONS = 100_000
QUICK_SUBSCRIPTIONS = 20_000
SUBSCRIPTIONS_PER_PARTITION = 5
PARTITIONS = 4
SCALAR_SAMPLE = 10_000
BUCKETS = 64  # udfs.failover.active_consumers(buckets=...): topic partitions per UDF call, hashed
SEED = 13


# ---- workload (pure) -------------------------------------------------------------------------
@dataclass(frozen=True)
class FailoverWorkload:
    """One row per connected consumer, subscriptions contiguous and in subscription order."""

    group: np.ndarray  # subscription number, 0..subscriptions-1
    topic: np.ndarray  # object: base topic name, per row
    partition: np.ndarray  # int32, -1 when not partitioned
    subscription: np.ndarray  # object
    consumer_id: np.ndarray  # int64
    consumer_name: list[str]
    priority_level: np.ndarray  # int32
    subscribed_at: np.ndarray  # int64

    @property
    def subscriptions(self) -> int:
        return int(self.group[-1]) + 1 if self.group.size else 0

    @property
    def consumers(self) -> int:
        return int(self.group.size)

    def full_topic_names(self) -> list[str]:
        pairs = zip(self.topic.tolist(), self.partition.tolist(), strict=True)
        return [partition_name(t, p) for t, p in pairs]

    def describe(self) -> str:
        partitioned = int(np.count_nonzero(self.partition >= 0))
        return (
            f"{self.subscriptions:,} Failover subscriptions, {self.consumers:,} consumers "
            f"({partitioned / max(1, self.consumers):.0%} on partitions of {PARTITIONS}-partition topics, "
            f"the rest on non-partitioned topics), seed {SEED}"
        )


def failover_workload(subscriptions: int, seed: int = SEED) -> FailoverWorkload:
    """``subscriptions`` Failover subscriptions laid out as the module docstring says."""
    rng = np.random.default_rng(seed)
    per = SUBSCRIPTIONS_PER_PARTITION
    units = -(-subscriptions // per)  # topic partitions needed
    topics, partitions = [], []
    t = 0
    while len(partitions) < units:  # alternate a 4-partition topic and a non-partitioned one
        for p in range(PARTITIONS) if t % 2 == 0 else (-1,):
            topics.append(f"persistent://bench/ns/topic-{t}")
            partitions.append(p)
        t += 1
    sub_topic = np.repeat(np.array(topics[:units], dtype=object), per)[:subscriptions]
    sub_part = np.repeat(np.array(partitions[:units], dtype=np.int32), per)[:subscriptions]
    sub_index = np.tile(np.arange(per), units)[:subscriptions]
    # the same names on every partition of a topic: drawn per (topic number, subscription index)
    topic_no = np.array([int(x.rsplit("-", 1)[1]) for x in sub_topic.tolist()], dtype=np.int64)
    name_seed = topic_no * per + sub_index
    count = rng.integers(1, 6, size=name_seed.max() + 1)[name_seed]  # 1-5 consumers, per topic
    n = int(count.sum())
    group = np.repeat(np.arange(subscriptions), count)
    slot = np.arange(n) - np.repeat(np.cumsum(count) - count, count)  # consumer number in its sub
    name_codes = rng.integers(0, 16**5, size=(int(name_seed.max()) + 1, 5))
    names = [f"{code:05x}" for code in name_codes[name_seed[group], slot].tolist()]
    # priority levels, like names, belong to the consumer: the same on every partition
    mixed = rng.random(int(name_seed.max()) + 1) < 0.3
    levels = np.where(mixed[:, None], rng.integers(0, 3, size=name_codes.shape), 0)
    priority_level = levels[name_seed[group], slot].astype(np.int32)
    return FailoverWorkload(
        group=group,
        topic=sub_topic[group],
        partition=sub_part[group],
        subscription=np.array([f"sub-{i}" for i in sub_index.tolist()], dtype=object)[group],
        consumer_id=slot.astype(np.int64),
        consumer_name=names,
        priority_level=priority_level,
        subscribed_at=1_000_000 + np.arange(n, dtype=np.int64),
    )


def consumers_arrow(workload: FailoverWorkload) -> pa.Table:
    """The workload as ``consumers`` table rows (``FAILOVER_INPUT_COLUMNS``)."""
    import pyarrow as pa

    return pa.table(
        {
            "topic": pa.array(workload.topic.tolist(), pa.string()),
            "partition": pa.array(workload.partition, pa.int32()),
            "subscription": pa.array(workload.subscription.tolist(), pa.string()),
            "consumer_id": pa.array(workload.consumer_id, pa.int64()),
            "consumer_name": pa.array(workload.consumer_name, pa.string()),
            "sub_type": pa.array(["Failover"] * workload.consumers, pa.string()),
            "priority_level": pa.array(workload.priority_level, pa.int32()),
            "connected": pa.array(np.ones(workload.consumers, dtype=bool)),
            "subscribed_at": pa.array(workload.subscribed_at, pa.int64()),
        }
    )


# ---- measurements ----------------------------------------------------------------------------
@dataclass
class Context:
    """What the measurements share; Spark starts on first use."""

    config: AckstateConfig | None
    runs: int
    quick: bool
    echo: Callable[[str], None]
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def settings(self) -> FailoverSettings:
        engine = self.config.engine if self.config is not None else {}
        return FailoverSettings.from_config(engine)

    def failover_workload(self) -> FailoverWorkload:
        if "failover" not in self.cache:
            size = QUICK_SUBSCRIPTIONS if self.quick else SUBSCRIPTIONS
            self.cache["failover"] = failover_workload(size)
            self.echo(f"  workload: {self.cache['failover'].describe()}")
        return self.cache["failover"]

    def spark(self) -> SparkSession:
        if "spark" not in self.cache:
            from jobs.platform.session import get_spark

            spark = get_spark(self.config)
            sc = spark.sparkContext
            self.echo(
                f"  Spark {spark.version}, master {sc.master}, shuffle partitions "
                f"{spark.conf.get('spark.sql.shuffle.partitions')}"
            )
            self.cache["spark"] = spark
        return self.cache["spark"]


@dataclass(frozen=True)
class Measurement:
    name: str
    measure: Callable[[Context], list[Figure]]


def _median_runs(runs: int, measure: Callable[[], float]) -> list[float]:
    return [measure() for _ in range(runs)]


def _figure(name: str, values: list[float], unit: str, target: str = "(reference)") -> Figure:
    return Figure(name, statistics.median(values), unit, target, values)


def measure_failover_engine(ctx: Context) -> list[Figure]:
    """Vectorised engine against the scalar loop, both on one core, same run."""
    w = ctx.failover_workload()
    topics = w.full_topic_names()
    consistent = ctx.settings.active_consumer_failover_consistent_hashing
    part = np.where(w.partition >= 0, w.partition, -1)

    def vectorised() -> float:
        started = time.perf_counter()
        selection = select_active_many(w.group, w.priority_level, w.consumer_name, part, topics, consistent)
        elapsed = time.perf_counter() - started
        assert selection.rows.size == w.subscriptions
        return w.subscriptions / elapsed

    sample = min(SCALAR_SAMPLE, w.subscriptions)
    bounds = np.searchsorted(w.group, np.arange(sample + 1))
    subs = [
        ([(int(w.priority_level[i]), w.consumer_name[i]) for i in range(lo, hi)], int(part[lo]), topics[lo])
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    ]

    def scalar() -> float:
        started = time.perf_counter()
        for consumers, partition, topic in subs:
            select_active(consumers, partition, topic, consistent)
        return sample / (time.perf_counter() - started)

    fast, slow = [], []
    for _ in range(ctx.runs):  # interleaved, so both see the same machine load
        fast.append(vectorised())
        slow.append(scalar())
    ratios = [f / s for f, s in zip(fast, slow, strict=True)]
    return [
        _figure(f"failover, engine vectorised ({w.subscriptions:,} subs)", fast, "subs/s"),
        _figure(f"failover, engine scalar loop ({sample:,} subs)", slow, "subs/s"),
        _figure("failover, vectorised / scalar loop", ratios, "ratio"),
    ]


def _passthrough_udf(key: Any, table: Any) -> Any:
    """A grouped Arrow UDF that selects nothing: the output rows with ``is_active`` null. It
    costs what Spark charges per group (Arrow batches to and from the Python worker)."""
    import pyarrow as pa

    from udfs.failover import OUTPUT_ARROW

    n = table.num_rows
    columns = [table.column(name) for name in OUTPUT_ARROW.names[:-1]]
    return pa.Table.from_arrays([*columns, pa.nulls(n, pa.bool_())], schema=OUTPUT_ARROW)


def measure_failover_spark(ctx: Context) -> list[Figure]:
    """The UDF on local Spark against a plain groupBy + count of the same cached rows, and the
    same grouping through a grouped Arrow UDF that does no selection (Spark's per-group cost)."""
    import tempfile

    import pyarrow.parquet as pq

    from schemas.udf import FAILOVER_OUTPUT
    from udfs.failover import active_consumers

    w = ctx.failover_workload()
    spark = ctx.spark()
    settings = ctx.settings
    with tempfile.TemporaryDirectory(prefix="ackstate-bench-subscriptions-") as work:
        pq.write_table(consumers_arrow(w), f"{work}/consumers.parquet")
        frame = spark.read.parquet(f"{work}/consumers.parquet").cache()
        rows = frame.count()  # materialise the cache outside the timings

        def timed(build: Callable[[], Any]) -> float:
            started = time.perf_counter()
            build().write.format("noop").mode("overwrite").save()
            return w.subscriptions / (time.perf_counter() - started)

        builds: dict[str, Callable[[], Any]] = {
            "udf": lambda: active_consumers(frame, settings),
            "bucketed": lambda: active_consumers(frame, settings, buckets=BUCKETS),
            "count": lambda: frame.groupBy("topic", "partition").count(),
            "passthrough": lambda: frame.groupBy("topic", "partition").applyInArrow(
                _passthrough_udf, FAILOVER_OUTPUT
            ),
        }
        for build in builds.values():  # warm-up: Python workers, code generation
            timed(build)
        results: dict[str, list[float]] = {name: [] for name in builds}
        for _ in range(ctx.runs):  # interleaved, so all see the same machine load
            for name, build in builds.items():
                results[name].append(timed(build))
        frame.unpersist()
    base = results["count"]
    groups = int(np.unique(w.group // SUBSCRIPTIONS_PER_PARTITION).size)
    label = f"{w.subscriptions:,} subs, {rows:,} rows"

    def ratio(name: str, to: list[float]) -> list[float]:
        return [a / b for a, b in zip(results[name], to, strict=True)]

    return [
        _figure(
            f"failover, Spark UDF per topic partition ({label}, {groups:,} groups)", results["udf"], "subs/s"
        ),
        _figure("failover, Spark groupBy+count (same rows)", base, "subs/s"),
        _figure("failover, UDF per topic partition / groupBy+count", ratio("udf", base), "ratio"),
        _figure("failover, grouped UDF selecting nothing (same groups)", results["passthrough"], "subs/s"),
        _figure("failover, UDF / UDF selecting nothing", ratio("udf", results["passthrough"]), "ratio"),
        _figure(
            f"failover, Spark UDF over {BUCKETS} buckets of topic partitions", results["bucketed"], "subs/s"
        ),
        _figure(f"failover, UDF over {BUCKETS} buckets / groupBy+count", ratio("bucketed", base), "ratio"),
    ]


def measure_redelivery_set(ctx: Context) -> list[Figure]:
    """The Shared redelivery set of 1,000,000 pending acks (``jobs.bench.redelivery``)."""
    from jobs.bench.redelivery import measure

    pending = 100_000 if ctx.quick else 1_000_000
    got = [measure(runs=1, pending=pending) for _ in range(ctx.runs)]
    return [
        _figure(
            f"redelivery set, engine ({pending:,} pending acks)",
            [g["engine_pending_acks_per_second"] for g in got],
            "acks/s",
        ),
        _figure("redelivery set + UDF rows", [g["udf_rows_seconds"] for g in got], "s"),
        _figure("encode of the subscription after it", [g["encode_seconds"] for g in got], "s"),
        _figure("numpy sort of the same positions", [g["baseline_sort_seconds"] for g in got], "s"),
        _figure("engine / numpy sort", [g["ratio_engine_to_sort"] for g in got], "ratio"),
    ]


MEASUREMENTS: list[Measurement] = [
    Measurement("failover assignment, engine (one core)", measure_failover_engine),
    Measurement("failover assignment, Spark UDF (local Spark)", measure_failover_spark),
    Measurement("Shared redelivery set, engine and UDF rows (one core)", measure_redelivery_set),
]


def bench_subscriptions(
    config: AckstateConfig | None, runs: int, quick: bool, *, echo: Callable[[str], None] | None = None
) -> list[Figure]:
    """Run every measurement of ``MEASUREMENTS``; print each one's figures as they come."""
    echo = echo or (lambda line: print(line, flush=True))
    ctx = Context(config, max(1, runs), quick, echo)
    echo(f"  load average {_load()} at start")
    figures: list[Figure] = []
    for measurement in MEASUREMENTS:
        echo(f"  {measurement.name}:")
        got = measurement.measure(ctx)
        for figure in got:
            echo(figure.line())
        figures.extend(got)
    echo(f"  load average {_load()} at end")
    return figures


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"
