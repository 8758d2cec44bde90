"""``jobs.platform.partitioning``: the Python hash is Spark's, and a bucket of keys runs on the
task that grouping by the keys themselves gives them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.platform.partitioning import bucket_column, bucket_labels, partition_of, spark_hash_int

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

KEYS = ("topic", "partition")


def test_the_python_hash_is_sparks_hash_of_an_int(spark: SparkSession) -> None:
    values = [0, 1, -1, 7, 42, 123_456_789, 2**31 - 1, -(2**31), *range(100, 140)]
    frame = spark.createDataFrame([(v,) for v in values], "v int")
    rows = frame.select("v", F.hash("v").alias("h")).collect()
    assert {r.v: r.h for r in rows} == {v: spark_hash_int(v) for v in values}


def test_labels_are_distinct_and_each_lands_on_its_task() -> None:
    for partitions, per_partition in ((1, 5), (2, 10), (3, 4), (200, 1)):
        labels = bucket_labels(partitions, per_partition)
        assert len(set(labels)) == len(labels) == partitions * per_partition
        for i, label in enumerate(labels):
            assert partition_of(label, partitions) == i // per_partition


def _task_of_each_group(key: Any, rows: pa.Table) -> pa.Table:
    from pyspark import TaskContext

    task = TaskContext.get().partitionId()
    return rows.select(list(KEYS)).append_column("task", pa.array([task] * rows.num_rows, pa.int64()))


def test_a_bucket_runs_on_the_task_that_grouping_by_its_keys_gives_them(spark: SparkSession) -> None:
    keys = [(f"persistent://t/ns/topic-{i % 41}", i % 13 - 1) for i in range(4000)]
    rows = spark.createDataFrame(keys, "topic string, partition int")
    schema = "topic string, partition int, task long"
    saved = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        by_keys = rows.groupBy(*KEYS).applyInArrow(_task_of_each_group, schema).distinct().collect()
        bucket = bucket_column(KEYS, 3, 4).alias("_bucket")
        by_bucket = rows.groupBy(bucket).applyInArrow(_task_of_each_group, schema).distinct().collect()
        buckets = rows.select(bucket).distinct().count()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", saved)
    tasks = {(r.topic, r.partition): r.task for r in by_keys}
    assert len(set(tasks.values())) == 3, "the keys must spread over every task to make this test meaningful"
    assert {(r.topic, r.partition): r.task for r in by_bucket} == tasks
    assert len(by_bucket) == len(by_keys)  # each key in one bucket
    assert buckets == 12
