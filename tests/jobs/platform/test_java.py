"""``jvm_class``, ``java_list`` and ``cache_class_lookups``: the JVM reached from Python without
py4j's costly paths."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from jobs.platform.java import cache_class_lookups, java_list, jvm_class

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


def lookups_asked(monkeypatch: pytest.MonkeyPatch, view: object) -> list[str]:
    """The names a py4j view (and the packages and classes it returns) asks the JVM about from
    now on: py4j's "unknown member" reflection command, one per name looked up."""
    from py4j import protocol

    client = view._gateway_client  # type: ignore[attr-defined]
    asked: list[str] = []
    send = client.send_command
    unknown = protocol.REFLECTION_COMMAND_NAME + protocol.REFL_GET_UNKNOWN_SUB_COMMAND_NAME

    def counting(command: str, *args: object, **kwargs: object) -> str:
        if command.startswith(unknown):
            asked.append(command[len(unknown) :].split("\n", 1)[0])
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counting)
    return asked


def test_class_lookups_are_asked_of_the_jvm_once(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain of packages to a class is asked once, name by name, and then answered from what
    was kept: the same class, still callable."""
    from py4j.java_gateway import JavaClass, JVMView

    installed = JVMView.__getattr__
    cache_class_lookups()  # get_spark installed it; a second call changes nothing
    assert JVMView.__getattr__ is installed
    view = spark.sparkContext._gateway.new_jvm_view()
    asked = lookups_asked(monkeypatch, view)
    found = view.io.delta.tables.DeltaTable
    assert isinstance(found, JavaClass) and found._fqn == "io.delta.tables.DeltaTable"
    assert asked == ["io", "io.delta", "io.delta.tables", "io.delta.tables.DeltaTable"]
    assert view.io.delta.tables.DeltaTable is found
    values = view.java.util.ArrayList()
    values.add("a")
    assert view.java.util.ArrayList is view.java.util.ArrayList and int(values.size()) == 1
    assert asked[4:] == ["java", "java.util", "java.util.ArrayList"]


def test_a_simple_name_that_is_no_class_yet_is_asked_again(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """py4j answers "package" for a simple name no import makes a class; that answer is not
    kept, so a later import of the class is seen (PySpark imports at run time)."""
    from py4j.java_gateway import JavaClass, JavaPackage, java_import

    view = spark.sparkContext._gateway.new_jvm_view()
    asked = lookups_asked(monkeypatch, view)
    assert isinstance(view.ArrayDeque, JavaPackage) and isinstance(view.ArrayDeque, JavaPackage)
    assert asked == ["ArrayDeque", "ArrayDeque"]
    java_import(view, "java.util.*")
    found = view.ArrayDeque
    assert isinstance(found, JavaClass) and found._fqn == "java.util.ArrayDeque"
    assert view.ArrayDeque is found and asked == ["ArrayDeque"] * 3
