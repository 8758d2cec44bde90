"""``ackstate ingest``: the Structured Streaming query that applies the event stream to the tables.

It reads the events (a directory of JSON Lines files, a Delta table or a Kafka topic), hands
every micro-batch to ``jobs.ingest.batch.BatchWriter`` (``foreachBatch``; the exactly-once
design is there), keeps the query's heartbeat (``jobs.platform.checkpoints``) and reports
progress through a ``StreamingQueryListener`` (``jobs.platform.progress``).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from engine import EngineSettings
from jobs.compact.compaction import CompactOptions
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions, batch_settings, engine_settings
from jobs.platform import locations, progress
from jobs.platform.checkpoints import HeartbeatThread, register, uncommitted_batch
from jobs.platform.errors import IngestError
from jobs.platform.java import prefer_quick_jit
from jobs.platform.tables import ensure_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("ackstate.ingest")

SHORT_INGEST_BYTES = 256 * 2**20
"""An ``available-now`` ingest of a local directory whose files hold at most this many bytes
starts its driver with the C1 compiler alone (``jobs.platform.java.QUICK_JIT``), as the
short-lived commands do. Such a run ends within a minute or so, and on two cores the optimising
compiler takes more CPU from it than its code gives back. New processes, alternated
(2026-12-07): three 200-event batches 21.4 → 16.6 s (medians of three pairs); 100,000 events in
one batch 24.4 and 24.9 → 19.5 and 20.3 s; 1,000,000 events (229 MB) in one batch 41.4 → 37.7 s.
Beyond what was measured, and for a continuous ingest, both compilers stay: a warm small batch
was slower with C1 alone (README, "Where the time goes")."""


def read_source(spark: SparkSession, options: IngestOptions) -> DataFrame:
    """The input stream as one string column ``value`` holding one JSON record per row."""
    from pyspark.sql import functions as F

    if options.format == "json":
        reader = spark.readStream.format("text")
        if options.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", options.max_files_per_trigger)
        return reader.load(options.source)
    if options.format == "delta":
        stream = spark.readStream.format("delta").load(options.source)
        return stream.select(F.to_json(F.struct(*[F.col(c) for c in stream.columns])).alias("value"))
    if options.format == "kafka":
        return _read_kafka(spark, options)
    raise IngestError(f"--format {options.format}: the formats are json, delta and kafka")


KAFKA_SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def _read_kafka(spark: SparkSession, options: IngestOptions) -> DataFrame:
    """Spark's Kafka source over the topic ``options.source``; each record's value is one event.

    Offsets live in the query's checkpoint, so a restart reads on from the last committed
    batch (the exactly-once design is the same as for files). A value that is not an event
    (not JSON, or null) is rejected by validation like a bad line of a file.
    """
    from pyspark.sql import functions as F

    from jobs.platform.session import class_loadable

    servers = str(options.kafka.get("bootstrap_servers") or "")
    if not servers:
        raise IngestError(
            "--format kafka needs the Kafka servers: --kafka-bootstrap-servers HOST:PORT "
            "or [kafka] bootstrap_servers"
        )
    if not class_loadable(KAFKA_SOURCE_CLASS):
        from jobs.platform.kafka import find_spark_kafka_jars

        find_spark_kafka_jars()  # names `ackstate setup --kafka` when the cache is empty
        raise IngestError(
            "Spark's Kafka source is not on this session's class path: start a new session "
            "(the cached jars are added when a session starts), or pass them to spark-submit --jars"
        )
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", options.source)
        .option("startingOffsets", str(options.kafka.get("starting_offsets") or "earliest"))
    )
    if int(options.kafka.get("max_offsets_per_trigger") or 0) > 0:
        reader = reader.option("maxOffsetsPerTrigger", int(options.kafka["max_offsets_per_trigger"]))
    for key, value in (options.kafka.get("options") or {}).items():
        reader = reader.option(f"kafka.{key}", str(value))
    return reader.load().select(F.col("value").cast("string").alias("value"))


def start_ingest(
    spark: SparkSession, options: IngestOptions, writer: BatchWriter | None = None
) -> StreamingQuery:
    ensure_tables(spark, options.warehouse)
    register_listener(spark)
    register(options.warehouse, options.app_id, options.checkpoint_path)
    writer = writer or BatchWriter(options)
    writer.repeats = uncommitted_batch(options.checkpoint_path)
    stream = read_source(spark, options).writeStream.foreachBatch(writer)
    # named by its writer's id: Spark refuses a second active query of the same name in a
    # session, and two ingests (of two sources, or into two warehouses) may share one
    stream = stream.option("checkpointLocation", options.checkpoint_path).queryName(options.app_id)
    if options.trigger == "available-now":
        stream = stream.trigger(availableNow=True)
    elif options.trigger == "continuous":
        stream = stream.trigger(processingTime=options.processing_time)
    else:
        raise IngestError(f"--trigger {options.trigger}: use available-now or continuous")
    query = stream.start()
    heartbeat = HeartbeatThread(
        options.warehouse, options.app_id, options.compact_every, lambda: query.isActive
    )
    for stale in [key for key, thread in _HEARTBEATS.items() if not thread.is_alive()]:
        del _HEARTBEATS[stale]
    _HEARTBEATS[str(query.id)] = heartbeat
    heartbeat.start()
    return query


_HEARTBEATS: dict[str, HeartbeatThread] = {}


def end_heartbeat(query: StreamingQuery) -> None:
    """Remove the stopped ``query``'s heartbeat now (its thread would within a second, but a
    process that exits next would not wait for it)."""
    heartbeat = _HEARTBEATS.pop(str(query.id), None)
    if heartbeat is not None:
        heartbeat.stopped.set()
        heartbeat.join(timeout=30)


_LISTENERS: set[int] = set()


def register_listener(spark: SparkSession) -> None:
    """The progress listener, once per session: every query of the session reports through it."""
    if id(spark) not in _LISTENERS:
        spark.streams.addListener(progress.IngestProgressListener())
        _LISTENERS.add(id(spark))


def run(args: argparse.Namespace) -> int:
    """``ackstate ingest``."""
    from jobs.platform.session import get_spark

    if not args.source:
        raise IngestError(
            "--source is required (a directory of JSON Lines files, a Delta table, or a Kafka topic)"
        )
    source_format = getattr(args, "format", None) or "json"
    compact_every = int(args.config.ingest.get("compact_every", 0))
    if compact_every < 0:
        raise IngestError(f"[ingest] compact_every = {compact_every}: use 0 (never) or a number of batches")
    kafka = dict(args.config.kafka)
    if getattr(args, "kafka_bootstrap_servers", None):
        kafka["bootstrap_servers"] = args.kafka_bootstrap_servers
    options = IngestOptions(
        source=args.source if source_format == "kafka" else locations.resolve(args.source),
        kafka=kafka,
        warehouse=args.warehouse,
        format=source_format,
        trigger=getattr(args, "trigger", None) or args.config.ingest.get("trigger", "available-now"),
        processing_time=getattr(args, "processing_time", None)
        or args.config.ingest.get("processing_time", IngestOptions.processing_time),
        checkpoint=getattr(args, "checkpoint", None),
        max_files_per_trigger=getattr(args, "max_files_per_trigger", None)
        or args.config.ingest.get("max_files_per_trigger"),
        settings=command_settings(args),
        **batch_settings(args.config),
        compact_every=compact_every,
        compaction=replace(CompactOptions.from_args(args), trims=()) if compact_every else None,
    )
    if is_short_ingest(options):
        prefer_quick_jit(args.config.spark)
    spark = get_spark(args.config)
    query = start_ingest(spark, options)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        log.info("stopping ingest")
        query.stop()
    end_heartbeat(query)
    progress.wait_until_reported(str(query.id))
    if query.exception() is not None:
        raise IngestError(f"ingest failed: {query.exception()}")
    return 0


def is_short_ingest(options: IngestOptions) -> bool:
    """Whether the ingest stops by itself within ``SHORT_INGEST_BYTES`` of input: ``available-now``
    over a local directory of JSON Lines that small. Every file under it counts, those an earlier
    run already took too, so a directory that grew past it is not short however little is new;
    a URI, a Delta table or a Kafka topic is not listed and is not short."""
    if options.trigger != "available-now" or options.format != "json":
        return False
    return locations.holds_at_most(options.source, SHORT_INGEST_BYTES, skip_hidden=True)


def command_settings(args: argparse.Namespace) -> EngineSettings:
    """The engine settings ``ackstate ingest`` runs with: ``engine_settings`` of its ``--conf``,
    with ``--implicit-consumers`` when given over ``[ingest] implicit_consumers``."""
    return engine_settings(args.config, getattr(args, "implicit_consumers", None))
