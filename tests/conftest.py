"""Settings shared by the whole suite (engine, schemas, Spark and conformance tests)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from jobs.cli import INTERPRETED_QUERIES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent

# Spark's Python workers must run this interpreter, whichever fixture starts Spark.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Shared 2-core CI machines stall at random: a per-example deadline there only measures the
# neighbours. Property tests keep their example counts; `HYPOTHESIS_PROFILE=dev` restores
# hypothesis's own defaults locally.
settings.register_profile("ackstate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ackstate"))


# Every test in these folders carries these markers (`-m "not pulsar"` and the like select them).
# A folder whose tests start servers or JVMs of their own is `slow` as a whole; elsewhere a test
# that runs many micro-batches or a process of its own is marked where it is defined.
FOLDER_MARKERS = {
    "pulsar": ("pulsar", "spark", "slow"),
    "kafka": ("kafka", "spark", "slow"),
    "cluster": ("cluster", "spark", "slow"),
    "s3": ("s3", "spark", "slow"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = REPO_ROOT / "tests"
    for item in items:
        path = item.path.resolve()
        if tests in path.parents and path.parent != tests:
            for marker in FOLDER_MARKERS.get(path.relative_to(tests).parts[0], ()):
                item.add_marker(marker)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root directory (where pyproject.toml and conf/ are)."""
    return REPO_ROOT


@pytest.fixture(autouse=True)
def _no_user_warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's $ACKSTATE_WAREHOUSE must never receive test tables."""
    monkeypatch.delenv("ACKSTATE_WAREHOUSE", raising=False)


TEST_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    # leave memory for the JVMs that CLI tests and other workers start beside this one; 2g ran
    # out of execution memory after an hour of tests (2026-11-27: a MERGE's hash aggregate
    # "Unable to acquire 262144 bytes of memory, got 0" in tests/s3, 95 % into a full run,
    # while tests/s3 alone passed)
    "spark.driver.memory": "3g",
    # The throughput collector: this JVM's work is batch after batch of short Spark jobs, and
    # G1 took an eighth of its CPU beside them (64 of 520 CPU seconds over tests/jobs/ingest and
    # tests/jobs/compact, 42 of them concurrent marking; 2026-12-08). The same 241 tests, one
    # after the other on one host: 348 s with it, 372 s and 386 s with G1 and the serial one.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
    # Expressions interpreted (`generated_code` turns the generated code back on where a test is
    # about it): the suite's tables hold a few thousand rows at most, and Spark writes out the
    # source of a task's projections in every task before it finds the compiled class in its
    # cache. Generating code was a third of this JVM's Java samples over two
    # tests of tests/jobs/compact (Java Flight Recorder, 2026-12-08: 1,470 of 4,276, and 669 of
    # them `CodeFormatter.stripExtraNewLinesAndComments`). One run after the other: tests/jobs
    # 547 s with generated code, 470 s interpreted (README, under "Layout").
    **INTERPRETED_QUERIES,
    # No jobs.platform.java.QUICK_JIT here: this JVM serves the whole run, an hour of
    # micro-batches, and the optimising compiler pays for itself. The quick tests of
    # tests/jobs/ingest and tests/jobs/compact (153), alternated twice in one session
    # (2026-11-26, load average 3-4): 179 and 196 s with both compilers, 262 and 232 s C1 only.
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one local[2] Spark session with Delta for the whole run.

    Built by ``jobs.platform.session.get_spark``, the factory the jobs use, so the tests exercise the
    session users get; starting a JVM costs seconds, so one serves every test.
    """
    from jobs.platform.session import get_spark, stop_spark

    conf = dict(TEST_SPARK_CONF)
    # catalog tables created without a location must not land in the working directory
    conf["spark.sql.warehouse.dir"] = str(tmp_path_factory.mktemp("spark-warehouse"))
    session = get_spark(app_name="ackstate-tests", master="local[2]", extra_conf=conf)
    yield session
    stop_spark()


GENERATED_CODE = {
    "spark.sql.codegen.factoryMode": "FALLBACK",
    "spark.sql.codegen.wholeStage": "true",
}
"""Spark's own defaults for the keys of ``INTERPRETED_QUERIES``: generated code, as a user's
ingest gets for a batch larger than ``[ingest] interpreted_rows`` and a user's compaction."""


@contextmanager
def generated_code(spark: SparkSession) -> Iterator[None]:
    """Within the block, ``spark`` (and the sessions a query copies from it) generates code.

    The suite's session interprets expressions (``TEST_SPARK_CONF``); a test whose subject is
    the path that runs generated code wraps that path in this."""
    from jobs.platform.session import session_settings

    with session_settings([spark], GENERATED_CODE):
        yield


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A fresh, not yet existing, warehouse directory for one test."""
    return tmp_path / "warehouse"


@pytest.fixture
def session_requests(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """The ``[spark]`` settings each command asked ``get_spark`` for; no session starts: the call
    raises an ``AckstateError``, so the command ends with 2 right where its session would start."""
    from jobs.platform import session
    from jobs.platform.errors import AckstateError

    seen: list[dict[str, str]] = []

    def get_spark(config: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(dict(config.spark))
        raise AckstateError("stopped where the session would start")

    monkeypatch.setattr(session, "get_spark", get_spark)
    return seen
