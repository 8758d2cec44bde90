"""``ackstate demo``: the main job on the embedded default, end to end, in one command.

Generates a realistic synthetic Pulsar workload, ingests it with the streaming job into a local
Delta warehouse, and prints what a platform team would look at first: what was applied and
rejected, and the subscriptions with the most backlog and ack holes.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from engine import EngineSettings
from jobs.bench.generate import generate
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import end_heartbeat, is_short_ingest, start_ingest
from jobs.platform import locations, progress
from jobs.platform.errors import IngestError
from jobs.platform.java import prefer_quick_jit
from jobs.platform.tables import read_table

log = logging.getLogger("ackstate.demo")


def run(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    from jobs.platform.session import get_spark

    events = int(args.events)
    # the demo writes its events with the local filesystem, beside a local warehouse
    warehouse = locations.require_local(args.warehouse, "the warehouse", "demo")
    out = locations.require_local(args.out, "--out", "demo") if args.out else None
    out = out or warehouse / "_demo" / f"events-{events}"
    started = time.time()
    if out.exists() and any(out.glob("*.jsonl")):
        print(f"events: reusing {out} (already generated)")
    else:
        summary = generate(
            out,
            events=events,
            topics=4,
            partitions=3,
            subscriptions_per_topic=3,
            malformed_rate=0.001,
            seed=42,
            files=4,
            overwrite=True,
        )
        print(
            f"events: {summary.events:,} written to {out} ({summary.malformed:,} malformed on purpose), "
            f"{summary.partitions} topic partitions, {summary.subscriptions} subscriptions"
        )

    options = IngestOptions(
        source=str(out), warehouse=args.warehouse, settings=EngineSettings.from_config(args.config.engine)
    )
    if is_short_ingest(options):  # the default 100,000 events are: C1 alone, as for `ingest`
        prefer_quick_jit(args.config.spark)
    spark = get_spark(args.config)
    query = start_ingest(spark, options)
    query.awaitTermination()
    end_heartbeat(query)
    progress.wait_until_reported(str(query.id))  # its progress lines before the figures below
    if query.exception() is not None:
        raise IngestError(f"ingest failed: {query.exception()}")

    wh = args.warehouse
    batches = (
        read_table(spark, wh, "ingest_batches")
        .agg(
            F.count(F.lit(1)).alias("batches"),
            F.sum("input_rows").alias("rows"),
            F.sum("applied_rows").alias("applied"),
            F.sum("rejected_rows").alias("rejected"),
        )
        .first()
    )
    print(
        f"ingest: {batches['batches']} micro-batches, {batches['rows'] or 0:,} records in, "
        f"{batches['applied'] or 0:,} applied, {batches['rejected'] or 0:,} rejected "
        f"(warehouse {wh}, {time.time() - started:.0f} s)"
    )
    for row in (
        read_table(spark, wh, "rejected_events").groupBy("reason").count().orderBy(F.desc("count")).collect()
    ):
        print(f"  rejected {row['reason']:<28} {row['count']:>8,}")

    cursors = read_table(spark, wh, "cursors")
    totals = cursors.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("msg_backlog").alias("backlog"),
        F.sum("non_contiguous_deleted_ranges").alias("holes"),
    ).first()
    print(
        f"state: {totals['n']} subscriptions, {totals['backlog'] or 0:,} entries of backlog, "
        f"{totals['holes'] or 0:,} ack-hole ranges, {read_table(spark, wh, 'batch_acks').count():,} "
        f"partially acked batches"
    )
    print("subscriptions with the most ack holes:")
    top = cursors.orderBy(F.desc("non_contiguous_deleted_ranges"), F.desc("msg_backlog")).limit(5)
    for row in top.collect():
        name = row["topic"] if row["partition"] < 0 else f"{row['topic']}-partition-{row['partition']}"
        print(
            f"  {name} {row['subscription']:<14} {row['sub_type']:<11} markDelete {row['mark_delete']:<10} "
            f"backlog {row['msg_backlog']:>6,}  ranges {row['non_contiguous_deleted_ranges']:>5,}"
        )
    print("query it:  ackstate internal-stats --warehouse " + json.dumps(str(wh)))
    return 0
