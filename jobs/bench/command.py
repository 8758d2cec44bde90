"""``ackstate bench``: the performance figures of DESIGN.md, measured, never asserted in tests.

Each figure is the median of ``--runs`` runs and is printed with the machine and versions.
``--engine`` measures the engine alone (no Spark): apply throughput of an ack-heavy stream and of
the generated mix on one core, and the exact state size of a cursor with 10,000,000 ack holes. ``--ingest``
(``jobs.bench.ingest``) measures the streaming ingest end to end against a Spark pass-through.
``--subscriptions`` (``jobs.bench.subscriptions``) measures per-subscription work (Failover
assignment) over 100,000 subscriptions, in the engine and through its Spark UDF;
``--dedup`` (``jobs.bench.dedup``) measures the ingest of a producer-heavy stream with deduplication on.
``--interceptor`` (``jobs.bench.interceptor``) measures what the broker plugin costs a local broker.
``--latency`` (``jobs.bench.latency``) measures a warm small micro-batch from trigger to last commit.
``--startup`` (``jobs.bench.startup``) measures a command's session start with the driver's class
archive and without it.
"""

from __future__ import annotations

import argparse

from jobs.bench.apply import bench_engine_apply, bench_engine_mix, bench_holes
from jobs.bench.figures import machine


def run(args: argparse.Namespace) -> int:
    """``ackstate bench``: with no selector, the engine figures (the others need Spark)."""
    runs = max(1, args.runs)
    names = ("engine", "ingest", "latency", "startup", "subscriptions", "dedup", "interceptor")
    selected = [name for name in names if getattr(args, name, False)]
    selected = selected or ["engine"]
    print(f"ackstate bench on {machine()}")
    for name in selected:
        if name == "engine":
            print("engine (one core, no Spark):")
            engine = [bench_engine_apply(runs, args.quick), bench_engine_mix(runs, args.quick)]
            for figure in [*engine, *bench_holes(runs, args.quick)]:
                print(figure.line())
        elif name == "ingest":
            from jobs.bench.ingest import bench_ingest

            print(
                "ingest (local Spark + Delta; ackstate against a Spark pass-through of the same files):",
                flush=True,
            )
            for figure in bench_ingest(getattr(args, "config", None), runs, args.quick):
                print(figure.line())
        elif name == "latency":
            from jobs.bench.latency import bench_latency

            print(
                "latency (local Spark + Delta; a warm micro-batch of mixed events, trigger to its last "
                "commit, against a Spark pass-through of the same files):",
                flush=True,
            )
            for figure in bench_latency(getattr(args, "config", None), runs, args.quick):
                print(figure.line())
        elif name == "startup":
            from jobs.bench.startup import bench_startup

            print(
                "startup (a local session as a short-lived command gets it, a Delta table written and read; "
                "with the driver's class archive and with the JDK's default class sharing, alternated):",
                flush=True,
            )
            for figure in bench_startup(getattr(args, "config", None), runs):
                print(figure.line())
        elif name == "subscriptions":
            from jobs.bench.subscriptions import bench_subscriptions

            print("subscriptions (engine on one core; Spark UDF on local Spark):", flush=True)
            bench_subscriptions(getattr(args, "config", None), runs, args.quick)  # prints as it goes
        elif name == "dedup":
            from jobs.bench.dedup import bench_dedup

            print("dedup (producer sends through the ingest, deduplication on; against a pass-through):")
            for figure in bench_dedup(getattr(args, "config", None), runs, args.quick):
                print(figure.line())
        elif name == "interceptor":
            from jobs.bench.interceptor import bench_interceptor

            print("broker plugin (three local standalone brokers: without an interceptor, with an empty one,")
            print("with ackstate's; rounds in rotated order, the loss paired within a round; CPU per")
            print("10,000 messages):")
            for figure in bench_interceptor(runs, args.quick):
                print(figure.line())
        else:
            print(f"{name}: not available in this build")
            return 2
    return 0
