"""``ensure_tables``: every table made once, side by side; ``holds_no_rows``: a table known
empty at a version without a Spark job, and only then; ``release``: a checkpoint's blocks
freed, and nothing else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from jobs.platform.tables import ensure_tables, holds_no_rows, latest_version, release, table_path
from schemas.tables import TABLE_CLUSTERING, TABLES
from tests.jobs.warehouse import append_rows, cached_rdds, cached_rdds_when, commit_actions

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

ROW = {"topic": "t", "partition": 0, "first_retained_ledger": 5, "requested_by": "test", "requested_at": None}


def test_only_a_version_whose_checksum_counts_no_file_holds_no_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledger_trims"])
    assert latest_version(spark, warehouse, "ledger_trims") == 0
    assert holds_no_rows(spark, warehouse, "ledger_trims", 0)  # just created

    append_rows(spark, warehouse, "ledger_trims", [ROW])
    assert latest_version(spark, warehouse, "ledger_trims") == 1
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 1)  # a file
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 0)  # not the version last read: unknown

    spark.sql(f"DELETE FROM delta.`{table_path(warehouse, 'ledger_trims')}`")
    assert latest_version(spark, warehouse, "ledger_trims") == 2
    assert holds_no_rows(spark, warehouse, "ledger_trims", 2)  # every file removed

    for checksum in (Path(table_path(warehouse, "ledger_trims")) / "_delta_log").glob("*.crc"):
        checksum.unlink()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[attr-defined]
    assert latest_version(spark, warehouse, "ledger_trims") == 2
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 2)  # no checksum: not known


def test_local_frame_holds_its_rows_in_the_plan_and_is_read_without_a_job(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    from jobs.platform.tables import empty_frame, local_frame

    tracker = spark.sparkContext.statusTracker()
    frame = local_frame(spark, [("a", 1), ("b", 2)], "topic string, partition int")
    assert frame._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LocalRelation"
    before = set(tracker.getJobIdsForGroup(None))  # ids: the tracker keeps only the last 1,000
    assert [tuple(r) for r in frame.collect()] == [("a", 1), ("b", 2)]
    assert set(tracker.getJobIdsForGroup(None)) <= before  # a Python RDD would run a job here
    assert frame.schema.simpleString() == "struct<topic:string,partition:int>"

    # broadcast into a join: scanned in the JVM (a Python RDD's scan starts Python workers)
    wanted = spark.range(6).select(F.lit("a").alias("topic"), F.col("id").cast("int").alias("partition"))
    joined = wanted.join(F.broadcast(frame), ["topic", "partition"], "left_semi")
    assert [r["partition"] for r in joined.collect()] == [1]
    assert "LocalTableScan" in joined._jdf.queryExecution().executedPlan().toString()

    empty = empty_frame(spark, "topic string, partition int")
    assert empty.collect() == [] and empty.columns == ["topic", "partition"]
    with pytest.raises(ValueError, match="rows of 1 values for 2 columns"):
        local_frame(spark, [("a",)], "topic string, partition int")


def test_local_copy_holds_a_frames_rows_with_their_size_known(spark: SparkSession) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from jobs.platform.tables import local_copy

    schema = StructType.fromDDL("topic string, partition int")
    built = (  # estimated as the million rows it filters, and a self-join multiplies that
        spark.range(1_000_000)
        .where("id < 3")
        .select(F.lit("t").alias("topic"), F.col("id").cast("int").alias("partition"))
    )
    joined = built.join(built.select("partition"), "partition").select("topic", "partition")
    copy = local_copy(spark, joined, schema)
    assert copy._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LocalRelation"
    assert sorted(tuple(r) for r in copy.collect()) == [("t", 0), ("t", 1), ("t", 2)]
    assert copy._jdf.queryExecution().optimizedPlan().stats().sizeInBytes() < 1_000
    assert joined._jdf.queryExecution().optimizedPlan().stats().sizeInBytes() > 10**12


def test_tables_are_checkpointed_every_hundred_commits(spark: SparkSession, tmp_path: Path) -> None:
    """Not every 10th, Delta's default: a batch's commits would checkpoint its tables together."""
    from jobs.platform.tables import CHECKPOINT_INTERVAL

    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledger_trims"])
    log_dir = Path(table_path(warehouse, "ledger_trims")) / "_delta_log"
    created = commit_actions(warehouse, "ledger_trims")[0]
    metadata = next(a["metaData"] for a in created if "metaData" in a)
    assert metadata["configuration"]["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL) == "100"
    for _ in range(10):
        append_rows(spark, warehouse, "ledger_trims", [ROW])
    assert latest_version(spark, warehouse, "ledger_trims") == 10
    assert not list(log_dir.glob("*.checkpoint*.parquet"))  # Delta's default would write one here


def test_tables_made_side_by_side_are_each_made_once_with_their_schema_and_clustering(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Four at a time (``TABLE_THREADS``): each table's first commit holds its own schema and
    clustering, the names come back in ``TABLES`` order, and a warehouse that lacks some tables
    gets only those."""
    warehouse = str(tmp_path / "wh")
    assert ensure_tables(spark, warehouse) == list(TABLES)
    for name, schema in TABLES.items():
        actions = commit_actions(warehouse, name)
        assert len(actions) == 1, name  # one commit: created once
        metadata = next(a["metaData"] for a in actions[0] if "metaData" in a)
        assert [f["name"] for f in json.loads(metadata["schemaString"])["fields"]] == schema.names, name
        domains = [a["domainMetadata"] for a in actions[0] if "domainMetadata" in a]
        clustering = next(
            json.loads(d["configuration"]) for d in domains if d["domain"] == "delta.clustering"
        )
        assert [column[0] for column in clustering["clusteringColumns"]] == list(TABLE_CLUSTERING[name])
    gone = ["pending_acks", "cursors"]
    for name in gone:
        shutil.rmtree(table_path(warehouse, name))
    assert ensure_tables(spark, warehouse) == [name for name in TABLES if name in gone]
    assert ensure_tables(spark, warehouse) == []


def _first_commit(warehouse: str, name: str) -> dict[str, object]:
    """A table's first commit and checksum, without what is new in every table (ids, times)."""
    actions = {next(iter(a)): next(iter(a.values())) for a in commit_actions(warehouse, name)[0]}
    log_dir = Path(table_path(warehouse, name)) / "_delta_log"
    checksum = json.loads((log_dir / "00000000000000000000.crc").read_text())
    for drop, where in (
        (("timestamp", "txnId"), actions["commitInfo"]),
        (("id", "createdTime"), actions["metaData"]),
        (("txnId",), checksum),
        (("id", "createdTime"), checksum["metadata"]),
    ):
        for key in drop:
            assert where.pop(key), (name, key)  # each is there, and only it differs
    return {"actions": actions, "checksum": checksum}


def _builder_calls(monkeypatch: pytest.MonkeyPatch, store: Path) -> list[str]:
    """The tables Delta's table builder creates from now on in this test, which starts with no
    model of any table (``jobs.platform.new_tables``) and keeps its models in ``store``."""
    from delta.tables import DeltaTableBuilder

    from jobs.platform import new_tables

    monkeypatch.setattr(new_tables, "model_store", lambda: store)
    new_tables.forget_models()
    calls: list[str] = []
    execute = DeltaTableBuilder.execute

    def counted(builder: DeltaTableBuilder) -> object:
        calls.append(str(builder._jbuilder.toString()))
        return execute(builder)

    monkeypatch.setattr(DeltaTableBuilder, "execute", counted)
    return calls


def test_a_table_made_like_the_builders_first_is_the_same_table(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first warehouse goes through Delta's builder; the next one's tables are committed as
    its first commits say (``NewTable``): the same actions, the same checksum, the same
    ``CREATE TABLE`` in the history, with ids and times of their own, and no builder."""
    built = _builder_calls(monkeypatch, tmp_path / "models")
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    assert ensure_tables(spark, first) == list(TABLES)
    assert len(built) == len(TABLES)
    assert ensure_tables(spark, second) == list(TABLES)
    assert len(built) == len(TABLES)  # none more
    for name in TABLES:
        assert _first_commit(second, name) == _first_commit(first, name), name
        ids = {commit_actions(w, name)[0][1]["metaData"]["id"] for w in (first, second)}
        assert len(ids) == 2, name  # each table its own id
    assert ensure_tables(spark, second) == []  # and it is a Delta table like any other
    append_rows(spark, second, "ledger_trims", [ROW])
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path(second, 'ledger_trims')}`")
    assert [r["operation"] for r in history.orderBy("version").collect()] == ["CREATE TABLE", "WRITE"]


def test_a_new_process_creates_its_tables_from_the_stored_models(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The models are kept on disk: a process that has made none of its own (here: this one,
    its models dropped) creates its tables from them, as the builder made them; a stored model
    that cannot be read is made again by the builder, and stored again."""
    from jobs.platform import new_tables

    store = tmp_path / "models"
    built = _builder_calls(monkeypatch, store)
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    ensure_tables(spark, first, ["cursors", "ledger_trims"])
    assert len(built) == 2 and len(list(store.glob("*.json"))) == 2
    new_tables.forget_models(stored=False)  # as a new process starts
    ensure_tables(spark, second, ["cursors", "ledger_trims"])
    assert len(built) == 2
    for name in ("cursors", "ledger_trims"):
        assert _first_commit(second, name) == _first_commit(first, name), name

    new_tables.forget_models(stored=False)
    for stored in store.glob("*.json"):
        stored.write_text("{not json")
    third = str(tmp_path / "third")
    ensure_tables(spark, third, ["ledger_trims"])
    assert len(built) == 3
    assert _first_commit(third, "ledger_trims") == _first_commit(first, "ledger_trims")
    assert sum(1 for stored in store.glob("*.json") if stored.read_text().startswith('{"protocol"')) == 1


def test_a_table_another_writer_made_after_the_check_is_found_not_made_again(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The location was free when looked at and holds a table when the commit starts (another
    writer was quicker): nothing is committed, and the table is checked as one that existed."""
    from jobs.platform import locations

    built = _builder_calls(monkeypatch, tmp_path / "models")
    warehouse = str(tmp_path / "wh")
    assert ensure_tables(spark, warehouse, ["ledger_trims"]) == ["ledger_trims"]
    monkeypatch.setattr(locations, "exists", lambda location: False)
    assert ensure_tables(spark, warehouse, ["ledger_trims"]) == []
    assert len(commit_actions(warehouse, "ledger_trims")) == 1 and len(built) == 1


def test_a_change_of_delta_settings_sends_the_next_table_through_the_builder(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model serves only the settings it was made under: with a table property default set,
    the builder makes the table (and it carries the property), and so becomes the model for
    those settings; a location that exists already goes to the builder too."""
    built = _builder_calls(monkeypatch, tmp_path / "models")
    ensure_tables(spark, str(tmp_path / "plain"), ["ledger_trims"])
    assert len(built) == 1
    key = "spark.databricks.delta.properties.defaults.enableChangeDataFeed"
    spark.conf.set(key, "true")
    try:
        for i in range(2):
            ensure_tables(spark, str(tmp_path / f"feed{i}"), ["ledger_trims"])
            metadata = commit_actions(str(tmp_path / f"feed{i}"), "ledger_trims")[0][1]["metaData"]
            assert metadata["configuration"]["delta.enableChangeDataFeed"] == "true"
        assert len(built) == 2  # the second was made like the first
    finally:
        spark.conf.unset(key)
    ensure_tables(spark, str(tmp_path / "plain-again"), ["ledger_trims"])
    assert len(built) == 2  # the model of the plain settings still serves
    metadata = commit_actions(str(tmp_path / "plain-again"), "ledger_trims")[0][1]["metaData"]
    assert "delta.enableChangeDataFeed" not in metadata["configuration"]

    there = tmp_path / "there"
    Path(table_path(str(there), "ledger_trims")).mkdir(parents=True)
    ensure_tables(spark, str(there), ["ledger_trims"])
    assert len(built) == 3  # the builder decides what an existing location means


def _checkpointed_rdd(frame: DataFrame) -> int:
    return frame._jdf.queryExecution().analyzed().rdd().id()  # type: ignore[attr-defined]


def test_release_frees_a_checkpoints_blocks_and_nothing_else(spark: SparkSession) -> None:
    freed = spark.range(1000).selectExpr("id * 2 AS y").localCheckpoint(eager=True)
    kept = spark.range(1000).localCheckpoint(eager=True)
    cached = spark.range(100).selectExpr("id + 1 AS z").persist()
    assert cached.count() == 100
    before = cached_rdds(spark)
    assert {_checkpointed_rdd(freed), _checkpointed_rdd(kept)} <= before

    for frame in (freed, cached, spark.range(3)):  # a cached frame and a plain one: no-ops
        release(frame)
    after = cached_rdds_when(spark, lambda cached: _checkpointed_rdd(freed) not in cached)
    assert after == before - {_checkpointed_rdd(freed)}
    assert kept.count() == 1000 and cached.count() == 100
    cached.unpersist()
