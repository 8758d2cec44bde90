"""The Python daemon of a local session: pyspark's own, with zip archives read once per worker.

pyspark's worker calls ``importlib.invalidate_caches()`` before every task
(``pyspark.worker_util.setup_spark_files``: a task may have brought new ``--py-files``). On
Python 3.11 that makes every ``zipimporter`` in ``sys.path_importer_cache`` read its archive's
central directory again, in Python. A worker's path holds three archives: ``pyspark.zip``
(1,328 entries), py4j's zip and ``spark-core``'s jar (5,362 entries; Spark adds the jar that
holds ``PythonUtils``). There is one importer per archive and one per package directory inside
it, about thirty in all. One invalidation took 117-197 ms in a worker of a local session
(2026-11-28, 2 cores); a small micro-batch runs one Python task, so that was a fifth of its
apply.

Here an importer reads its archive again only when the file changed (its size or modification
time differs from when the importer last read it), so a new ``--py-files`` archive is still
found. The archives pyspark ships do not change while a worker lives.

Local sessions whose workers run this interpreter only (``daemon_conf``, used by
``jobs.platform.session``): Spark starts the daemon as
``python -m <spark.python.daemon.module> pyspark.worker`` before any task has shipped files, so
the module must be importable from the worker's interpreter. A cluster's workers may not have
ackstate installed (``spark-submit --py-files``); they keep pyspark's daemon.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import zipimport
from collections.abc import Mapping
from typing import Any

MODULE = "jobs.platform.pydaemon"
"""This module's name, for ``spark.python.daemon.module``."""

_READ_AT = "_ackstate_read_at"
_invalidate = zipimport.zipimporter.invalidate_caches


def daemon_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The setting a local session adds to ``conf`` for this daemon: none when the user chose a
    daemon module, or when the workers run another interpreter than this one
    (``spark.pyspark.python``, ``PYSPARK_PYTHON``), which may not have ackstate installed."""
    if "spark.python.daemon.module" in conf:
        return {}
    worker = conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or sys.executable
    if os.path.abspath(shutil.which(worker) or worker) != os.path.abspath(sys.executable):
        return {}
    return {"spark.python.daemon.module": MODULE}


def _archive_stat(archive: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(archive)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def invalidate_changed(importer: Any) -> None:
    """``zipimporter.invalidate_caches`` for an archive that changed since ``importer`` read it."""
    stat = _archive_stat(importer.archive)
    if stat is not None and getattr(importer, _READ_AT, None) == stat:
        return
    _invalidate(importer)
    setattr(importer, _READ_AT, stat)


def install() -> None:
    """Patch ``zipimporter`` in this process, and read every archive on the path once now: a
    worker forked from this process starts with that."""
    zipimport.zipimporter.invalidate_caches = invalidate_changed  # type: ignore[method-assign]
    importlib.invalidate_caches()


def main() -> None:
    from pyspark import daemon  # reads the worker module from sys.argv[1], as Spark passes it

    install()
    daemon.manager()


if __name__ == "__main__":
    main()
