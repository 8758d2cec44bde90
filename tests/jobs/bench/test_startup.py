"""``ackstate bench --startup``: both kinds of process run and are reported (no timing is
asserted: speed targets live in the bench only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.bench import startup
from jobs.cli import main
from jobs.platform.errors import SparkUnavailableError


def test_without_an_archive_the_bench_says_to_run_setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(startup, "archive_path", lambda *args: tmp_path / "none.jsa")
    with pytest.raises(SparkUnavailableError, match="run `ackstate setup`"):
        startup.bench_startup(None, 1)


@pytest.mark.slow  # two JVMs of their own
@pytest.mark.spark
def test_startup_bench_reports_both_processes_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--startup", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    for label in ("session start", "first Delta write and read", "whole process"):
        for kind in ("class archive", "JDK default sharing"):
            assert re.search(rf"{label}, {kind}\s+\d[\d.,]* s", out), (label, kind, out)
    assert re.search(r"whole process, archive / default\s+\d[\d.,]* x", out), out
