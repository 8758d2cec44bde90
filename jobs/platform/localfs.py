"""A Hadoop local file system that starts no process, for the local Spark sessions ackstate launches.

Why: without Hadoop's native library (pip's pyspark has none), Hadoop's ``RawLocalFileSystem``
runs ``chmod`` for every file and directory it creates and ``readlink`` for every link status.
``FileContext.rename`` asks for two link statuses, and Delta's log store and Spark's streaming
checkpoint write every log entry and its checksum through a rename. A 1,000-event micro-batch on
a local warehouse therefore started about 230 processes of 4 to 25 ms each (seen with Java
Flight Recorder's ``jdk.ProcessStart`` events): a fifth of a second or more of a 4 s batch, the
whole of the stream's own bookkeeping between batches, and the same again in every test.

``hadoop_local/`` holds three small classes: ``NioRawLocalFileSystem`` sets permissions and
answers link statuses with ``java.nio.file`` (a path that is a symbolic link keeps Hadoop's own
answer), and ``NioLocalFileSystem`` and ``NioLocalFs`` put it under Hadoop's checksummed
``FileSystem`` and ``FileContext`` for ``file:`` paths. Everything else is Hadoop's code.

``ackstate setup`` compiles them with the JDK's ``javac`` against the Hadoop jar of the
installed pyspark into the jar cache. A local session (master ``local[...]``) puts that jar on
the driver's class path and sets ``spark.hadoop.fs.file.impl`` and
``spark.hadoop.fs.AbstractFileSystem.file.impl``, unless the user set either. Without ``javac``
or before ``setup``, sessions run Hadoop's own classes, as before. A cluster's executors are left
alone: their machines have no such jar. A changed source is a new jar, so a new driver class
path: sessions start without the class archive (``jobs.platform.cds``) until setup runs again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from jobs.platform.errors import SparkUnavailableError
from jobs.platform.jars import jars_root
from jobs.platform.java import require_java, spark_jars_dir

FILE_SYSTEM_CLASS = "io.ackstate.hadoop.NioLocalFileSystem"
"""``fs.file.impl``: the ``FileSystem`` of ``file:`` paths."""

FILE_CONTEXT_CLASS = "io.ackstate.hadoop.NioLocalFs"
"""``fs.AbstractFileSystem.file.impl``: what ``FileContext`` uses for ``file:`` paths."""

SOURCES = Path(__file__).with_name("hadoop_local")
JAR_NAME = "ackstate-localfs.jar"


def _hadoop_jar() -> Path:
    """The Hadoop client jar of the installed pyspark, which the classes compile against."""
    spark_jars = spark_jars_dir()
    found = sorted(spark_jars.glob("hadoop-client-api-*.jar"))
    if not found:
        raise SparkUnavailableError(f"no hadoop-client-api jar in {spark_jars}")
    return found[-1]


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def localfs_jar(root: str | Path | None = None) -> Path:
    """Where the jar for these sources and this Hadoop is (whether it exists or not): named by a
    digest of both, so a changed source or another pyspark gets a jar of its own."""
    digest = hashlib.sha256()
    for source in _sources():
        digest.update(source.relative_to(SOURCES).as_posix().encode())
        digest.update(source.read_bytes())
    digest.update(_hadoop_jar().name.encode())
    return jars_root(root) / f"ackstate-localfs-{digest.hexdigest()[:16]}" / JAR_NAME


def cached_localfs_jar(root: str | Path | None = None) -> Path | None:
    """The jar ``ackstate setup`` built for these sources, or None."""
    try:
        jar = localfs_jar(root)
    except SparkUnavailableError:
        return None
    return jar if jar.is_file() else None


def _javac() -> Path | None:
    """The ``javac`` beside the ``java`` Spark runs, else the one on PATH."""
    beside = require_java().resolve().with_name("javac")
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("javac")
    return Path(found) if found else None


def ensure_localfs_jar(root: str | Path | None = None, *, force: bool = False) -> tuple[Path, float | None]:
    """Compile the classes into the jar cache unless they are there; return the jar and the
    seconds it took (None: already there). Raises ``SparkUnavailableError`` without ``javac``."""
    jar = localfs_jar(root)
    if jar.is_file() and not force:
        return jar, None
    javac = _javac()
    if javac is None:
        raise SparkUnavailableError("no javac (a JDK's compiler) next to java or on PATH")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ackstate-localfs-") as tmp:
        classes = Path(tmp) / "classes"
        command = [
            str(javac),
            "--release",
            "17",
            "-nowarn",
            "-cp",
            str(_hadoop_jar()),
            "-d",
            str(classes),
            *map(str, _sources()),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SparkUnavailableError(f"javac failed on {SOURCES}: {result.stderr.strip()[-2000:]}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
        partial.replace(jar)  # a jar is there whole or not at all
    return jar, time.monotonic() - started


def local_session_conf(conf: dict[str, str], root: str | Path | None = None) -> dict[str, str]:
    """The settings a local session adds to ``conf`` for these classes: none when the jar is
    not built or the user chose either file system class."""
    if "spark.hadoop.fs.file.impl" in conf or "spark.hadoop.fs.AbstractFileSystem.file.impl" in conf:
        return {}
    jar = cached_localfs_jar(root)
    if jar is None:
        return {}
    class_path = conf.get("spark.driver.extraClassPath", "")
    return {
        "spark.driver.extraClassPath": os.pathsep.join(filter(None, [class_path, str(jar)])),
        "spark.hadoop.fs.file.impl": FILE_SYSTEM_CLASS,
        "spark.hadoop.fs.AbstractFileSystem.file.impl": FILE_CONTEXT_CLASS,
    }
