"""The JVM under Spark: which ``java`` it runs (17 or later), and the session this process already has.

Kept apart from ``jobs.platform.session`` so that what only asks "is a session running?" (file
locations, the jar resolvers) does not import the session factory and everything it needs.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.platform.errors import SparkUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


MIN_JAVA = 17


JAVA_HINT = f"install a JDK {MIN_JAVA} and set JAVA_HOME"

QUICK_JIT = "-XX:TieredStopAtLevel=1"
"""Driver option of a short-lived JVM (a command's few queries): the C1 JIT alone warms up
faster on two cores than C1 and C2 together. Not for a JVM that runs for minutes (an ingest,
the test suite's session): there the optimising compiler pays for itself."""


def require_java() -> Path:
    """The ``java`` Spark will run, found as Spark's launcher finds it; or a clear error."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            raise SparkUnavailableError(
                f"Java was not found: JAVA_HOME is {java_home} but has no bin/java; {JAVA_HINT}"
            )
    else:
        found = shutil.which("java")
        if found is None:
            raise SparkUnavailableError(f"Java was not found: {JAVA_HINT}")
        java = Path(found)
    major = java_major_version(java)
    if major is not None and major < MIN_JAVA:
        raise SparkUnavailableError(
            f"Java {major} was found at {java} but Spark 4.1 needs Java {MIN_JAVA} or later; {JAVA_HINT}"
        )
    return java


def spark_jars_dir() -> Path:
    """The jars Spark's launcher puts on the driver's class path: ``$SPARK_HOME/jars``, and
    pip's pyspark is its own ``SPARK_HOME``."""
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent) / "jars"


def java_major_version(java: Path) -> int | None:
    match = re.search(r'version "(\d+)(?:\.(\d+))?', java_version_text(java))
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


@functools.cache
def java_version_text(java: Path) -> str:
    """What ``java -version`` prints (empty if it cannot run): asked once per process."""
    try:
        return subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return ""


def running_session() -> SparkSession | None:
    """The session this process runs, if any: the default one first (a thread may have a
    streaming query's clone as its active one, and a thread of our own has none), then the
    thread's active one."""
    from pyspark.sql import SparkSession

    return instantiated_session() or SparkSession.getActiveSession()


def instantiated_session() -> SparkSession | None:
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is None or session._sc._jsc is None:
        return None
    return session


def jvm_class(jvm: Any, name: str) -> Any:
    """The JVM class ``name`` (fully qualified; a nested class with ``$``), looked up by its
    full name in one call.

    Why not ``jvm.org.apache.spark...``: py4j resolves such a chain one name at a time, and
    each prefix that is not a class (``org``, ``org.apache``, ...) is a failed class load,
    tried in every jar on the driver's class path (about 290 with Delta, Kafka and S3A) and
    under every import of the gateway. ``DeltaLog`` costs 2.3 ms that way and 0.04 ms by its
    full name; a batch's table writes looked up about 300 such names."""
    return getattr(jvm, name)


def java_list(values: Any) -> list[Any]:
    """The items of a ``java.util.List``, read by index.

    Why not ``list(values)``: py4j iterates a Java collection until its iterator throws, and
    PySpark's conversion of that exception (a dozen instance checks, each a failed class
    lookup across the class path) costs about 20 ms, against 0.5 ms for three items by index."""
    return [values.get(i) for i in range(int(values.size()))]
