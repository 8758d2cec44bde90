"""The shared conformance scenarios through the ``ackstate`` command line, as users run it.

``../shared/tools/run_scenarios.py`` writes each scenario's events to JSON Lines, runs
``ackstate init``, ``ingest``, ``internal-stats`` and ``stats`` and compares every checkpoint.
``CLI_SCENARIOS`` lists the scenarios whose every check is implemented; the others need the
consumer and dedup model (issues "Subscriptions" and "Producer deduplication") and join this
list as those land. Each listed scenario must pass completely.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from jobs.config import load_config
from jobs.jars import find_delta_jars

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


def test_cursor_scenarios_pass_through_the_cli(tmp_path: Path):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in CLI_SCENARIOS:
        shutil.copy(SHARED / "scenarios" / f"{name}.json", scenarios)
    ackstate = Path(sys.executable).with_name("ackstate")
    # the runner reads tables with its own Spark session; give it the jars `ackstate setup` cached
    # (its default, Ivy through configure_spark_with_delta_pip, cannot resolve them on every machine)
    jars = ",".join(str(j) for j in find_delta_jars(load_config()).jars)
    result = subprocess.run(
        [
            sys.executable,
            str(RUNNER),
            str(scenarios),
            "--ackstate",
            str(ackstate),
            "--work",
            str(tmp_path),
            "--spark-conf",
            f"spark.jars={jars}",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert summary.endswith(" 0 failed"), summary
