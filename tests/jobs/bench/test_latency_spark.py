"""``ackstate bench --latency --quick`` runs on real Spark and prints its figure and phases
(no timing is asserted: speed targets live in the bench only)."""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import pytest

from jobs.bench.command import run

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_latency_bench_prints_the_figure_and_the_phases(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the bench's work directory
    args = argparse.Namespace(latency=True, quick=True, runs=1, config=None)
    assert run(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"ingest latency, warm batch of 200 events\s+\d[\d.,]* s\s+target <= 3", out)
    assert re.search(r"Spark pass-through, same files\s+\d[\d.,]* s", out)
    assert re.search(r"median per phase \(s\): read [\d.]+, validate [\d.]+, read state [\d.]+", out)
    assert "write ingest_batches" in out and "streaming" in out
    assert re.search(r"Delta commits per batch \(median\): \d+; .*cursors 1", out)
    assert "ackstate batch 0: 200 events" in out and "(warm-up)" in out
    assert not list(tmp_path.glob("ackstate-bench-latency-*"))  # the work directory is removed
