"""The one place ackstate gets a SparkSession: local Spark with Delta Lake by default.

Every job, the CLI and the Spark tests call ``get_spark``; no other module builds a session.
Three situations give the same session shape:

* ackstate starts Spark itself (``ackstate ...``, pytest, a notebook): the JVM is launched with
  the settings below and the cached Delta jars on ``spark.jars``, so the start needs no network;
* ``spark-submit --master ... --packages io.delta:... jobs/<name>.py``: the JVM exists already;
  master and jars are the submitter's, ackstate only fills in settings that are not set;
* a session is already active (a test fixture, a notebook): it is returned as it is.

Settings, lowest precedence first: ``conf/spark-defaults.conf`` (what every deployment needs),
the ``[spark]`` table of ``conf/ackstate.toml`` (local tuning, applied only to a local master),
the user's ``--conf`` ``[spark]`` table, ``extra_conf``, then ``master``.

Everything that commonly goes wrong before the JVM is up (no Java, a Java that is too old, no
Delta jars) is checked first and raised as ``SparkUnavailableError`` with one sentence that
says what to do, instead of Py4J's ``JAVA_GATEWAY_EXITED``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.platform.cds import driver_launch
from jobs.platform.config import AckstateConfig, conf_dir, load_config
from jobs.platform.errors import DeltaJarsMissingError, SparkUnavailableError
from jobs.platform.jars import ensure_delta_jars, find_delta_jars, jars_root
from jobs.platform.java import (
    cache_class_lookups,
    instantiated_session,
    jvm_class,
    require_java,
    running_session,
)
from jobs.platform.kafka import spark_kafka_dir
from jobs.platform.localfs import local_session_conf
from jobs.platform.maven import cached_files
from jobs.platform.pydaemon import daemon_conf
from jobs.platform.s3 import S3A_CLASS, cached_s3_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("ackstate.session")

OFFLINE_ENV = "ACKSTATE_OFFLINE"
"""Set to 1 to forbid resolving missing Delta jars when a session starts (fail instead)."""

_DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def get_spark(
    config: AckstateConfig | None = None,
    app_name: str = "ackstate",
    master: str | None = None,
    extra_conf: Mapping[str, Any] | None = None,
    *,
    jars_dir: str | Path | None = None,
) -> SparkSession:
    """Return the active SparkSession, or start one with Delta Lake configured.

    ``jars_dir`` overrides the Delta jar cache (default ``$ACKSTATE_JARS_DIR`` or
    ``~/.cache/ackstate/jars``). When the cache is empty the jars are resolved into it first,
    as ``ackstate setup`` does, unless ``$ACKSTATE_OFFLINE`` is set.
    """

    extra = {k: _conf_value(v) for k, v in (extra_conf or {}).items()}
    active = running_session()
    if active is not None:
        _set_runtime_conf(active, extra)
        return active

    config = config or load_config()
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        spark = _join_submitted_jvm(config, app_name, extra)
    else:
        spark = _launch_local_jvm(config, app_name, master, extra, jars_dir)
    spark.sparkContext.setLogLevel("WARN")
    import_by_name(spark.sparkContext._jvm)
    cache_class_lookups()
    return spark


NAMED_CLASSES = (
    "org.apache.spark.sql.functions",
    "org.apache.spark.sql.api.python.PythonSQLUtils",
    "org.apache.spark.api.python.PythonUtils",
)
"""The classes PySpark asks its gateway for by simple name most: every ``F.col``, ``F.lit`` and
column name passed to ``select`` looks up ``functions``, and every Arrow transfer
``PythonSQLUtils``."""


def import_by_name(view: Any) -> None:
    """Import ``NAMED_CLASSES`` into a py4j JVM view (PySpark's is ``SparkContext._jvm``) by
    their full names.

    Why: py4j resolves a simple name under each of PySpark's wildcard imports in turn, and each
    miss is a failed class load tried in every jar on the driver's class path (about 290 with
    Delta, Kafka and S3A): ``functions`` and ``PythonSQLUtils`` are found after six misses or
    more. Imported by full name they are found at once (0.38 ms and 0.85 ms per lookup
    against 0.19 and 0.07 ms, measured 2026-11-28; a Java Flight Recorder profile of small
    micro-batches had put a tenth of the driver JVM's CPU in these lookups)."""
    from py4j.java_gateway import java_import

    for name in NAMED_CLASSES:
        java_import(view, name)


def stop_spark() -> None:
    """Stop the session (and its SparkContext) that ``get_spark`` returned, if any."""
    from pyspark import SparkContext

    session = instantiated_session()
    if session is not None:
        session.stop()
    elif SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


def spark_defaults() -> dict[str, str]:
    """``conf/spark-defaults.conf`` as a dict (Java properties: ``key value`` or ``key=value``)."""
    settings: dict[str, str] = {}
    for line in (conf_dir() / "spark-defaults.conf").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"(\S+?)\s*[=:\s]\s*(.*)$", line)
        if match:
            settings[match.group(1)] = match.group(2).strip()
    return settings


def _launch_local_jvm(
    config: AckstateConfig,
    app_name: str,
    master: str | None,
    extra: dict[str, str],
    jars_dir: str | Path | None,
) -> SparkSession:
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    java = require_java()
    # Python workers must run this interpreter (the venv with pyroaring, pandas, ackstate).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = _local_conf(config, app_name, master, extra, jars_dir)
    # an empty SPARK_CONF_DIR, log4j's file by property, and the class archive `ackstate setup`
    # dumped for this class path, if there is one (jobs.platform.cds)
    options = conf.get("spark.driver.extraJavaOptions", "")
    launch = driver_launch(java, conf.get("spark.driver.extraClassPath", ""), options, jars_dir)
    if launch.spark_conf_dir is not None:
        os.environ["SPARK_CONF_DIR"] = launch.spark_conf_dir
    if launch.java_options:
        conf["spark.driver.extraJavaOptions"] = " ".join(filter(None, [options, *launch.java_options]))
    log.debug("driver class archive: %s", launch.archive or "none for this class path")

    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise SparkUnavailableError(
            "the Spark JVM exited while starting (its own messages are above): check JAVA_HOME, "
            "spark.driver.memory and the [spark] settings of your --conf file"
        ) from None


def local_extra_class_path(config: AckstateConfig, jars_dir: str | Path | None = None) -> str:
    """The driver's extra class path of a local session ``get_spark`` starts with ``config``."""
    return _local_conf(config, "ackstate", None, {}, jars_dir).get("spark.driver.extraClassPath", "")


def _local_conf(
    config: AckstateConfig,
    app_name: str,
    master: str | None,
    extra: dict[str, str],
    jars_dir: str | Path | None,
) -> dict[str, str]:
    """The Spark settings of a session launched here (see the module docstring's order)."""
    chosen_master = (
        master
        or extra.get("spark.master")
        or config.spark.get("spark.master")
        or config.spark_defaults.get("spark.master", "local[2]")
    )
    conf = spark_defaults()
    conf.update(config.spark_conf(local=chosen_master.startswith("local")))
    conf["spark.app.name"] = app_name
    conf.update(extra)
    conf["spark.master"] = chosen_master
    # ackstate's tables are Delta paths; Spark's in-memory catalog would otherwise create an
    # empty ./spark-warehouse in whatever directory a command runs from.
    conf.setdefault("spark.sql.warehouse.dir", str(_scratch_catalog_dir()))
    # Spark's Kafka source (ingest --format kafka), when `ackstate setup --kafka` cached it
    kafka_jars = cached_files(spark_kafka_dir(jars_dir)) or []
    if kafka_jars and "spark-sql-kafka" not in conf.get("spark.jars", ""):
        conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars", ""), *map(str, kafka_jars)]))
    # Hadoop's S3A connector (s3a:// and s3:// locations), when `ackstate setup --s3` cached it
    # on the class path: spark.jars would copy the 640 MB SDK bundle into every session's
    # scratch directory (a local executor fetches its jars too); a cluster's executors get them
    # shipped
    s3_jars = cached_s3_jars(jars_dir)
    key = "spark.driver.extraClassPath" if chosen_master.startswith("local") else "spark.jars"
    separator = os.pathsep if key == "spark.driver.extraClassPath" else ","
    if s3_jars and "hadoop-aws" not in conf.get(key, "") + conf.get("spark.jars", ""):
        conf[key] = separator.join(filter(None, [conf.get(key, ""), *map(str, s3_jars)]))
        conf.setdefault("spark.hadoop.fs.s3.impl", S3A_CLASS)
    # Hadoop's local file system without a process per file operation (jobs.platform.localfs),
    # when `ackstate setup` built it; a cluster's executors have no such jar
    if chosen_master.startswith("local"):
        conf.update(local_session_conf(conf, jars_dir))
        # pyspark's daemon with zip archives read once per worker, not once per task
        # (jobs.platform.pydaemon); a cluster's workers may not have ackstate installed
        conf.update(daemon_conf(conf))
    if not _delta_supplied(conf):
        conf["spark.jars"] = ",".join(
            filter(None, [conf.get("spark.jars", ""), *map(str, _delta_jars(config, jars_dir))])
        )
    return conf


def _join_submitted_jvm(config: AckstateConfig, app_name: str, extra: dict[str, str]) -> SparkSession:
    """Under ``spark-submit``: keep the submitter's master, jars and settings; add what is unset."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    SparkContext._ensure_initialized()
    submitted = SparkConf()  # now loads the spark.* properties spark-submit gave the JVM
    master = submitted.get("spark.master", "local[*]")
    wanted = spark_defaults()
    wanted.update(config.spark_conf(local=master.startswith("local")))
    wanted.pop("spark.master", None)
    wanted.setdefault("spark.app.name", app_name)
    builder = SparkSession.builder
    for key, value in wanted.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    for key, value in extra.items():
        builder = builder.config(key, value)
    if not class_loadable(_DELTA_EXTENSION):
        raise SparkUnavailableError(
            f"Delta Lake is not on this Spark's classpath: pass --packages {config.delta_coordinate} "
            f"(or --jars with the jars `ackstate setup` put in {jars_root()}) to spark-submit"
        )
    return builder.getOrCreate()


def _delta_jars(config: AckstateConfig, jars_dir: str | Path | None) -> tuple[Path, ...]:
    try:
        return find_delta_jars(config, jars_dir).jars
    except DeltaJarsMissingError:
        if os.environ.get(OFFLINE_ENV, "").lower() in ("1", "true", "yes"):
            raise
    log.warning("Delta Lake jars are not cached yet: resolving them once (as `ackstate setup` does)")
    return ensure_delta_jars(config, jars_dir).jars.jars


def _delta_supplied(conf: Mapping[str, str]) -> bool:
    """True when the caller already put Delta on the classpath (``--packages``/``--jars``)."""
    places = (
        conf.get("spark.jars", ""),
        conf.get("spark.jars.packages", ""),
        os.environ.get("PYSPARK_SUBMIT_ARGS", ""),
    )
    return any("delta-spark" in place for place in places)


def class_loadable(name: str) -> bool:
    """True when the running session's JVM can load class ``name`` (a jar is on its path)."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None
    loader = jvm_class(jvm, "java.lang.Thread").currentThread().getContextClassLoader()
    try:
        jvm_class(jvm, "java.lang.Class").forName(name, False, loader)
    except Exception:
        return False
    return True


@contextmanager
def session_settings(sessions: Sequence[SparkSession], settings: Mapping[str, str]) -> Iterator[None]:
    """Run a block with runtime ``settings`` on each of ``sessions``, then give each session back
    what it had: the value it set, or none (unset) where it set none.

    For work that needs other settings for a while in sessions that live on (the streaming
    query's session and its write sessions, from one micro-batch to the next). Every table
    write of a batch runs in one, so the settings a session had are asked of the JVM key by
    key: ``conf.getAll`` copies every setting to Python one py4j call at a time and ends by
    converting the exception that stops py4j's iteration (about 20 ms each time).
    """
    saved = [(session, _settings_held(session, settings)) for session in sessions]
    try:
        for session in sessions:
            for key, value in settings.items():
                session.conf.set(key, value)
        yield
    finally:
        for session, before in saved:
            for key in settings:
                if key in before:
                    session.conf.set(key, before[key])
                else:
                    session.conf.unset(key)


def _settings_held(session: SparkSession, keys: Iterable[str]) -> dict[str, str]:
    """The values ``session`` has set of ``keys`` (a key it has not set is absent)."""
    jsession = getattr(session, "_jsparkSession", None)
    if jsession is None:  # Spark Connect: no JVM to ask
        every = session.conf.getAll
        return {key: every[key] for key in keys if key in every}
    settings = jsession.conf().getAllAsJava()  # a copy, read in the JVM
    return {key: str(settings.get(key)) for key in keys if settings.containsKey(key)}


def _scratch_catalog_dir() -> Path:
    """Where Spark's session catalog keeps managed tables, which die with the session anyway."""
    return Path(tempfile.gettempdir()) / f"ackstate-spark-catalog-{os.getuid()}"


def _set_runtime_conf(spark: SparkSession, extra: Mapping[str, str]) -> None:
    for key, value in extra.items():
        if spark.conf.isModifiable(key):
            spark.conf.set(key, value)
        elif spark.conf.get(key, None) != value:
            log.warning("%s=%s ignored: a Spark session is already running with %s", key, value, key)


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
