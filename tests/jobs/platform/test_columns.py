"""Column expressions built once per JVM (``jobs.platform.columns``): the same objects serve
every frame, and each frame still reads its own rows through them."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.platform.columns import built_once, named, select_named

pytestmark = pytest.mark.spark


def test_an_expression_is_built_once_and_serves_every_frame(spark: Any) -> None:
    from pyspark.sql import functions as F

    builds: list[int] = []

    def build() -> Any:
        builds.append(1)
        return (F.col("n") * 2).alias("twice")

    first = spark.createDataFrame([(1,), (2,)], "n int").select(built_once("test-twice", build))
    second = spark.createDataFrame([(5,)], "n int").select(built_once("test-twice", build))
    assert [r.twice for r in first.collect()] == [2, 4]
    assert [r.twice for r in second.collect()] == [10]
    assert len(builds) == 1


def test_select_named_is_select_by_name(spark: Any) -> None:
    frame = spark.createDataFrame([(1, "a", 2.0)], "x int, y string, z double")
    assert named(("z", "x")) is named(("z", "x"))
    chosen = select_named(frame, ("z", "x"))
    assert chosen.columns == ["z", "x"]
    assert chosen.collect() == frame.select("z", "x").collect()
