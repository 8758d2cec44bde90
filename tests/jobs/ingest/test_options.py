"""``IngestOptions`` from ``--conf``: settings that change how a batch runs, not what it writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.ingest.options import IngestOptions, interpreted_rows, single_partition_rows, write_mode
from jobs.platform.config import ConfigError, load_config
from jobs.platform.errors import IngestError


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
