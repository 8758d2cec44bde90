"""``jvm_class`` and ``java_list``: the JVM reached from Python without py4j's costly paths."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from jobs.platform.java import java_list, jvm_class

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def converted_exceptions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Java exceptions PySpark converts from now on (py4j ends an iteration with one)."""
    import pyspark.errors.exceptions.captured as captured

    seen: list[str] = []
    convert = captured.convert_exception

    def counting(e):  # type: ignore[no-untyped-def]
        seen.append(str(e.toString()))
        return convert(e)

    monkeypatch.setattr(captured, "convert_exception", counting)
    return seen


def test_jvm_class_finds_classes_by_their_full_name(spark: SparkSession) -> None:
    jvm = spark._jvm  # type: ignore[attr-defined]
    values = jvm_class(jvm, "java.util.ArrayList")()
    values.add("a")
    assert int(values.size()) == 1
    assert int(jvm_class(jvm, "java.lang.Long").valueOf("7")) == 7
    option = jvm_class(jvm, "scala.Option")
    append = jvm_class(jvm, "org.apache.spark.sql.SaveMode").valueOf("Append")
    none = option.empty()
    write = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaOperations$Write")  # a nested class
    operation = write(append, none, none, none, none, none, none, none, none)
    assert str(operation.name()) == "WRITE"


def test_java_list_reads_by_index_without_an_exception(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    jvm = spark._jvm  # type: ignore[attr-defined]
    values = jvm_class(jvm, "java.util.ArrayList")()
    for item in ("a", "b", "c"):
        values.add(item)
    seen = converted_exceptions(monkeypatch)
    assert java_list(values) == ["a", "b", "c"]
    assert java_list(jvm_class(jvm, "java.util.ArrayList")()) == []
    assert seen == []
    assert list(values) == ["a", "b", "c"]  # py4j's own iteration
    assert len(seen) == 1 and "NoSuchElementException" in seen[0]  # ends with one
