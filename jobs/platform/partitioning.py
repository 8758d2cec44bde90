"""Buckets of grouping keys that keep Spark's hash partitioning of the keys themselves.

A grouped or cogrouped Arrow UDF pays a fixed cost per group: an Arrow stream each way per
side, in the JVM and in the Python worker. Grouping by a bucket of keys instead of each key
cuts the groups to a few per task, but Spark then hash-partitions the bucket labels, and a
handful of labels rarely splits evenly over the tasks: 20 labels over two tasks came out 12
and 8, a task with half as much again to do as the other. ``bucket_column`` picks each key's
task as grouping by the keys would (Spark's ``HashPartitioning``: ``pmod(hash(keys), n)``,
``hash`` being Murmur3 with seed 42, the SQL function ``hash``), splits it into
``per_partition`` buckets, and labels each bucket with an integer whose own hash lands on that
task. The tasks' shares are then exactly those of grouping by the keys.

Correctness never depends on it: a bucket holds whole keys whatever its label, and a Spark that
partitioned differently would only balance the tasks worse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.platform.columns import built_once

if TYPE_CHECKING:
    from pyspark.sql import Column

SEED = 42
"""The seed of Spark's ``hash`` function and of ``HashPartitioning``."""

_MASK = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_hash_int(value: int, seed: int = SEED) -> int:
    """Spark's ``hash`` of an int column's value (``Murmur3_x86_32.hashInt``), as a signed int."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_of(label: int, partitions: int) -> int:
    """The task Spark's hash partitioning gives an int key ``label`` among ``partitions``."""
    return spark_hash_int(label) % partitions  # Python's % is pmod for a positive divisor


def bucket_labels(partitions: int, per_partition: int) -> list[int]:
    """``per_partition`` distinct int labels for each of ``partitions`` tasks, task by task: label
    ``t * per_partition + s`` (its index) is one that Spark's hash partitioning sends to task ``t``."""
    found: list[list[int]] = [[] for _ in range(partitions)]
    missing, label = partitions * per_partition, 0
    while missing:
        task = found[partition_of(label, partitions)]
        if len(task) < per_partition:
            task.append(label)
            missing -= 1
        label += 1
    return [label for task in found for label in task]


def bucket_column(keys: tuple[str, ...], partitions: int, per_partition: int) -> Column:
    """An int column, the bucket of a row's ``keys``: ``per_partition`` buckets for each of
    ``partitions`` tasks, each bucket on the task that grouping by ``keys`` itself gives its
    keys (module docstring). Built once per JVM for each shape."""

    def build() -> Column:
        from pyspark.sql import functions as F

        labels = F.array(*[F.lit(label) for label in bucket_labels(partitions, per_partition)])
        task = F.pmod(F.hash(*keys), F.lit(partitions))
        if per_partition == 1:
            return F.element_at(labels, task + 1)
        within = F.pmod(F.xxhash64(*keys), F.lit(per_partition)).cast("int")
        return F.element_at(labels, task * per_partition + within + 1)

    return built_once(("partitioning.bucket_column", keys, partitions, per_partition), build)
