"""The driver's class archive (``jobs.platform.cds``): what a launch adds, and that the archive
``ackstate setup`` dumped fits the class path of the sessions ``get_spark`` starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.platform.cds import archive_path, driver_launch, drop_old_archives, empty_conf_dir
from jobs.platform.config import load_config
from jobs.platform.java import require_java
from jobs.platform.session import local_extra_class_path
from tests.jobs.platform.test_session import run_python


@pytest.fixture
def java() -> Path:
    return require_java()


@pytest.fixture
def own_conf_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)


def test_without_an_archive_the_launch_only_moves_the_conf_dir(java, tmp_path, own_conf_dir) -> None:
    launch = driver_launch(java, "", "-XX:TieredStopAtLevel=1", tmp_path)
    assert launch.archive is None
    assert launch.spark_conf_dir == str(empty_conf_dir(tmp_path))
    # CDS refuses a non-empty directory on the class path
    assert not any(Path(launch.spark_conf_dir).iterdir())
    (log4j,) = launch.java_options
    assert log4j.startswith("-Dlog4j2.configurationFile=") and log4j.endswith("conf/log4j2.properties")


def test_an_archive_for_the_class_path_is_mapped_with_the_jvm_warnings_on_stderr(
    java, tmp_path, own_conf_dir
) -> None:
    archive = archive_path(java, "/opt/extra.jar", tmp_path)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"")
    launch = driver_launch(java, "/opt/extra.jar", "", tmp_path)
    assert launch.archive == archive
    assert f"-XX:SharedArchiveFile={archive}" in launch.java_options
    assert "-Xlog:all=warning:stderr" in launch.java_options  # stdout carries the commands' JSON
    # another extra class path is another archive, which is not there
    assert driver_launch(java, "/opt/other.jar", "", tmp_path).archive is None


@pytest.mark.parametrize(
    "own", ["-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x"]
)
def test_a_callers_own_archive_option_wins(java, tmp_path, own_conf_dir, own: str) -> None:
    archive = archive_path(java, "", tmp_path)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"")
    launch = driver_launch(java, "", f"-Xmx1g {own}", tmp_path)
    assert launch.archive is None
    assert not any("SharedArchiveFile" in option for option in launch.java_options)


def test_the_newest_archives_are_kept_and_the_others_deleted(tmp_path: Path) -> None:
    """Two environments set up on one machine each keep their archive (the newest three stay)."""
    names = [f"driver-{i:016x}.jsa" for i in range(5)]
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, ns=(i * 10**9, i * 10**9))
    (tmp_path / "other.log").write_text("")
    drop_old_archives(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [*names[2:], "other.log"]


def test_an_archive_a_session_starts_with_is_kept_before_newer_dumps(
    java, tmp_path: Path, own_conf_dir
) -> None:
    """The archive of an environment that keeps starting sessions outlives three later setups
    of other environments (a CI runner's clean clones beside a checkout)."""
    used = archive_path(java, "", tmp_path)
    used.parent.mkdir(parents=True, exist_ok=True)
    used.write_bytes(b"")
    os.utime(used, ns=(0, 0))
    others = [used.parent / f"driver-{i:016x}.jsa" for i in range(3)]
    for i, other in enumerate(others, 1):
        other.write_bytes(b"")
        os.utime(other, ns=(i * 10**9, i * 10**9))
    assert driver_launch(java, "", "", tmp_path).archive == used
    drop_old_archives(used.parent, keep=3)
    assert sorted(p.name for p in used.parent.glob("driver-*.jsa")) == sorted(
        [used.name, others[1].name, others[2].name]
    )


def test_a_users_spark_conf_dir_is_left_alone(java, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "mine"))
    launch = driver_launch(java, "", "", tmp_path)
    assert (launch.spark_conf_dir, launch.java_options, launch.archive) == (None, (), None)


@pytest.mark.spark
def test_the_sessions_jvm_reads_ackstates_log4j_file(spark: SparkSession) -> None:
    """SPARK_CONF_DIR is empty now; ``conf/log4j2.properties`` comes by system property."""
    log_manager = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
    assert str(log_manager.getLogger("org.apache.parquet").getLevel()) == "ERROR"


@pytest.mark.slow
@pytest.mark.spark
def test_the_archive_setup_dumped_fits_the_sessions_get_spark_starts(java) -> None:
    """A driver told to map the archive or fail (``-Xshare:on``) starts and runs a query. It
    fails if anything between the dump and a launch changes the class path."""
    archive = archive_path(java, local_extra_class_path(load_config()))
    assert archive.is_file(), f"no class archive at {archive}: run `ackstate setup`"
    code = (
        "import sys\n"
        "from jobs.platform.session import get_spark\n"
        "options = '-Xshare:on -XX:SharedArchiveFile=' + sys.argv[1]\n"
        "spark = get_spark(extra_conf={'spark.driver.extraJavaOptions': options})\n"
        "print(spark.range(3).count())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    result = run_python(code, env, str(archive))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "3"
