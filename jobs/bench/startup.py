"""``ackstate bench --startup``: what a command pays before and at its first Delta query, with
the driver's class archive (``jobs.platform.cds``) and with the JDK's default class sharing only.

Each run starts two processes one after the other, alternating which goes first: a local
session as a short-lived command gets it (``QUICK_JIT``), a Delta table written
and read, exit. The process without the archive passes ``-Xshare:auto`` (the JDK's default),
which tells ``jobs.platform.cds`` that the caller chose, so no archive is added.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from jobs.bench.figures import Figure
from jobs.platform.cds import archive_path
from jobs.platform.config import AckstateConfig, load_config
from jobs.platform.errors import SparkUnavailableError
from jobs.platform.java import QUICK_JIT, require_java
from jobs.platform.session import local_extra_class_path

WITHOUT_ARCHIVE = f"{QUICK_JIT} -Xshare:auto"

_CHILD = """
import sys, tempfile, time
began = time.monotonic()
from jobs.platform.session import get_spark
options = {"spark.driver.extraJavaOptions": sys.argv[1]}
spark = get_spark(app_name="ackstate-bench-startup", extra_conf=options)
started = time.monotonic()
with tempfile.TemporaryDirectory() as tmp:
    spark.range(3).write.format("delta").save(tmp + "/t")
    assert spark.read.format("delta").load(tmp + "/t").count() == 3
print(started - began, time.monotonic() - started)
"""


@dataclass(frozen=True)
class Start:
    """One process: its session start, its first Delta write and read, its whole wall time."""

    session_s: float
    first_query_s: float
    process_s: float


def start_once(java_options: str) -> Start:
    """Run one child process with these driver options; what it took."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, java_options],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    process_s = time.monotonic() - began
    if done.returncode != 0:
        raise SparkUnavailableError(f"bench --startup: the child session failed: {done.stderr[-2000:]}")
    session_s, first_query_s = (float(x) for x in done.stdout.split()[-2:])
    return Start(session_s, first_query_s, process_s)


def bench_startup(config: AckstateConfig | None, runs: int) -> list[Figure]:
    """Medians of ``runs`` alternated pairs; the archive must exist (``ackstate setup``)."""
    config = config or load_config()
    archive = archive_path(require_java(), local_extra_class_path(config))
    if not archive.is_file():
        raise SparkUnavailableError(
            f"bench --startup: no class archive for this class path at {archive}: run `ackstate setup`"
        )
    with_archive: list[Start] = []
    without: list[Start] = []
    for run in range(runs):
        pair = [(QUICK_JIT, with_archive), (WITHOUT_ARCHIVE, without)]
        for options, into in pair if run % 2 == 0 else reversed(pair):
            into.append(start_once(options))
    figures = []
    for label, attribute in (
        ("session start", "session_s"),
        ("first Delta write and read", "first_query_s"),
        ("whole process", "process_s"),
    ):
        ours = [getattr(s, attribute) for s in with_archive]
        base = [getattr(s, attribute) for s in without]
        figures.append(_figure(f"{label}, class archive", ours))
        figures.append(_figure(f"{label}, JDK default sharing", base))
    ours = [s.process_s for s in with_archive]
    base = [s.process_s for s in without]
    ratio = statistics.median(ours) / statistics.median(base)
    figures.append(Figure("whole process, archive / default", ratio, "x", "", []))
    return figures


def _figure(name: str, values: list[float]) -> Figure:
    return Figure(name, statistics.median(values), "s", "", values)
