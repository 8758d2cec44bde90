"""Hadoop's S3A connector on local disk, so that a session reaches ``s3a://`` and ``s3://``.

``ackstate setup --s3`` resolves ``conf/s3-jars.pom`` (``hadoop-aws`` of pyspark's Hadoop and
the AWS SDK bundle it was built with) once into the jar cache, as the Delta jars are;
``jobs.platform.session`` puts them on ``spark.jars`` of every local session when they are there, and maps
``s3://`` to S3A as well (Hadoop has no ``s3://`` filesystem of its own; EMR's is not S3A). The
endpoint and credentials are ordinary Hadoop settings (``spark.hadoop.fs.s3a.*``) in ``[spark]``.
"""

from __future__ import annotations

from pathlib import Path

from jobs.platform.config import conf_dir
from jobs.platform.errors import S3SetupError
from jobs.platform.jars import display_path, jars_root
from jobs.platform.maven import cached_files, resolve_pom

HADOOP_AWS_VERSION = "3.4.2"
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def s3_jars_dir(root: str | Path | None = None) -> Path:
    return jars_root(root) / f"hadoop-aws-{HADOOP_AWS_VERSION}"


def cached_s3_jars(root: str | Path | None = None) -> list[Path]:
    """The cached S3A jars, or none when ``ackstate setup --s3`` has not run."""
    return cached_files(s3_jars_dir(root)) or []


def find_s3_jars(root: str | Path | None = None) -> list[Path]:
    """The cached S3A jars, or ``S3SetupError`` naming the command that caches them."""
    jars = cached_s3_jars(root)
    if not jars:
        raise S3SetupError(
            f"Hadoop's S3A jars (hadoop-aws {HADOOP_AWS_VERSION}) are not in "
            f"{display_path(s3_jars_dir(root))}: run `ackstate setup --s3` (needs Maven)"
        )
    return jars


def ensure_s3_jars(root: str | Path | None = None, force: bool = False) -> bool:
    """Resolve the S3A jars into the cache if missing; True when it resolved them."""
    if not force and cached_s3_jars(root):
        return False
    resolve_pom(conf_dir() / "s3-jars.pom", s3_jars_dir(root))
    return True
