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


def prefer_quick_jit(spark_conf: dict[str, str]) -> None:
    """Start the local driver with ``QUICK_JIT``, unless the user's own driver options are set:
    theirs win, whatever they say."""
    spark_conf.setdefault("spark.driver.extraJavaOptions", QUICK_JIT)


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


ROOT_PACKAGES = frozenset({"com", "io", "java", "javax", "org", "py4j", "scala"})
"""The first names of the packages that PySpark, Delta and py4j reach through a JVM view
(``jvm.org.apache...``, ``jvm.io.delta...``, ``gateway.jvm.py4j.reflection...``): what
``cache_class_lookups`` keeps when py4j answers that such a name is a package."""


def cache_class_lookups() -> None:
    """Keep what py4j's JVM views and packages answer for a name, in this process: a class
    always, a package when its name is dotted (``py4j.reflection``) or one of
    ``ROOT_PACKAGES``.

    Why: PySpark and Delta look classes up through chains such as
    ``gateway.jvm.py4j.reflection.TypeUtil`` (py4j's ``is_instance_of``, a dozen times per
    Java exception PySpark converts: every Java collection its streaming listener events
    iterate ends in one) or ``jvm.io.delta.tables.DeltaTable``, and ``jvm.PythonUtils`` for
    every column list. py4j asks the JVM for each name of such a chain anew, and each name
    that is not a class is a failed class load tried in every jar on the driver's class path
    (about 290) and, for a name without a dot, under each of the view's wildcard imports
    first. A Java Flight Recorder profile of three 200-event micro-batches put 9 % of the
    driver JVM's CPU in those failed loads (README, "Benchmarks").

    What is kept cannot change: a dotted name is looked up by its full name alone, so its
    answer does not depend on the view's imports; a class, once found, stays loaded. A name
    without a dot that is a package now could become a class only through a later import of
    a package holding a class of that simple name, which no Java package has for the names
    of ``ROOT_PACKAGES``; other package answers are not kept. A jar added to the running
    session (``addJar``) could turn a kept package answer into a class; ackstate adds none, its
    jars are on the class path from the start. Idempotent."""
    from py4j import java_gateway

    view_class, package_class = java_gateway.JVMView, java_gateway.JavaPackage
    if getattr(view_class.__getattr__, "keeps_answers", False):
        return
    ask_view, ask_package = view_class.__getattr__, package_class.__getattr__

    def kept(owner: Any, name: str, ask: Any, keep_package: bool) -> Any:
        answers = owner.__dict__.setdefault("_ackstate_answers", {})
        answer = answers.get(name)
        if answer is None:
            answer = ask(owner, name)
            if isinstance(answer, java_gateway.JavaClass) or (
                keep_package and isinstance(answer, package_class)
            ):
                answers[name] = answer
        return answer

    def view_member(view: Any, name: str) -> Any:
        return kept(view, name, ask_view, name in ROOT_PACKAGES)

    def package_member(package: Any, name: str) -> Any:
        return kept(package, name, ask_package, True)

    view_member.keeps_answers = True  # type: ignore[attr-defined]
    view_class.__getattr__ = view_member  # type: ignore[method-assign]
    package_class.__getattr__ = package_member  # type: ignore[method-assign]


def java_list(values: Any) -> list[Any]:
    """The items of a ``java.util.List``, read by index.

    Why not ``list(values)``: py4j iterates a Java collection until its iterator throws, and
    PySpark's conversion of that exception (a dozen instance checks, each a failed class
    lookup across the class path) costs about 20 ms, against 0.5 ms for three items by index."""
    return [values.get(i) for i in range(int(values.size()))]


_CONVERTERS = "scala.jdk.javaapi.CollectionConverters"


def scala_items(jvm: Any, seq: Any) -> list[Any]:
    """A Scala sequence's items (the inverse of ``scala_seq``)."""
    return java_list(jvm_class(jvm, _CONVERTERS).asJava(seq))


def scala_seq(jvm: Any, items: list[Any]) -> Any:
    """``items`` (JVM objects or strings) as a Scala immutable sequence."""
    values = jvm_class(jvm, "java.util.ArrayList")()
    for item in items:
        values.add(item)
    return jvm_class(jvm, _CONVERTERS).asScala(values).toSeq()
