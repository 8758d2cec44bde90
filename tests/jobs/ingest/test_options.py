"""``IngestOptions`` from ``--conf``: settings that change how a batch runs, not what it writes."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from jobs.cli import main
from jobs.ingest.options import IngestOptions, interpreted_rows, single_partition_rows, write_mode
from jobs.ingest.query import SHORT_INGEST_BYTES, is_short_ingest
from jobs.platform.config import ConfigError, load_config
from jobs.platform.errors import IngestError
from jobs.platform.java import QUICK_JIT


def _conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ackstate.toml"
    path.write_text(text)
    return path


def test_small_batches_run_interpreted_up_to_interpreted_rows(tmp_path: Path) -> None:
    assert interpreted_rows(load_config()) == IngestOptions.interpreted_rows == 50_000
    assert interpreted_rows(load_config(_conf(tmp_path, "[ingest]\ninterpreted_rows = 5\n"))) == 5
    options = IngestOptions(source="s", warehouse="w", interpreted_rows=5)
    assert [options.interpreted(n) for n in (0, 1, 5, 6)] == [False, True, True, False]
    never = IngestOptions(source="s", warehouse="w", interpreted_rows=0)
    assert not never.interpreted(1)


def test_interpreted_rows_must_be_a_count(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"interpreted_rows = -1: use 0 \(never\)"):
        interpreted_rows(load_config(_conf(tmp_path, "[ingest]\ninterpreted_rows = -1\n")))
    with pytest.raises(ConfigError, match="interpreted_rows"):
        load_config(_conf(tmp_path, '[ingest]\ninterpreted_rows = "many"\n'))


def test_small_batches_run_in_one_partition_up_to_single_partition_rows(tmp_path: Path) -> None:
    assert single_partition_rows(load_config()) == IngestOptions.single_partition_rows == 10_000
    conf = _conf(tmp_path, "[ingest]\nsingle_partition_rows = 5\n")
    assert single_partition_rows(load_config(conf)) == 5
    options = IngestOptions(source="s", warehouse="w", single_partition_rows=5)
    assert [options.single_partition(n) for n in (0, 1, 5, 6)] == [False, True, True, False]
    assert not IngestOptions(source="s", warehouse="w", single_partition_rows=0).single_partition(1)
    with pytest.raises(IngestError, match=r"single_partition_rows = -1: use 0 \(never\)"):
        single_partition_rows(load_config(_conf(tmp_path, "[ingest]\nsingle_partition_rows = -1\n")))
    with pytest.raises(ConfigError, match="single_partition_rows"):
        load_config(_conf(tmp_path, '[ingest]\nsingle_partition_rows = "many"\n'))


def test_write_mode_is_rewrite_unless_merge_is_asked_for(tmp_path: Path) -> None:
    assert write_mode(load_config()) == IngestOptions.write_mode == "rewrite"
    assert write_mode(load_config(_conf(tmp_path, '[ingest]\nwrite_mode = "merge"\n'))) == "merge"
    with pytest.raises(IngestError, match=r"write_mode = 'append': use one of rewrite, merge"):
        write_mode(load_config(_conf(tmp_path, '[ingest]\nwrite_mode = "append"\n')))


def test_a_short_ingest_is_available_now_over_a_small_local_directory(tmp_path: Path) -> None:
    """Only a run known to end soon gets the C1 compiler alone (``SHORT_INGEST_BYTES``)."""
    source = tmp_path / "events"
    source.mkdir()
    (source / "a.jsonl").write_bytes(b"{}\n" * 10)
    short = IngestOptions(source=str(source), warehouse="w")
    assert is_short_ingest(short)
    assert not is_short_ingest(replace(short, trigger="continuous"))
    assert not is_short_ingest(replace(short, format="delta"))
    assert not is_short_ingest(replace(short, source="s3a://bucket/events"))
    # Spark's file source skips `_` and `.` directories (its own metadata): so does the count
    metadata = source / "_spark_metadata"
    metadata.mkdir()
    (metadata / "0").touch()
    os.truncate(metadata / "0", SHORT_INGEST_BYTES + 1)  # sparse: its size, not its blocks
    assert is_short_ingest(short)
    (source / "b.jsonl").touch()
    os.truncate(source / "b.jsonl", SHORT_INGEST_BYTES)
    assert not is_short_ingest(short)


@pytest.mark.parametrize(
    ("argv", "conf", "quick"),
    [
        (["--trigger", "available-now"], "", True),
        (["--trigger", "continuous"], "", False),
        (["--trigger", "available-now"], '[spark]\n"driver.extraJavaOptions" = "-Xss4m"\n', False),
    ],
)
def test_the_ingest_command_starts_a_short_ingest_with_c1_alone(
    session_requests: list[dict[str, str]], tmp_path: Path, argv: list[str], conf: str, quick: bool
) -> None:
    """What ``ackstate ingest`` asks of the session it starts; the user's driver options win."""
    source = tmp_path / "events"
    source.mkdir()
    own = ["--conf", str(_conf(tmp_path, conf))] if conf else []
    assert main(["ingest", "--source", str(source), "--warehouse", str(tmp_path / "w"), *argv, *own]) == 2
    options = session_requests[0].get("spark.driver.extraJavaOptions")
    assert (options == QUICK_JIT) is quick
