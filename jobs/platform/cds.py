"""A class data sharing (CDS) archive for the Spark driver JVMs ackstate starts locally.

Why: before its first query a local driver loads Spark's, Scala's, Hadoop's, Delta's and
Arrow's classes and parses and verifies each. On two cores that is most of the 8 s a
session takes to start, and every CLI command, restart and test process pays it. Java 17 maps
classes from an archive an earlier JVM dumped (``-XX:ArchiveClassesAtExit``, then
``-XX:SharedArchiveFile``) instead.

An archive fits one class path and one JDK only. The JVM checks that itself when it starts and
ignores an archive that does not fit (a warning, sent to stderr here: commands print JSON on
stdout). Two things in ackstate's launch keep the class path archivable and the archive found:

* Spark puts ``SPARK_CONF_DIR`` on the driver's class path, and CDS refuses a non-empty
  directory there. ackstate points it at an empty directory of the jar cache and gives log4j
  ``conf/log4j2.properties`` by system property (Spark reads ``spark-defaults.conf`` through
  ``jobs.platform.session`` anyway). A ``SPARK_CONF_DIR`` of the user's is left alone.
* The archive is named by a digest of what makes the class path: the JDK, Spark's jars and the
  driver's extra class path (``setup --s3`` puts S3A there). After ``pip install`` of another
  pyspark or ``setup --s3``, sessions find no archive under the new name and start without one
  until ``ackstate setup`` dumps it again.

``ackstate setup`` dumps the archive once, from a child process that runs a small ingest and
both stats reads (so the classes those load are in it). A session never builds one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.platform.config import AckstateConfig, conf_dir
from jobs.platform.errors import SparkUnavailableError
from jobs.platform.jars import JARS_DIR_ENV, jars_root, run_logged
from jobs.platform.java import java_version_text, require_java, spark_jars_dir

ARCHIVE_DIR = "cds"
"""The folder of the jar cache that holds the archives and the empty ``SPARK_CONF_DIR``."""
KEEP_ARCHIVES = 3
"""Archives kept in the jar cache: one per virtual environment that started a session or ran
``ackstate setup`` lately (``drop_old_archives``)."""

ARCHIVE_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")
"""Options by which a caller already chose what the JVM does with archives: no archive is
added to a launch that has one (here, and for the broker in ``jobs.platform.broker``)."""

QUIET_JVM_LOG = ("-Xlog:disable", "-Xlog:all=warning:stderr")
"""The JVM's own warnings (a stale archive, say) to stderr instead of stdout."""


@dataclass(frozen=True)
class DriverLaunch:
    """What ``jobs.platform.session`` adds to a local driver's launch."""

    spark_conf_dir: str | None
    """The ``SPARK_CONF_DIR`` to set; None: the user's own is set and stays."""
    java_options: tuple[str, ...]
    """Appended to ``spark.driver.extraJavaOptions``."""
    archive: Path | None
    """The archive the driver maps; None when none fits this class path yet."""


def empty_conf_dir(root: str | Path | None = None) -> Path:
    """The empty ``SPARK_CONF_DIR`` of the launches ackstate makes (created if missing)."""
    path = jars_root(root) / ARCHIVE_DIR / "spark-conf"
    path.mkdir(parents=True, exist_ok=True)
    return path


def archive_name(prefix: str, java: Path, jars_dir: Path, *more: str) -> str:
    """The file name of an archive for this JDK, the jars of ``jars_dir`` (their names, sizes
    and modification times) and ``more``: what makes a class path, which the archive fits and
    no other. The driver's archive and the broker's (``jobs.platform.broker``) are named so."""
    digest = hashlib.sha256()
    digest.update(str(java.resolve()).encode())
    digest.update(java_version_text(java).encode())
    for jar in sorted(jars_dir.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    for part in more:
        digest.update(part.encode())
    return f"{prefix}-{digest.hexdigest()[:16]}.jsa"


def archive_path(java: Path, extra_class_path: str, root: str | Path | None = None) -> Path:
    """Where the archive for this JDK, Spark and extra class path is (whether it exists or not)."""
    name = archive_name("driver", java, spark_jars_dir(), extra_class_path, str(empty_conf_dir(root)))
    return jars_root(root) / ARCHIVE_DIR / name


def driver_launch(
    java: Path, extra_class_path: str, java_options: str, root: str | Path | None = None
) -> DriverLaunch:
    """The conf directory and JVM options of a local driver launch with ``java_options``
    already chosen (the user's, or a caller's such as ``-XX:TieredStopAtLevel=1``)."""
    ours = empty_conf_dir(root)
    user_dir = os.environ.get("SPARK_CONF_DIR")
    if user_dir and Path(user_dir) != ours:
        return DriverLaunch(None, (), None)
    options = [f"-Dlog4j2.configurationFile={shlex.quote(str(conf_dir() / 'log4j2.properties'))}"]
    archive: Path | None = None
    if not any(option in java_options for option in ARCHIVE_OPTIONS):
        candidate = archive_path(java, extra_class_path, root)
        if candidate.is_file():
            archive = candidate
            options += [f"-XX:SharedArchiveFile={shlex.quote(str(candidate))}", *QUIET_JVM_LOG]
            mark_used(candidate)
    return DriverLaunch(str(ours), tuple(options), archive)


def ensure_archive(
    config: AckstateConfig,
    extra_class_path: str,
    root: str | Path | None = None,
    *,
    force: bool = False,
) -> tuple[Path, float | None]:
    """Dump the archive for the sessions this machine starts (their driver's extra class path is
    ``extra_class_path``), unless it is there; return its path and the seconds the dump took
    (None: it was there). The child runs ``jobs.platform.setup.archive_child``."""
    java = require_java()
    path = archive_path(java, extra_class_path, root)
    if path.is_file() and not force:
        return path, None
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    log_file = jars_root(root) / f"{ARCHIVE_DIR}.log"
    code = "from jobs.platform.setup import archive_child; archive_child()"
    args = [str(config.source) if config.source else "", str(partial)]
    env = dict(os.environ, ACKSTATE_OFFLINE="1", **{JARS_DIR_ENV: str(jars_root(root))})
    env.pop("SPARK_CONF_DIR", None)  # the archive is for ackstate's own launches
    started = time.monotonic()
    if not run_logged([sys.executable, "-c", code, *args], log_file, env=env) or not partial.is_file():
        raise SparkUnavailableError(f"dumping the class data sharing archive failed: see {log_file}")
    partial.replace(path)
    drop_old_archives(path.parent)
    return path, time.monotonic() - started


def mark_used(archive: Path) -> None:
    """Set the archive's modification time to now, the order ``drop_old_archives`` keeps by.

    Without it the order was the dump's: on a machine where clean clones are set up again and
    again beside one checkout (a CI runner), three such setups deleted the checkout's archive
    though its sessions used it every day. A cache that cannot be written is left as it is."""
    with contextlib.suppress(OSError):
        os.utime(archive)


def drop_old_archives(directory: Path, keep: int = KEEP_ARCHIVES) -> None:
    """Delete all but the ``keep`` archives used last (150-200 MB each; ``mark_used``).

    Each virtual environment has its own class path, so its own archive: a checkout and a clean
    clone set up beside it on one machine share the jar cache. Keeping only the newest archive
    made each setup delete the other's, and its sessions started without one."""
    archives = sorted(directory.glob("driver-*.jsa"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)
