"""``ackstate ingest --format kafka`` against a real Kafka: same tables as files, exactly once.

Events go into a Kafka topic (Spark's batch Kafka sink writes them, one record per event, keyed
by topic partition) and the streaming job reads them with Spark's Kafka source, whose jars
(connector 4.1.3) run here on pyspark 4.1.4. A record that is not an event lands in
``rejected_events``; a process killed between the writes of a batch and restarted on the same
checkpoint (Kafka offsets included) leaves the same tables as a run that was never stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.bench.generate import MALFORMED_KEY, RAW_KEY, iter_events
from jobs.cli import main
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform.kafka import KafkaServer
from jobs.platform.tables import read_table
from tests.jobs.ingest.killed_cli import run_killed
from tests.jobs.warehouse import BATCH_FIGURES, assert_same_tables, snapshot
from tests.jobs.warehouse import LINEAGE as WRITER_LINEAGE

LINEAGE = WRITER_LINEAGE | BATCH_FIGURES  # the runs cut the input into micro-batches differently
BATCH = 250  # records per micro-batch of the crash test


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """A generated workload with malformed records (2 %), as written."""
    out = []
    for r in iter_events(
        events=700, topics=2, partitions=2, subscriptions_per_topic=2, malformed_rate=0.02, seed=3
    ):
        out.append(r if RAW_KEY in r else {k: v for k, v in r.items() if k != MALFORMED_KEY})
    return out


def _value(record: dict) -> str:
    return record[RAW_KEY] if RAW_KEY in record else json.dumps(record)


def _key(record: dict) -> str | None:
    return None if RAW_KEY in record else f"{record.get('topic')}:{record.get('partition', -1)}"


def produce(spark: SparkSession, kafka: KafkaServer, topic: str, records: list[dict]) -> None:
    """The records into ``topic`` (one partition: their order is the topic's order)."""
    rows = [(_key(r), _value(r)) for r in records]
    (
        spark.createDataFrame(rows, "key string, value string")
        .coalesce(1)
        .write.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("topic", topic)
        .save()
    )


def kafka_options(kafka: KafkaServer, topic: str, warehouse: Path, per_batch: int = 0) -> IngestOptions:
    return IngestOptions(
        source=topic,
        warehouse=warehouse,
        format="kafka",
        kafka={"bootstrap_servers": kafka.bootstrap_servers, "max_offsets_per_trigger": per_batch},
    )


def ingest(spark: SparkSession, options: IngestOptions) -> None:
    query = start_ingest(spark, options, BatchWriter(options))
    query.awaitTermination()
    assert query.exception() is None, query.exception()


@pytest.fixture(scope="module")
def from_kafka(
    spark: SparkSession, kafka: KafkaServer, records: list[dict], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The warehouse of ``records`` ingested from a Kafka topic in one micro-batch."""
    warehouse = tmp_path_factory.mktemp("kafka") / "from-kafka"
    produce(spark, kafka, "same-as-files", records)
    ingest(spark, kafka_options(kafka, "same-as-files", warehouse))
    return warehouse


def test_kafka_gives_the_same_tables_as_files(
    spark: SparkSession, records: list[dict], from_kafka: Path, tmp_path: Path
) -> None:
    (tmp_path / "files").mkdir()  # one file: one micro-batch, as the Kafka run
    (tmp_path / "files" / "events.jsonl").write_text("".join(_value(r) + "\n" for r in records))
    ingest(spark, IngestOptions(source=str(tmp_path / "files"), warehouse=tmp_path / "from-files"))

    from_files = snapshot(tmp_path / "from-files", exclude=LINEAGE)
    assert_same_tables(snapshot(from_kafka, exclude=LINEAGE), from_files)
    reasons = {r["reason"] for r in read_table(spark, from_kafka, "rejected_events").collect()}
    assert "malformed_json" in reasons  # the malformed records, and the stream went on
    assert sum(1 for r in records if RAW_KEY in r) > 0


def test_a_killed_kafka_ingest_restarts_from_its_offsets_exactly_once(
    spark: SparkSession, kafka: KafkaServer, records: list[dict], from_kafka: Path, tmp_path: Path
) -> None:
    """Killed (``os._exit``) after the cursors MERGE of batch 1, restarted on the same checkpoint:
    the batch is completed from the same offsets, and nothing is applied twice. The restart is
    the same command in this process's session: another driver, which knows the offsets only
    from the checkpoint. The tables are those of the same records in one micro-batch."""
    topic = "killed-ingest"
    produce(spark, kafka, topic, records)
    expected = snapshot(from_kafka, exclude=LINEAGE)

    conf = tmp_path / "kafka.toml"
    conf.write_text(f"[kafka]\nmax_offsets_per_trigger = {BATCH}\n")
    argv = [
        "ingest",
        "--format",
        "kafka",
        "--source",
        topic,
        "--kafka-bootstrap-servers",
        kafka.bootstrap_servers,
        "--warehouse",
        str(tmp_path / "warehouse"),
        "--conf",
        str(conf),
    ]
    killed = run_killed(argv, "1:merge cursors")
    assert killed.returncode == 137, killed.stderr[-3000:]
    assert main(argv) == 0
    # every table but the batches' log, which has one row per micro-batch (counted below)
    tables = sorted(set(expected) - {"ingest_batches"})
    assert_same_tables(snapshot(tmp_path / "warehouse", exclude=LINEAGE), expected, tables)
    batches = read_table(spark, tmp_path / "warehouse", "ingest_batches").collect()
    assert len(batches) == -(-len(records) // BATCH)  # every batch recorded once


def test_a_missing_server_list_is_one_sentence(spark: SparkSession, tmp_path: Path) -> None:
    from jobs.platform.errors import IngestError

    options = IngestOptions(source="t", warehouse=tmp_path / "w", format="kafka")
    with pytest.raises(IngestError, match="--format kafka needs the Kafka servers"):
        start_ingest(spark, options)


def test_the_kafka_settings_reach_the_source(spark: SparkSession, kafka: KafkaServer, tmp_path: Path) -> None:
    """``starting_offsets``, ``max_offsets_per_trigger`` and ``[kafka.options]`` are options of
    Spark's Kafka source (the latter as ``kafka.<key>``), not parsed and dropped."""
    from jobs.ingest.query import read_source

    options = IngestOptions(
        source="settings",
        warehouse=tmp_path / "w",
        format="kafka",
        kafka={
            "bootstrap_servers": kafka.bootstrap_servers,
            "starting_offsets": "latest",
            "max_offsets_per_trigger": 17,
            "options": {"client.id": "probe-7"},
        },
    )
    plan = read_source(spark, options)._jdf.queryExecution().logical().toString()
    for option in (
        f"kafka.bootstrap.servers -> {kafka.bootstrap_servers}",
        "subscribe -> settings",
        "startingOffsets -> latest",
        "maxOffsetsPerTrigger -> 17",
        "kafka.client.id -> probe-7",
    ):
        assert option in plan, plan
