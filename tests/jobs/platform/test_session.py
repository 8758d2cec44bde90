"""The session factory: the session users get, and one clear sentence when it cannot start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.platform import session as session_module
from jobs.platform.config import load_config
from jobs.platform.errors import DeltaJarsMissingError
from jobs.platform.jars import find_delta_jars, jars_root
from jobs.platform.maven import MANIFEST
from jobs.platform.session import get_spark, session_settings, spark_defaults
from tests.conftest import generated_code

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

GET_SPARK = "from jobs.platform.session import get_spark; get_spark()"


def run_python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def env_without_java(tmp_path: Path, java_home: str | None) -> dict[str, str]:
    """The environment of a machine with no Java: ``java`` removed from every PATH directory."""
    dirs = []
    for i, entry in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        d = Path(entry)
        if not (d / "java").exists():
            dirs.append(entry)
            continue
        shadow = tmp_path / f"path{i}"  # the same tools (bash, dirname, ...) minus java
        shadow.mkdir()
        for tool in d.iterdir():
            if tool.name != "java":
                (shadow / tool.name).symlink_to(tool)
        dirs.append(str(shadow))
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME" and not k.startswith("PYSPARK_GATEWAY")}
    env["PATH"] = os.pathsep.join(dirs)
    if java_home is not None:
        env["JAVA_HOME"] = java_home
    return env


@pytest.mark.parametrize(
    ("java_home", "expected"),
    [
        (None, "Java was not found: install a JDK 17 and set JAVA_HOME"),
        ("/nonexistent/jdk", "Java was not found: JAVA_HOME is /nonexistent/jdk but has no bin/java"),
    ],
)
def test_missing_java_is_one_sentence_not_a_gateway_error(
    tmp_path: Path, java_home: str | None, expected: str
) -> None:
    result = run_python(GET_SPARK, env_without_java(tmp_path, java_home))
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("jobs.platform.errors.SparkUnavailableError: " + expected)
    assert "install a JDK 17 and set JAVA_HOME" in last_line
    assert "Py4J" not in result.stderr
    assert "JAVA_GATEWAY_EXITED" not in result.stderr


def test_missing_java_in_the_cli_is_one_line(tmp_path: Path) -> None:
    env = env_without_java(tmp_path, "/nonexistent/jdk")
    env["ACKSTATE_JARS_DIR"] = str(tmp_path / "empty-jar-cache")
    result = run_python("import sys; from jobs.cli import main; sys.exit(main())", env, "setup")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "ackstate: error: Java was not found: JAVA_HOME is /nonexistent/jdk but has no bin/java; "
        "install a JDK 17 and set JAVA_HOME"
    ]


def test_missing_jars_are_named_with_the_fix(tmp_path: Path) -> None:
    config = load_config()
    with pytest.raises(DeltaJarsMissingError) as excinfo:
        find_delta_jars(config, tmp_path / "cache")
    message = str(excinfo.value)
    assert message.startswith(f"Delta Lake jars ({config.delta_coordinate}) are not in {tmp_path / 'cache'}")
    assert message.endswith("run `ackstate setup` (needs Maven Central)")


def test_incomplete_jar_cache_counts_as_missing(tmp_path: Path) -> None:
    config = load_config()
    directory = tmp_path / f"{config.delta['artifact']}-{config.delta['version']}"
    directory.mkdir()
    (directory / "delta-spark.jar").write_bytes(b"")
    manifest = {
        "coordinate": config.delta_coordinate,
        "resolver": "maven",
        "jars": ["delta-spark.jar", "gone.jar"],
    }
    (directory / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DeltaJarsMissingError):
        find_delta_jars(config, tmp_path)

    (directory / "gone.jar").write_bytes(b"")
    found = find_delta_jars(config, tmp_path)
    assert [p.name for p in found.jars] == ["delta-spark.jar", "gone.jar"]


def test_offline_start_without_jars_fails_before_the_jvm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env.update(ACKSTATE_JARS_DIR=str(tmp_path / "cache"), ACKSTATE_OFFLINE="1")
    result = run_python(GET_SPARK, env)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("jobs.platform.errors.DeltaJarsMissingError: Delta Lake jars")
    assert last_line.endswith("run `ackstate setup` (needs Maven Central)")
    assert "JAVA_GATEWAY_EXITED" not in result.stderr


def test_delta_supplied_by_the_caller_is_not_added_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert session_module._delta_supplied({"spark.jars.packages": "io.delta:delta-spark_4.1_2.13:4.4.0"})
    assert session_module._delta_supplied({"spark.jars": "/opt/jars/delta-spark_4.1_2.13-4.4.0.jar"})
    assert not session_module._delta_supplied({"spark.jars": "/opt/jars/other.jar"})
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--packages io.delta:delta-spark_4.1_2.13:4.4.0 pyspark-shell")
    assert session_module._delta_supplied({})


def test_spark_defaults_conf_holds_what_every_deployment_needs() -> None:
    defaults = spark_defaults()
    assert defaults["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert defaults["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert defaults["spark.sql.session.timeZone"] == "UTC"
    assert defaults["spark.sql.execution.arrow.pyspark.enabled"] == "true"


def test_session_is_local_delta_started_offline_from_the_jar_cache(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf.get("spark.jars.packages", None) is None  # no Ivy, no network
    cache = str(jars_root())
    jars = conf.get("spark.jars").split(",")
    assert any("delta-spark_" in j for j in jars)
    assert all(cache in j for j in jars)


def test_generated_code_stays_compiled_across_batches(spark: SparkSession) -> None:
    """Every micro-batch makes the same few hundred generated classes; Spark's default cache of
    100 compiled each of them again every batch. 150 distinct plans, then the same 150 again:
    the second pass must compile nothing."""
    jvm = spark.sparkContext._jvm
    metrics = getattr(getattr(jvm.org.apache.spark.metrics.source, "CodegenMetrics$"), "MODULE$")

    def plan_all() -> int:
        before = metrics.METRIC_COMPILATION_TIME().getCount()
        for i in range(150):
            # whole-stage codegen compiles on the driver when the plan becomes an RDD; a literal
            # inlined into the code makes each plan's code distinct. No job runs.
            spark.range(1).selectExpr(f"id * 7 + {i} AS x")._jdf.queryExecution().toRdd()
        return metrics.METRIC_COMPILATION_TIME().getCount() - before

    assert spark.sparkContext.getConf().get("spark.sql.codegen.cache.maxEntries") == "1000"
    with generated_code(spark):
        assert plan_all() >= 150
        assert plan_all() == 0


def test_session_settings_last_for_the_block_and_give_back_what_each_session_had(spark: SparkSession) -> None:
    """The ingest runs a small batch with settings of its own (interpreted, in one partition) in
    the query's session and its write sessions, which live on into the next batch: each must get
    back its own value, or none. The key is the one-partition batch's: the suite's session
    interprets expressions from its start (``TEST_SPARK_CONF``)."""
    key, small = "spark.sql.maxSinglePartitionBytes", "1000"
    other = spark.newSession()
    other.conf.set(key, "2000")
    assert key not in spark.conf.getAll
    with session_settings([spark, other], {key: small}):
        assert spark.conf.get(key) == other.conf.get(key) == small
        assert spark.range(3).selectExpr("id * 2 AS x").collect()[2].x == 4
    assert key not in spark.conf.getAll
    assert other.conf.getAll[key] == "2000"
    with pytest.raises(ZeroDivisionError), session_settings([spark], {key: small}):
        raise ZeroDivisionError
    assert key not in spark.conf.getAll


def test_session_settings_read_no_java_iterator(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table write of a batch runs in ``session_settings``: reading what the session had
    must not end a py4j iteration with an exception (about 20 ms each, ``jobs.platform.java``)."""
    from tests.jobs.platform.test_java import converted_exceptions

    key = "spark.sql.maxSinglePartitionBytes"
    seen = converted_exceptions(monkeypatch)
    with session_settings([spark], {key: "1000", "spark.sql.shuffle.partitions": "5"}):
        assert spark.conf.get("spark.sql.shuffle.partitions") == "5"
    assert seen == []
    assert key not in spark.conf.getAll
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_get_spark_returns_the_running_session(spark: SparkSession) -> None:
    assert get_spark() is spark
    assert get_spark(extra_conf={"spark.sql.shuffle.partitions": 3}) is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    spark.conf.set("spark.sql.shuffle.partitions", "2")


def test_python_workers_run_this_interpreter(spark: SparkSession) -> None:
    def worker_python(_: object) -> list[str]:
        import sys as worker_sys

        return [worker_sys.executable]

    executables = spark.sparkContext.parallelize([0], 1).mapPartitions(worker_python).collect()
    assert executables == [sys.executable]


def test_named_classes_are_found_by_their_simple_names(spark: SparkSession) -> None:
    """A view with no imports knows none of them; after ``import_by_name`` each simple name is
    its class (a wrong name would break every ``F.col`` of the session's view)."""
    from py4j.java_gateway import JavaClass

    view = spark.sparkContext._gateway.new_jvm_view()
    simple = [name.rsplit(".", 1)[1] for name in session_module.NAMED_CLASSES]
    assert not any(isinstance(getattr(view, s), JavaClass) for s in simple)
    session_module.import_by_name(view)
    for name, s in zip(session_module.NAMED_CLASSES, simple, strict=True):
        found = getattr(view, s)
        assert isinstance(found, JavaClass) and found._fqn == name
