"""``ackstate setup``: fill the jar cache once (Delta Lake; with flags Pulsar and the plugin, Kafka,
S3A), and prove that an offline Delta session starts from it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jobs.platform.broker import PULSAR_VERSION, ensure_broker_archive, ensure_pulsar
from jobs.platform.cds import ensure_archive
from jobs.platform.config import AckstateConfig
from jobs.platform.errors import BrokerStartError, PulsarSetupError, SparkUnavailableError
from jobs.platform.jars import (
    JARS_DIR_ENV,
    display_path,
    ensure_delta_jars,
    find_delta_jars,
    jars_root,
    run_logged,
)
from jobs.platform.java import QUICK_JIT


def verify_delta_session(config: AckstateConfig, root: str | Path | None = None) -> float:
    """Start a Delta session from the cache alone in a child process; return its wall time.

    A child process keeps this process free of a JVM and shows the JVM's output only on failure.
    """
    root_path = jars_root(root)
    jars = find_delta_jars(config, root_path)
    log_file = root_path / f"{jars.directory.name}.log"
    env = dict(os.environ, **{JARS_DIR_ENV: str(root_path), "ACKSTATE_OFFLINE": "1"})
    code = "from jobs.platform.setup import verify_child; verify_child()"
    args = [str(config.source) if config.source else ""]
    started = time.monotonic()
    if not run_logged([sys.executable, "-c", code, *args], log_file, env=env, append=True):
        raise SparkUnavailableError(
            f"the Delta Lake jars in {display_path(jars.directory)} did not give a working local Delta "
            f"session: see {log_file}"
        )
    return time.monotonic() - started


def verify_child() -> None:
    """Child-process body of ``verify_delta_session``: write, MERGE and read a Delta table."""
    from jobs.platform.config import load_config
    from jobs.platform.session import get_spark, stop_spark

    config = load_config(sys.argv[1] or None)
    quick_jit = {"spark.driver.extraJavaOptions": QUICK_JIT}  # a short-lived JVM
    spark = get_spark(config, app_name="ackstate-setup-verify", extra_conf=quick_jit)
    try:
        with tempfile.TemporaryDirectory(prefix="ackstate-verify-") as tmp:
            path = str(Path(tmp) / "t")
            spark.range(3).write.format("delta").save(path)
            spark.sql(
                f"MERGE INTO delta.`{path}` t USING (SELECT 3L AS id) s ON t.id = s.id "
                "WHEN NOT MATCHED THEN INSERT *"
            )
            rows = spark.read.format("delta").load(path).count()
            if rows != 4:
                raise SystemExit(f"expected 4 rows after MERGE, read {rows}")
    finally:
        stop_spark()


def archive_child() -> None:
    """Child-process body of ``jobs.platform.cds.ensure_archive``: the classes of an ingest and
    both stats reads, archived when the JVM exits."""
    from engine import EngineSettings
    from jobs.bench.generate import generate
    from jobs.ingest.options import IngestOptions
    from jobs.ingest.query import start_ingest
    from jobs.platform.config import load_config
    from jobs.platform.session import get_spark, stop_spark
    from jobs.read.stats import read_internal_stats, read_stats

    config = load_config(sys.argv[1] or None)
    dump = {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={shlex.quote(sys.argv[2])}"}
    spark = get_spark(config, app_name="ackstate-setup-cds", extra_conf=dump)
    try:
        with tempfile.TemporaryDirectory(prefix="ackstate-cds-") as tmp:
            source, warehouse = Path(tmp) / "events", str(Path(tmp) / "warehouse")
            generate(source, events=400, topics=2, partitions=2, subscriptions_per_topic=2, seed=7, files=2)
            options = IngestOptions(
                source=str(source), warehouse=warehouse, settings=EngineSettings.from_config(config.engine)
            )
            query = start_ingest(spark, options)
            query.awaitTermination()
            read_stats(spark, warehouse, None, None, None)
            read_internal_stats(spark, warehouse, None, None, None)
    finally:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        stop_spark()
        # The JVM writes the archive as it exits, which it does when its stdin closes; wait for
        # that, or the parent would look for the file while it is still being written.
        if gateway is not None and getattr(gateway, "proc", None) is not None:
            gateway.proc.stdin.close()
            gateway.proc.wait(timeout=600)


def setup_delta(args: argparse.Namespace) -> int:
    """``ackstate setup``: fill the jar cache (once), prove an offline Delta session starts."""
    root = jars_root(args.jars_dir)
    result = ensure_delta_jars(args.config, root, resolver=args.resolver, force=args.force)
    jars = result.jars
    size_mb = sum(j.stat().st_size for j in jars.jars) / 1e6
    where = f"{display_path(jars.directory)} ({len(jars.jars)} jars, {size_mb:.0f} MB)"
    if result.action == "cached":
        line = f"ackstate setup: Delta Lake jars {jars.coordinate} already in {where}"
    else:
        line = (
            f"ackstate setup: resolved {jars.coordinate} with {result.action.capitalize()} into {where} "
            f"in {result.seconds:.1f} s"
        )
    if result.action != "cached" or args.verify:
        seconds = verify_delta_session(args.config, root)
        line += f"; offline Delta session verified in {seconds:.1f} s"
    print(line)
    return 0


def setup_localfs(args: Any) -> None:
    """Compile Hadoop's local file system without a process per file operation
    (``jobs.platform.localfs``). Before the class archive: the jar is on a local driver's class
    path. Without ``javac`` sessions keep Hadoop's own classes, slower, so setup goes on."""
    from jobs.platform.localfs import ensure_localfs_jar

    try:
        jar, seconds = ensure_localfs_jar(args.jars_dir, force=args.force)
    except SparkUnavailableError as exc:
        print(f"ackstate setup: Hadoop's own local file system for local sessions ({exc})")
        return
    took = "already there" if seconds is None else f"compiled in {seconds:.1f} s"
    what = f"local file system without a process per file operation {display_path(jar)}"
    print(f"ackstate setup: {what} {took}")


def setup_class_archive(args: Any) -> None:
    """Dump the driver's class archive (``jobs.platform.cds``) for the class path the steps
    before left. After S3A: its jars are on a local driver's class path, so they are part of it.
    A failed dump costs speed, not function, so setup goes on with a line that says so."""
    started = time.monotonic()
    try:
        from jobs.platform.session import local_extra_class_path

        extra_class_path = local_extra_class_path(args.config, args.jars_dir)
        path, seconds = ensure_archive(args.config, extra_class_path, args.jars_dir, force=args.force)
    except SparkUnavailableError as exc:
        print(f"ackstate setup: no class archive for the Spark driver ({exc}); sessions start without one")
        return
    where = display_path(path)
    if seconds is None:
        print(f"ackstate setup: class archive for the Spark driver {where} already there")
    else:
        size_mb = path.stat().st_size / 1e6
        print(
            f"ackstate setup: class archive for the Spark driver {where} ({size_mb:.0f} MB) dumped "
            f"in {time.monotonic() - started:.1f} s"
        )


def setup_command(args: Any) -> int:
    """``ackstate setup [--pulsar] [--kafka] [--s3]``: the Delta jars; with ``--pulsar`` the
    broker and its plugin; with ``--kafka`` Spark's Kafka source and a Kafka server for local
    runs; with ``--s3`` Hadoop's S3A connector."""
    status = setup_delta(args)
    if status != 0:
        return status
    if getattr(args, "kafka", False):
        from jobs.platform.kafka import KAFKA_VERSION, SPARK_KAFKA_VERSION, ensure_kafka

        started = time.monotonic()
        resolved = ensure_kafka(args.jars_dir, force=args.force)
        where = display_path(jars_root(args.jars_dir))
        what = f"Spark's Kafka source {SPARK_KAFKA_VERSION} and Kafka {KAFKA_VERSION} in {where}"
        seconds = time.monotonic() - started
        took = f" (resolved {' and '.join(resolved)} in {seconds:.1f} s)" if resolved else " already there"
        print(f"ackstate setup: {what}{took}")
    if getattr(args, "s3", False):
        from jobs.platform.s3 import HADOOP_AWS_VERSION, ensure_s3_jars, s3_jars_dir

        started = time.monotonic()
        resolved = ensure_s3_jars(args.jars_dir, force=args.force)
        what = f"Hadoop's S3A connector {HADOOP_AWS_VERSION} in {display_path(s3_jars_dir(args.jars_dir))}"
        took = f" (resolved in {time.monotonic() - started:.1f} s)" if resolved else " already there"
        print(f"ackstate setup: {what}{took}")
    setup_localfs(args)
    setup_class_archive(args)
    if not getattr(args, "pulsar", False):
        return 0
    result = ensure_pulsar(args.jars_dir, force=args.force)
    done = " and ".join(result.actions)
    what = (
        f"Pulsar {PULSAR_VERSION} broker jars in {display_path(result.lib)}, "
        f"plugin {display_path(result.nar)}"
    )
    if done:
        print(f"ackstate setup: {what} ({done} in {result.seconds:.1f} s)")
    else:
        print(f"ackstate setup: {what} already there")
    setup_broker_archive(args)
    return 0


def setup_broker_archive(args: Any) -> None:
    """Dump the broker's class archive (``jobs.platform.broker.ensure_broker_archive``). Like
    the driver's, a failed dump costs speed, not function: setup goes on with a line that says so."""
    try:
        path, seconds = ensure_broker_archive(args.jars_dir, force=args.force)
    except (PulsarSetupError, BrokerStartError, SparkUnavailableError, OSError) as exc:
        print(f"ackstate setup: no class archive for the Pulsar broker ({exc}); brokers start without one")
        return
    took = "already there" if seconds is None else f"dumped in {seconds:.1f} s"
    print(f"ackstate setup: class archive for the Pulsar broker {display_path(path)} {took}")
