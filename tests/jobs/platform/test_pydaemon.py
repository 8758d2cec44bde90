"""pyspark's daemon with zip archives read once per worker (``jobs.platform.pydaemon``).

Held to two things: an archive that did not change is not read again when importlib's caches
are invalidated, one that changed is (a new module in it is found), and the test session's
Python workers run under this daemon.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jobs.platform.pydaemon import MODULE, daemon_conf

CHILD = textwrap.dedent(
    """
    import importlib, os, sys, zipfile, zipimport
    from jobs.platform import pydaemon

    archive = sys.argv[1]
    sys.path.insert(0, archive)
    import first  # noqa: F401  (an importer for the archive is now cached)
    reads = []
    original = zipimport._read_directory
    def counting(path):
        reads.append(path)
        return original(path)
    zipimport._read_directory = counting

    pydaemon.install()  # reads each archive once
    before = len(reads)
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    unchanged = len(reads) - before

    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("second.py", "VALUE = 2\\n")
    st = os.stat(archive)
    os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    importlib.invalidate_caches()
    import second
    print(before, unchanged, second.VALUE)
    """
)


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("first.py", "VALUE = 1\n")
    # a child process: the patch is process-wide, and pytest's own imports must not see it
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(archive)], capture_output=True, text=True, check=True
    )
    installed_reads, unchanged_reads, value = map(int, result.stdout.split())
    assert installed_reads >= 1  # install() read the archive on the path
    assert unchanged_reads == 0  # two invalidations of an unchanged archive read nothing
    assert value == 2  # the changed archive was read again: its new module imports


@pytest.mark.spark
def test_the_sessions_python_workers_run_under_the_daemon(spark: Any) -> None:
    """A task of the test session (started by ``get_spark``, as users' are) runs in a worker
    forked from this daemon, and invalidating importlib's caches there reads no archive."""
    import pyarrow as pa

    assert spark.conf.get("spark.python.daemon.module") == MODULE

    def probe(batches: Any) -> Any:
        import importlib
        import zipimport

        reads = []
        original = zipimport._read_directory

        def counting(path: str) -> Any:
            reads.append(path)
            return original(path)

        zipimport._read_directory = counting
        try:
            importlib.invalidate_caches()
        finally:
            zipimport._read_directory = original
        patched = zipimport.zipimporter.invalidate_caches.__name__
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"patched": patched, "reads": len(reads)}])

    rows = spark.range(1).mapInArrow(probe, "patched string, reads long").collect()
    assert {(r["patched"], r["reads"]) for r in rows} == {("invalidate_changed", 0)}


def test_only_workers_of_this_interpreter_get_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon module must import in the workers' interpreter: another one (which may not
    have ackstate installed) keeps pyspark's daemon, and so does a user's own choice."""
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert daemon_conf({}) == {"spark.python.daemon.module": MODULE}
    assert daemon_conf({"spark.pyspark.python": sys.executable}) == {"spark.python.daemon.module": MODULE}
    assert daemon_conf({"spark.pyspark.python": "/opt/other/bin/python3"}) == {}
    assert daemon_conf({"spark.python.daemon.module": "theirs"}) == {}
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/bin/python3")
    assert daemon_conf({}) == {}
