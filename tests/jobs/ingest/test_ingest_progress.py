"""``ackstate ingest`` as a process of its own: every progress line is out before it exits."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.bench.generate import iter_events
from tests.jobs.warehouse import write_events

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a JVM of its own

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_an_available_now_ingest_logs_its_batch_and_its_end_before_it_exits(tmp_path: Path) -> None:
    """Spark hands the listener its events after ``awaitTermination`` returns; the process waits
    for them, so the batch's line and the query's end are logged and no callback fails."""
    events = list(iter_events(events=300, topics=1, partitions=2, subscriptions_per_topic=2, seed=5))
    write_events(tmp_path / "events", [events])
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "ingest", "--source", str(tmp_path / "events"),
         "--warehouse", str(tmp_path / "warehouse")],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"batch 0: \d+ rows in, .* applied", done.stderr), done.stderr[-3000:]
    assert re.search(r"ingest query \S+ stopped", done.stderr), done.stderr[-3000:]
    assert "Py4J" not in done.stderr, done.stderr[-3000:]
