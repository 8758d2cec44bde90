"""``ackstate ingest`` on a real Spark standalone cluster gives the tables of a local[2] run.

The driver is the ``ackstate`` process; the two executors are JVMs the workers start, each with
its own Python workers running the engine in the Arrow UDFs. The warehouse and the source are
local paths, which every process of this one-machine cluster sees.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.generate import iter_events
from jobs.ingest import BatchWriter, IngestOptions, start_ingest
from tests.cluster.standalone import StandaloneCluster
from tests.spark._warehouse import snapshot, write_events

LINEAGE = frozenset(
    {"query_id", "batch_id", "updated_at", "rejected_at", "started_at", "finished_at", "duration_ms",
     "rows_per_second", "input_rows", "applied_rows", "rejected_rows", "stale_rows", "duplicate_rows",
     "partitions_touched", "cursors_touched"}
)  # fmt: skip
FILES = 2


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    events = list(iter_events(events=1500, topics=3, partitions=2, subscriptions_per_topic=2, seed=11))
    path = tmp_path_factory.mktemp("events")
    size = -(-len(events) // FILES)
    write_events(path, [events[i : i + size] for i in range(0, len(events), size)])
    return path


@pytest.fixture(scope="module")
def local_tables(spark: SparkSession, source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    warehouse = tmp_path_factory.mktemp("local") / "warehouse"
    options = IngestOptions(source=str(source), warehouse=warehouse, max_files_per_trigger=1)
    query = start_ingest(spark, options, BatchWriter(options))
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return snapshot(spark, warehouse, exclude=LINEAGE)


def cluster_ingest(
    cluster: StandaloneCluster, source: Path, warehouse: Path
) -> subprocess.CompletedProcess[str]:
    conf = warehouse.parent / f"{warehouse.name}.toml"
    conf.write_text(
        "[spark]\n"
        f'master = "{cluster.master_url}"\n'
        'executor.memory = "1g"\n'
        "executor.cores = 1\n"
        "cores.max = 2\n"
        "sql.shuffle.partitions = 2\n"
        "ui.enabled = false\n"
        "[ingest]\n"
        "max_files_per_trigger = 1\n"
    )
    cmd = [
        sys.executable,
        "-m", "jobs.cli",
        "ingest", "--source", str(source), "--warehouse", str(warehouse), "--conf", str(conf),
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def test_ingest_on_a_cluster_gives_the_local_tables(
    spark: SparkSession, cluster: StandaloneCluster, source: Path, local_tables: dict, tmp_path: Path
) -> None:
    done = cluster_ingest(cluster, source, tmp_path / "warehouse")
    assert done.returncode == 0, done.stderr[-3000:]
    assert snapshot(spark, tmp_path / "warehouse", exclude=LINEAGE) == local_tables
    # the work ran in executors the two workers started: JVMs apart from the driver
    workers = {log.relative_to(cluster.workdir).parts[0] for log in cluster.executor_logs()}
    assert workers == {"worker-0", "worker-1"}, cluster.executor_logs()
