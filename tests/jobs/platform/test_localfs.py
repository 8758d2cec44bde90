"""Hadoop's local file system without a process per file operation (``jobs.platform.localfs``).

The classes replace two calls of Hadoop's ``RawLocalFileSystem``; these tests hold them to
Hadoop's own answers on the same files, and show that a local session's Delta writes and
streaming checkpoint then start no ``chmod`` or ``readlink``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jobs.platform.localfs import (
    FILE_CONTEXT_CLASS,
    FILE_SYSTEM_CLASS,
    cached_localfs_jar,
    local_session_conf,
)

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

MODES = ("644", "600", "640", "700", "750", "755", "777", "000", "421")


def _hadoop(spark: Any) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    return jvm, spark.sparkContext._jsc.hadoopConfiguration()


def _file_systems(spark: Any) -> tuple[Any, Any]:
    """Hadoop's raw local file system and ours, each initialised on ``file:///``."""
    jvm, conf = _hadoop(spark)
    uri = jvm.java.net.URI("file:///")
    theirs = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    ours = jvm.io.ackstate.hadoop.NioRawLocalFileSystem()
    for fs in (theirs, ours):
        fs.initialize(uri, conf)
    return theirs, ours


def test_setup_built_the_jar_and_local_sessions_use_it(spark: Any) -> None:
    """The README's setup builds the jar; the test session, launched as users' are, uses it for
    both of Hadoop's APIs of ``file:`` paths."""
    assert cached_localfs_jar() is not None, "run `ackstate setup`: it compiles jobs/platform/hadoop_local"
    jvm, conf = _hadoop(spark)
    assert conf.get("fs.file.impl") == FILE_SYSTEM_CLASS
    assert conf.get("fs.AbstractFileSystem.file.impl") == FILE_CONTEXT_CLASS
    uri = jvm.java.net.URI("file:///")
    assert jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName() == FILE_SYSTEM_CLASS
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
    assert context.getDefaultFileSystem().getClass().getName() == FILE_CONTEXT_CLASS


def test_a_users_choice_of_file_system_is_kept() -> None:
    chosen = {"spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem"}
    assert local_session_conf(chosen) == {}
    added = local_session_conf({"spark.driver.extraClassPath": "/x.jar"})
    assert added["spark.driver.extraClassPath"] == os.pathsep.join(["/x.jar", str(cached_localfs_jar())])


def test_permissions_are_set_as_hadoop_sets_them(spark: Any, tmp_path: Path) -> None:
    jvm, _ = _hadoop(spark)
    theirs, ours = _file_systems(spark)
    for mode in MODES:
        for kind in ("file", "dir"):
            modes = []
            for name, fs in (("theirs", theirs), ("ours", ours)):
                path = tmp_path / f"{kind}-{mode}-{name}"
                if kind == "file":
                    path.write_text("x")
                else:
                    path.mkdir()
                fs.setPermission(
                    jvm.org.apache.hadoop.fs.Path(path.as_uri()),
                    jvm.org.apache.hadoop.fs.permission.FsPermission(mode),
                )
                modes.append(stat.S_IMODE(path.stat().st_mode))
            assert modes[0] == modes[1] == int(mode, 8), (kind, mode, [oct(m) for m in modes])


def test_created_files_and_directories_get_hadoops_modes(spark: Any, tmp_path: Path) -> None:
    """``create`` and ``mkdirs`` set the default permission less the umask through ``setPermission``."""
    jvm, _ = _hadoop(spark)
    theirs, ours = _file_systems(spark)
    modes = {}
    for name, fs in (("theirs", theirs), ("ours", ours)):
        directory = tmp_path / name / "a" / "b"
        assert fs.mkdirs(jvm.org.apache.hadoop.fs.Path(directory.as_uri()))
        fs.create(jvm.org.apache.hadoop.fs.Path((directory / "f").as_uri()), True).close()
        modes[name] = [stat.S_IMODE(p.stat().st_mode) for p in (directory.parent, directory, directory / "f")]
    assert modes["ours"] == modes["theirs"]


def test_link_status_is_hadoops(spark: Any, tmp_path: Path) -> None:
    jvm, _ = _hadoop(spark)
    theirs, ours = _file_systems(spark)
    (tmp_path / "file").write_text("12345")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")

    def status(fs: Any, path: Path) -> tuple[Any, ...]:
        s = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(str(path)))
        target = s.getSymlink().toString() if s.isSymlink() else None
        return (s.getPath().toString(), s.isFile(), s.isDirectory(), s.isSymlink(), s.getLen(), target)

    for name in ("file", "dir", "link"):
        assert status(ours, tmp_path / name) == status(theirs, tmp_path / name), name
    assert status(ours, tmp_path / "link")[3], "a symbolic link is one"
    for fs in (theirs, ours):
        with pytest.raises(Exception, match="FileNotFoundException"):
            status(fs, tmp_path / "missing")


def test_a_rename_onto_an_existing_file_is_refused(spark: Any, tmp_path: Path) -> None:
    """Delta's log store commits a version by a rename that must fail when the version exists:
    the mutual exclusion of two writers rests on it."""
    jvm, conf = _hadoop(spark)
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    (tmp_path / "tmp").write_text("new")
    (tmp_path / "00.json").write_text("old")
    no_options = spark.sparkContext._gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 0)
    src, dst = (jvm.org.apache.hadoop.fs.Path((tmp_path / n).as_uri()) for n in ("tmp", "00.json"))
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        context.rename(src, dst, no_options)
    assert (tmp_path / "00.json").read_text() == "old"
    (tmp_path / "00.json").unlink()
    context.rename(src, dst, no_options)
    assert (tmp_path / "00.json").read_text() == "new"


CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from jobs.platform.session import get_spark

    tmp = Path(sys.argv[1])
    log = Path(sys.argv[2])
    spark = get_spark(app_name="ackstate-localfs-test", master="local[1]")
    spark.range(1).count()  # the executor fetches the session's jars (Spark's FileUtil.chmod)
    lines = lambda: log.read_text().splitlines() if log.exists() else []
    started = len(lines())
    table = str(tmp / "table")
    spark.range(5).write.format("delta").save(table)
    spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT 7L AS id) s ON t.id = s.id "
              "WHEN NOT MATCHED THEN INSERT *")
    (tmp / "in").mkdir()
    (tmp / "in" / "a.json").write_text('{"id": 1}\\n{"id": 2}\\n')
    query = (spark.readStream.schema("id long").json(str(tmp / "in")).writeStream.format("delta")
             .option("checkpointLocation", str(tmp / "checkpoint")).trigger(availableNow=True)
             .start(str(tmp / "sink")))
    query.awaitTermination()
    ours = lines()[started:]
    rows = sum(spark.read.format("delta").load(p).count() for p in (table, str(tmp / "sink")))
    jvm = spark.sparkContext._jvm
    jvm.org.apache.hadoop.fs.FileUtil.readLink(jvm.java.io.File(table))
    print(json.dumps({"ours": ours, "hadoop": lines()[started + len(ours):], "rows": rows}))
    """
)


@pytest.mark.slow
def test_a_local_sessions_delta_writes_and_checkpoint_start_no_process(tmp_path: Path) -> None:
    """``chmod`` and ``readlink`` on PATH are replaced by scripts that log each start: a Delta
    write, a MERGE and a streaming query with a checkpoint start none, while Hadoop's own
    ``FileUtil.readLink`` in the same JVM is logged (the scripts see what the JVM starts)."""
    shims, log = tmp_path / "shims", tmp_path / "started.log"
    shims.mkdir()
    real_path = os.environ.get("PATH", "")
    for command in ("chmod", "readlink"):
        shim = shims / command
        shim.write_text(
            f'#!/bin/sh\necho "{command} $*" >> "{log}"\nPATH="{real_path}" exec {command} "$@"\n'
        )
        shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{shims}{os.pathsep}{real_path}", ACKSTATE_OFFLINE="1")
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(work), str(log)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["rows"] == 8
    assert report["ours"] == []
    assert [line.split()[0] for line in report["hadoop"]] == ["readlink"]
