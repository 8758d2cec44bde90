"""An S3 API server on 127.0.0.1 (moto in server mode) with a bucket, and the suite's Spark
session pointed at it through Hadoop's S3A connector.

Every test here is marked ``s3`` and ``spark``; they need ``ackstate setup --s3`` (the S3A jars).
The server is stopped by process id when the module ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from jobs.platform.s3 import find_s3_jars
from tests.s3.server import S3Server

BUCKET = "ackstate"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    find_s3_jars()  # a missing `ackstate setup --s3` fails here, in one sentence
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(scope="module")
def s3_spark(spark: SparkSession, s3: S3Server) -> SparkSession:
    """The suite's session, reading ``s3a://`` from this module's server.

    Set on the running context's Hadoop configuration (the test session started before the
    server): a user's session gets the same settings from ``[spark]`` as ``hadoop.fs.s3a.*``.
    """
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for key, value in s3.hadoop_settings().items():
        hadoop.set(key, value)
    return spark
