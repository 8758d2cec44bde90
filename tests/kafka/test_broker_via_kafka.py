"""The whole path: a real broker's plugin writes to Kafka, ``ingest --format kafka`` reads it, and
the broker judges ackstate's answers field by field (as ``tests/pulsar/test_broker_judges``).

The Kafka topic has three partitions, so the plugin's key (the topic partition's Pulsar name)
is what keeps each partition's events in order: a partitioned Failover topic and several
plain topics spread over them. The snapshots are taken after the broker settled: the plugin
drains its queue every 5 ms and the producer lingers 5 ms, well inside the settle time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform.broker import StandaloneBroker
from jobs.platform.kafka import KafkaServer
from jobs.platform.tables import read_table
from jobs.read.stats import read_internal_stats, read_stats
from tests.pulsar import scenarios
from tests.pulsar.judge import ackstate_view, broker_view
from tests.pulsar.scenarios import Run, make_dedup_namespace
from tests.pulsar.test_broker_judges import (
    BROKER_CONF,
    SETTINGS,
    SETTLE_SECONDS,
    JudgedRun,
    Snapshot,
    mismatches,
)

pytestmark = pytest.mark.pulsar

TOPIC = "ackstate-events"
PLAYS = (
    scenarios.exclusive_holes,
    scenarios.failover_switch,
    scenarios.shared_batches,
    scenarios.negative_acks,
    scenarios.redeliver_all,
    scenarios.close_and_reconnect,
    scenarios.dedup_resend,
)


def settle(run: Run) -> None:
    time.sleep(max(SETTLE_SECONDS, run.deadline - time.monotonic()))


def snapshot(spark: SparkSession, run: Run, kafka: KafkaServer, warehouse: Path) -> Snapshot:
    names = run.names()
    broker = {n: broker_view(run.broker, n) for n in names}
    options = IngestOptions(
        source=TOPIC,
        warehouse=warehouse,
        format="kafka",
        kafka={"bootstrap_servers": kafka.bootstrap_servers},
        settings=SETTINGS,
    )
    query = start_ingest(spark, options, BatchWriter(options))
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    stats = read_stats(spark, warehouse, None, None, None)
    internal = read_internal_stats(spark, warehouse, None, None, None)
    return Snapshot(broker, {n: ackstate_view(stats, internal, n) for n in names})


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    """A server whose new topics have three partitions."""
    with KafkaServer(tmp_path_factory.mktemp("kafka"), partitions=3, quick_jit=True) as server:
        yield server


@pytest.fixture(scope="module")
def via_kafka(
    spark: SparkSession, kafka: KafkaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JudgedRun]:
    root = tmp_path_factory.mktemp("via-kafka")
    warehouse = root / "warehouse"
    broker = StandaloneBroker(
        root / "broker",
        kafka_servers=kafka.bootstrap_servers,
        kafka_topic=TOPIC,
        conf=BROKER_CONF,
        quick_jit=True,
    )
    with broker:
        make_dedup_namespace(broker)
        run = Run(broker, prefix="kafka")
        try:
            run.play_all(PLAYS)
            settle(run)
            connected = snapshot(spark, run, kafka, warehouse)
            for consumer in run.consumers:
                consumer.close()
            settle(run)
            closed = snapshot(spark, run, kafka, warehouse)
        finally:
            run.close()
        assert "writing to Kafka topic " + TOPIC in broker.log_file.read_text(errors="replace")
    yield JudgedRun(run, connected, closed, warehouse)


@pytest.mark.parametrize("moment", ["connected", "closed"])
def test_state_through_kafka_equals_the_brokers(via_kafka: JudgedRun, moment: str) -> None:
    found = mismatches(via_kafka, moment)
    assert not found, "ackstate differs from the broker:\n" + found


def test_the_events_spread_over_kafka_partitions_by_topic_partition(
    spark: SparkSession, kafka: KafkaServer, via_kafka: JudgedRun
) -> None:
    """Every event of a topic partition is in one Kafka partition, and more than one is used."""
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", TOPIC)
        .load()
        .selectExpr("cast(key as string) AS key", "partition")
        .distinct()
        .collect()
    )
    by_key: dict[str, set[int]] = {}
    for r in rows:
        by_key.setdefault(r["key"], set()).add(r["partition"])
    assert set(via_kafka.run.names()) <= set(by_key)
    assert all(len(parts) == 1 for parts in by_key.values()), by_key
    assert len({p for parts in by_key.values() for p in parts}) > 1
    rejected = read_table(spark, via_kafka.warehouse, "rejected_events").collect()
    assert [(r["reason"], r["raw"]) for r in rejected] == []
