"""The shared conformance scenarios through the ``ackstate`` command line.

``../shared/tools/run_scenarios.py`` writes each scenario's events to JSON Lines, runs
``ackstate init``, ``ingest``, ``internal-stats`` and ``stats`` and compares every checkpoint.
The commands it runs are the command line's ``main`` in this test session
(``tests/conformance/in_session.py``), with the arguments the runner gives.
``CLI_SCENARIOS`` lists the scenarios whose every check is implemented; the others need the
consumer and dedup model (issues "Subscriptions" and "Producer deduplication") and join this
list as those land. Each listed scenario must pass completely.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.platform.config import load_config
from jobs.platform.jars import find_delta_jars
from tests.conformance.in_session import command_server
from tests.conftest import TEST_SPARK_CONF

# the runner starts a Spark session of its own to read the tables
pytestmark = pytest.mark.slow

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
RUNNER = SHARED / "tools" / "run_scenarios.py"

CLI_SCENARIOS = (
    "v01-single-delete",
    "v02-filtering-read-entries",
    "v03-reading-all-filtered-entries",
    "v04-counting-with-deleted-entries",
    "v05-mark-delete-twice",
    "v06-unordered-mark-delete",
    "v07-skip-entries-with-individual-deleted",
    "v08-clear-backlog",
    "v10-delete-single-message-twice",
    "v11-out-of-order-acks",
    "v12-last-individual-deleted-range",
    "v13-out-of-order-delete-persistence",
    "v14-out-of-order-delete-many-ranges",
    "ack-beyond-last-published",
    "rejected-records-do-not-stop-stream",
    "cumulative-ack-exclusive",
    "batch-index-cumulative",
    "batch-index-individual-and-merge",
    "batch-index-disabled",
    "cumulative-ack-failover",
    "cumulative-ack-ignored-shared",
    # consumers, pending acks, redelivery, Failover selection (issue 4)
    "exclusive-second-consumer-refused",
    "failover-non-partitioned-top-priority",
    "failover-partitioned-priority-groups",
    "v34-failover-add-remove-consumer",
    "v35-failover-partitioned-consumer-events",
    "shared-redeliver-with-ids",
    "shared-redeliver-all",
    "shared-consumer-close",
    "shared-unacked-messages-backlog-entries",
    "nack-due-after-delay",
    # producer dedup (issue 5)
    "v29-dedup-is-duplicate",
    "v30-dedup-with-failure",
    "dedup-disabled-by-default",
)


def test_runner_self_check():
    result = subprocess.run(
        [sys.executable, str(SHARED / "tools" / "test_run_scenarios.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


@dataclass(frozen=True)
class RunnerResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> str:
        return self.stdout.strip().splitlines()[-1] if self.stdout.strip() else ""

    def failures(self, scenario: str) -> list[str]:
        """The runner's ``FAIL <scenario> @after=k <field>: expected ..., actual ...`` lines."""
        return [line for line in self.stdout.splitlines() if line.startswith(f"FAIL {scenario} ")]


@pytest.fixture(scope="module")
def cli_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunnerResult]:
    """One run of the shared runner over every listed scenario (it ingests them in groups, so
    one run costs a few ingests, not one per scenario). Its ``ackstate`` commands run in this
    session (``in_session``): a cold process each cost 8-20 s of JVM start, 256 s for the
    twelve in a 34-minute suite."""
    tmp_path = tmp_path_factory.mktemp("cli-scenarios")
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in CLI_SCENARIOS:
        shutil.copy(SHARED / "scenarios" / f"{name}.json", scenarios)
    # the runner reads tables with its own Spark session; give it the jars `ackstate setup` cached
    # (its default, Ivy through configure_spark_with_delta_pip, cannot resolve them on every machine)
    # and the test session's settings: with Delta's default of 50 snapshot partitions its local[1]
    # session read each table's log in 50 tasks, one after another (83 s of reads, 29 s with 2)
    jars = ",".join(str(j) for j in find_delta_jars(load_config()).jars)
    settings = [f"{key}={value}" for key, value in {"spark.jars": jars, **TEST_SPARK_CONF}.items()]
    with command_server() as ackstate:
        result = subprocess.run(
            [
                sys.executable,
                str(RUNNER),
                str(scenarios),
                "--ackstate",
                shlex.join(ackstate),
                "--work",
                str(tmp_path),
                *(arg for setting in settings for arg in ("--spark-conf", setting)),
            ],
            capture_output=True,
            text=True,
            timeout=1500,
        )
    yield RunnerResult(result.returncode, result.stdout, result.stderr)


def test_the_runner_ran_every_scenario(cli_run: RunnerResult) -> None:
    """No ingest or query failed on the way (such a failure names no scenario)."""
    assert cli_run.summary.endswith(" 0 failed"), cli_run.stdout[-4000:] + cli_run.stderr[-4000:]
    assert cli_run.returncode == 0, cli_run.stderr[-4000:]


@pytest.mark.parametrize("scenario", CLI_SCENARIOS)
def test_scenario_passes_through_the_cli(cli_run: RunnerResult, scenario: str) -> None:
    """Every checkpoint of the scenario: each failing field is listed with what was expected."""
    failures = cli_run.failures(scenario)
    assert not failures, "\n".join(failures)
