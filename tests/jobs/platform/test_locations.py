"""Locations: a URI is never taken for a local path, and the commands that write locally say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.cli import main
from jobs.ingest.options import IngestOptions
from jobs.platform import checkpoints, locations
from jobs.platform.errors import LocationError
from jobs.platform.tables import table_path


@pytest.mark.parametrize(
    "uri",
    [
        "s3a://bucket/wh",
        "s3://bucket/wh",
        "gs://bucket/a/b",
        "abfss://c@acct.dfs.core.windows.net/wh",
        "hdfs://namenode:8020/wh",
    ],
)
def test_a_uri_is_kept_as_written_and_joined_with_slashes(uri: str) -> None:
    assert locations.is_uri(uri)
    assert locations.resolve(uri + "/") == uri
    assert table_path(uri, "cursors") == uri + "/cursors"
    assert locations.join(uri, "_checkpoints", "ingest-1") == uri + "/_checkpoints/ingest-1"


def test_a_local_path_or_file_uri_becomes_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert locations.resolve("wh") == str(tmp_path / "wh")
    assert locations.resolve(f"file:{tmp_path}/a%20b") == str(tmp_path / "a b")
    assert locations.resolve(f"file://{tmp_path}/x") == str(tmp_path / "x")
    assert not locations.is_uri(f"file:{tmp_path}") and not locations.is_uri("C:/data")
    assert locations.is_within(tmp_path / "wh" / "_checkpoints" / "x", "wh/_checkpoints")
    assert not locations.is_within("s3a://b/wh2/x", "s3a://b/wh")


def test_ingest_locations_of_a_uri_warehouse_stay_uris() -> None:
    options = IngestOptions(source="s3a://bucket/events", warehouse="s3a://bucket/wh")
    assert options.source_id == "s3a://bucket/events"
    assert options.checkpoint_path.startswith("s3a://bucket/wh/_checkpoints/ingest-")
    assert (
        IngestOptions(source="s3a://b/e", warehouse="s3a://b/wh", checkpoint="gs://other/cp/").checkpoint_path
        == "gs://other/cp"
    )


def test_checkpoint_registry_and_batches_on_local_disk(tmp_path: Path) -> None:
    warehouse, outside = tmp_path / "wh", tmp_path / "cp"
    checkpoints.register(warehouse, "app-1", outside)
    checkpoints.register(warehouse, "app-in", warehouse / "_checkpoints" / "ingest-abc")
    entries = list((warehouse / "_checkpoints" / "_registry").iterdir())
    assert [e.name for e in entries] == ["app-1.json"]
    assert json.loads(entries[0].read_text())["checkpoint"] == str(outside)
    (warehouse / "_checkpoints" / "ingest-abc" / "offsets").mkdir(parents=True)
    (warehouse / "_checkpoints" / "ingest-abc" / "offsets" / "0").write_text("")
    (warehouse / "_checkpoints" / "ingest-abc" / "offsets" / "1").write_text("")
    (warehouse / "_checkpoints" / "ingest-abc" / "commits").mkdir()
    (warehouse / "_checkpoints" / "ingest-abc" / "commits" / "0").write_text("")
    assert checkpoints.registered(warehouse) == sorted(
        [str(outside), str(warehouse / "_checkpoints" / "ingest-abc")]
    )
    [running] = checkpoints.running_batches(warehouse)
    assert (running.checkpoint, running.batch_id) == (str(warehouse / "_checkpoints" / "ingest-abc"), 1)
    assert not running.finished()


def test_a_uri_without_a_spark_session_is_refused_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The suite's shared session may be running (and configured for S3 by tests/s3): the
    # refusal is about a process that has none.
    monkeypatch.setattr("jobs.platform.java.running_session", lambda: None)
    with pytest.raises(LocationError, match="needs a running Spark session"):
        locations.exists("s3a://bucket/wh/_checkpoints")


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (
            ["demo", "--warehouse", "s3a://bucket/wh"],
            "the warehouse must be a local path for `ackstate demo`",
        ),
        (["generate", "--out", "s3a://bucket/events"], "--out must be a local path for `ackstate generate`"),
    ],
)
def test_commands_that_write_locally_refuse_a_uri(
    argv: list[str], what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert what in err and "s3a://bucket/" in err


def test_holds_at_most_counts_the_files_under_a_local_directory(tmp_path: Path) -> None:
    assert locations.holds_at_most(tmp_path / "missing", 0)
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "_meta").mkdir()
    (tmp_path / "_meta" / "b").write_bytes(b"x" * 10)
    assert locations.holds_at_most(tmp_path, 20) and not locations.holds_at_most(tmp_path, 19)
    assert locations.holds_at_most(tmp_path, 10, skip_hidden=True)
    assert not locations.holds_at_most("s3a://bucket/wh", 2**60)  # not listed: not known small
