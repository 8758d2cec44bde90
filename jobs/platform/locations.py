"""Where ackstate reads and writes: a local path or a URI, and the file access to either.

A location is a string. A local path (``./warehouse``, ``~/wh``, ``file:/data/wh``) is made
absolute; a URI with a scheme (``s3a://bucket/wh``, ``s3://…``, ``gs://…``, ``abfss://…``,
``hdfs://…``) is kept as written, since ``pathlib`` would collapse its ``//`` into
``<cwd>/s3a:/bucket/wh``. Delta and Spark take either form as they are.

The few files ackstate touches itself, outside Spark (the streaming checkpoints it inspects,
the checkpoint registry, ``report --out``), go through this module: ``pathlib`` for a local
path, Hadoop's ``FileSystem`` of the running Spark session for a URI, so that a URI reaches
exactly the storage, credentials and endpoint Spark's own reads and writes use.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from jobs.platform.errors import LocationError
from jobs.platform.java import jvm_class

Location = str
"""A local absolute path or a URI, as ``resolve`` returns it."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def scheme(location: str | Path) -> str | None:
    """The URI scheme of ``location`` in lower case (``s3a``, ``file``), or None for a path.

    One letter before a colon is a Windows drive, not a scheme.
    """
    match = _SCHEME.match(str(location))
    if match is None or len(match.group(1)) == 1:
        return None
    return match.group(1).lower()


def is_uri(location: str | Path) -> bool:
    """True for a location on a remote filesystem, one that ``pathlib`` must not touch."""
    return scheme(location) not in (None, "file")


def resolve(location: str | Path) -> Location:
    """``location`` as ackstate stores and compares it: a URI unchanged but for a trailing
    slash, a ``file:`` URI or a path as an absolute local path (``~`` expanded)."""
    text = str(location)
    if is_uri(text):
        return text.rstrip("/") if not text.endswith("://") else text
    if scheme(text) == "file":
        text = unquote(urlparse(text).path)
    return str(Path(text).expanduser().absolute())


def holds_at_most(location: str | Path, limit: int, *, skip_hidden: bool = False) -> bool:
    """Whether the files under a local directory add up to at most ``limit`` bytes (a missing
    directory holds none); False for a URI, which is not listed. ``skip_hidden``: leave out
    directories whose name starts with ``_`` or ``.``, as Spark's file source does. Stops
    counting as soon as the limit is passed."""
    if is_uri(location):
        return False
    total = 0
    for root, dirs, files in os.walk(resolve(location)):
        if skip_hidden:
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:  # gone since it was listed
                continue
            if total > limit:
                return False
    return True


def join(base: str | Path, *names: str) -> Location:
    """``base`` with ``names`` appended, one ``/`` between each."""
    if is_uri(base):
        return "/".join([str(base).rstrip("/"), *(n.strip("/") for n in names)])
    return str(Path(resolve(base), *names))


def name(location: str | Path) -> str:
    """The last part of ``location``."""
    return str(location).rstrip("/").rsplit("/", 1)[-1]


def is_within(location: str | Path, root: str | Path) -> bool:
    """True when ``location`` is ``root`` or lies under it."""
    inner, outer = resolve(location), resolve(root)
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def require_local(location: str | Path, what: str, command: str) -> Path:
    """``location`` as a local ``Path``, or a ``LocationError`` in one sentence naming why."""
    if is_uri(location):
        raise LocationError(
            f"{what} must be a local path for `ackstate {command}`, which writes with the local "
            f"filesystem; got {location}"
        )
    return Path(resolve(location))


# ---- file access -------------------------------------------------------------------------------
def _hadoop(location: str) -> tuple[Any, Any, Any]:
    """The JVM, Hadoop's FileSystem for a URI and the URI as a Hadoop ``Path``, from the
    running session (its Hadoop settings carry the endpoint and credentials)."""
    from jobs.platform.java import running_session

    spark = running_session()
    if spark is None:
        raise LocationError(f"{location} is a URI: reaching it needs a running Spark session")
    jvm = spark._jvm  # type: ignore[attr-defined]
    path = jvm_class(jvm, "org.apache.hadoop.fs.Path")(location)
    return jvm, path.getFileSystem(spark._jsc.hadoopConfiguration()), path  # type: ignore[attr-defined]


def exists(location: str) -> bool:
    if not is_uri(location):
        return Path(resolve(location)).exists()
    _jvm, fs, path = _hadoop(location)
    return bool(fs.exists(path))


def is_dir(location: str) -> bool:
    if not is_uri(location):
        return Path(resolve(location)).is_dir()
    _jvm, fs, path = _hadoop(location)
    return bool(fs.exists(path) and fs.getFileStatus(path).isDirectory())


def children(location: str) -> list[tuple[str, bool]]:
    """``(name, is_directory)`` of each entry directly under ``location``; none when it is absent."""
    if not is_uri(location):
        directory = Path(resolve(location))
        if not directory.is_dir():
            return []
        return sorted((p.name, p.is_dir()) for p in directory.iterdir())
    _jvm, fs, path = _hadoop(location)
    if not fs.exists(path):
        return []
    return sorted((str(s.getPath().getName()), bool(s.isDirectory())) for s in fs.listStatus(path))


def read_text(location: str) -> str:
    if not is_uri(location):
        return Path(resolve(location)).read_text(encoding="utf-8")
    jvm, fs, path = _hadoop(location)
    stream = fs.open(path)
    try:
        return str(jvm_class(jvm, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_text(location: str, text: str) -> None:
    """Write ``text`` whole (see ``write_bytes``)."""
    write_bytes(location, text.encode("utf-8"))


def write_bytes(location: str, data: bytes) -> None:
    """Write ``data`` whole: a local file through a renamed temporary file, an object with one
    PUT when the stream closes (an object store shows an object whole or not at all)."""
    if not is_uri(location):
        target = Path(resolve(location))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
        return
    _jvm, fs, path = _hadoop(location)
    stream = fs.create(path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def remove(location: str) -> None:
    """Delete the file ``location`` if it is there."""
    if not is_uri(location):
        Path(resolve(location)).unlink(missing_ok=True)
        return
    _jvm, fs, path = _hadoop(location)
    fs.delete(path, False)


def upload(local: Path, location: str) -> None:
    """Copy the local file ``local`` (a small one: it passes through memory) to ``location``.

    Not ``FileSystem.copyFromLocalFile``: S3A sends that through the SDK's asynchronous client,
    whose ``Expect: 100-continue`` handling some S3 APIs (moto among them) answer wrongly.
    """
    write_bytes(location, local.read_bytes())
