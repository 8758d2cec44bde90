"""Fixtures for tests that need a real local Spark with Delta Lake.

One Spark session serves the whole test run (starting a JVM costs seconds); it is built by
``jobs.session.get_spark``, the same factory the jobs use, so the tests exercise the session
users get. Every test under tests/spark is marked ``spark``: ``pytest -m "not spark"`` skips them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.session import get_spark, stop_spark

_HERE = Path(__file__).resolve().parent

TEST_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    # leave memory for the JVMs that CLI tests and other workers start beside this one
    "spark.driver.memory": "2g",
    # tests are short-lived: the C1 JIT alone warms up 2-3x faster on 2 cores than C1+C2
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one local[2] Spark session with Delta for the whole run."""
    conf = dict(TEST_SPARK_CONF)
    # catalog tables created without a location must not land in the working directory
    conf["spark.sql.warehouse.dir"] = str(tmp_path_factory.mktemp("spark-warehouse"))
    session = get_spark(app_name="ackstate-tests", master="local[2]", extra_conf=conf)
    yield session
    stop_spark()


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A fresh, not yet existing, warehouse directory for one test."""
    return tmp_path / "warehouse"
