"""The ``ackstate`` entry point: its commands, exit codes and one-line errors (no JVM needed)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from jobs import cli
from jobs.cli import COMMANDS, Command, main
from jobs.platform.errors import SparkUnavailableError
from jobs.platform.java import QUICK_JIT

CONTRACT_COMMANDS = [
    "setup",
    "demo",
    "init",
    "ingest",
    "compact",
    "stats",
    "internal-stats",
    "generate",
    "bench",
    "sql",
]


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in CONTRACT_COMMANDS:
        assert f"    {name} " in out or f"    {name}\n" in out


def test_every_subcommand_takes_warehouse_and_conf(capsys: pytest.CaptureFixture[str]) -> None:
    for name in CONTRACT_COMMANDS:
        assert main([name, "--help"]) == 0
        out = capsys.readouterr().out
        assert "--warehouse PATH" in out
        assert "--conf FILE" in out


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_no_command_prints_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: ackstate" in capsys.readouterr().err


def test_contract_options_parse() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(
        [
            "ingest",
            "--source",
            "in",
            "--format",
            "delta",
            "--trigger",
            "continuous",
            "--processing-time",
            "5 seconds",
            "--checkpoint",
            "cp",
            "--max-files-per-trigger",
            "3",
        ]
    )
    assert (args.source, args.format, args.trigger, args.processing_time) == (
        "in",
        "delta",
        "continuous",
        "5 seconds",
    )
    assert (args.checkpoint, args.max_files_per_trigger) == ("cp", 3)
    args = parser.parse_args(
        ["internal-stats", "--topic", "persistent://t/ns/x", "--subscription", "s", "--as-of", "3"]
    )
    assert (args.topic, args.subscription, args.as_of) == ("persistent://t/ns/x", "s", "3")
    args = parser.parse_args(
        [
            "generate",
            "--out",
            "o",
            "--events",
            "10",
            "--topics",
            "1",
            "--partitions",
            "3",
            "--subscriptions",
            "2",
            "--malformed-rate",
            "0.1",
            "--seed",
            "7",
        ]
    )
    assert (args.events, args.topics, args.partitions, args.subscriptions) == (10, 1, 3, 2)
    assert (args.malformed_rate, args.seed) == (0.1, 7)
    args = parser.parse_args(["bench", "--engine", "--dedup", "--runs", "3", "--quick"])
    assert (args.engine, args.ingest, args.dedup, args.runs, args.quick) == (True, False, True, 3, True)
    args = parser.parse_args(["demo", "--events", "1000", "--out", "ev"])
    assert (args.events, args.out) == (1000, "ev")


def test_missing_command_module_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(COMMANDS, "bench", Command("jobs.no_such_module:run", "x"))
    assert main(["bench"]) == 2
    assert capsys.readouterr().err == "ackstate bench: not available in this build\n"


def test_handler_gets_resolved_config_and_warehouse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[argparse.Namespace] = []
    module = types.ModuleType("ackstate_fake_command")
    module.run = lambda args: seen.append(args) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ackstate_fake_command", module)
    monkeypatch.setitem(COMMANDS, "stats", Command("ackstate_fake_command:run", "x"))
    monkeypatch.chdir(tmp_path)
    assert main(["stats", "--topic", "persistent://t/ns/x"]) == 0
    assert seen[0].warehouse == str(tmp_path / "warehouse")
    assert seen[0].config.settings.max_unacked_messages_per_consumer == 50000


@pytest.mark.parametrize(
    ("command", "quick_jit", "interpreted"),
    [
        ("stats", True, True),
        ("internal-stats", True, True),
        ("init", True, True),
        ("sql", True, False),
        ("report", True, False),
        ("ingest", False, False),
        ("compact", False, False),
    ],
)
def test_short_lived_commands_start_a_quick_session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str, quick_jit: bool, interpreted: bool
) -> None:
    """The ``[spark]`` settings a command's session gets: the C1 JIT alone for a short-lived
    command, interpreted expressions for the three that run a few fixed queries; a user's own
    setting of either codegen key stands for both."""
    seen: list[dict[str, str]] = []
    module = types.ModuleType("ackstate_fake_command")
    module.run = lambda args: seen.append(dict(args.config.spark)) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ackstate_fake_command", module)
    monkeypatch.setitem(COMMANDS, command, Command("ackstate_fake_command:run", "x"))
    argv = {"ingest": ["--source", "in"], "sql": ["SELECT 1"]}.get(command, [])
    assert main([command, *argv, "--warehouse", str(tmp_path)]) == 0
    assert (seen[0].get("spark.driver.extraJavaOptions") == QUICK_JIT) is quick_jit
    assert {k: seen[0][k] for k in cli.INTERPRETED_QUERIES.keys() & seen[0].keys()} == (
        cli.INTERPRETED_QUERIES if interpreted else {}
    )

    own = tmp_path / "own.toml"
    own.write_text('[spark]\n"sql.codegen.wholeStage" = "true"\n')
    assert main([command, *argv, "--warehouse", str(tmp_path), "--conf", str(own)]) == 0
    assert seen[1].get("spark.sql.codegen.wholeStage") == "true"
    assert "spark.sql.codegen.factoryMode" not in seen[1]


def test_ackstate_errors_are_one_line_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise SparkUnavailableError("Java was not found: install a JDK 17 and set JAVA_HOME")

    module = types.ModuleType("ackstate_failing_command")
    module.run = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ackstate_failing_command", module)
    monkeypatch.setitem(COMMANDS, "compact", Command("ackstate_failing_command:run", "x"))
    assert main(["compact"]) == 2
    assert capsys.readouterr().err == (
        "ackstate: error: Java was not found: install a JDK 17 and set JAVA_HOME\n"
    )


def test_bad_conf_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    assert main(["setup", "--conf", str(missing)]) == 2
    assert capsys.readouterr().err == f"ackstate: error: --conf {missing}: no such file\n"


def test_setup_is_idempotent_when_the_cache_is_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.platform import setup
    from jobs.platform.localfs import localfs_jar

    # the class archive of a cache this complete is there too (tests/jobs/platform/test_cds.py
    # checks the real one); these jars are ten bytes and start no JVM
    archive = tmp_path / "cds" / "driver-0.jsa"
    monkeypatch.setattr(setup, "ensure_archive", lambda *args, **kwargs: (archive, None))
    directory = tmp_path / "delta-spark_4.1_2.13-4.4.0"
    directory.mkdir()
    (directory / "delta-spark_4.1_2.13-4.4.0.jar").write_bytes(b"0" * 10)
    manifest = {
        "coordinate": "io.delta:delta-spark_4.1_2.13:4.4.0",
        "resolver": "maven",
        "jars": ["delta-spark_4.1_2.13-4.4.0.jar"],
    }
    (directory / "ackstate-jars.json").write_text(json.dumps(manifest))
    # the local file system's classes are compiled into this cache once (jobs.platform.localfs)
    for run in ("compiled in ", "already there"):
        assert main(["setup", "--jars-dir", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        delta, localfs, cds = out.splitlines()
        coordinate = "io.delta:delta-spark_4.1_2.13:4.4.0"
        assert delta.startswith(f"ackstate setup: Delta Lake jars {coordinate} already in ")
        jar = localfs_jar(tmp_path)
        what = f"ackstate setup: local file system without a process per file operation {jar} "
        assert localfs.startswith(what + run), localfs
        assert jar.is_file()
        assert cds == f"ackstate setup: class archive for the Spark driver {archive} already there"


def test_runs_as_python_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    assert "internal-stats" in result.stdout


@pytest.mark.parametrize(
    ("how", "command"),
    [
        (["-m", "jobs.ingest"], "ingest"),
        (["-m", "jobs.compact"], "compact"),
        # as spark-submit runs them: files, with their own directory first on sys.path
        (["jobs/ingest/__main__.py"], "ingest"),
        (["jobs/compact/__main__.py"], "compact"),
        (["jobs/read/stats.py"], "stats"),
        (["jobs/read/sql.py"], "sql"),
        (["jobs/read/report.py"], "report"),
    ],
)
def test_the_spark_submit_entry_points_run_as_files_and_modules(
    repo_root: Path, how: list[str], command: str
) -> None:
    result = subprocess.run(
        [sys.executable, *how, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=repo_root,
    )
    assert result.returncode == 0, result.stderr
    assert f"usage: ackstate {command}" in result.stdout
    assert "--warehouse" in result.stdout


@pytest.mark.parametrize(
    ("argv", "conf", "expected"),
    [
        ([], "", False),
        (["--implicit-consumers"], "", True),
        ([], "[ingest]\nimplicit_consumers = true\n", True),
    ],
)
def test_implicit_consumers_reach_the_engine_settings(
    tmp_path: Path, argv: list[str], conf: str, expected: bool
) -> None:
    """The flag, else ``[ingest] implicit_consumers``, is what the engine obeys."""
    from jobs.ingest.query import command_settings
    from jobs.platform.config import load_config

    path = tmp_path / "a.toml"
    path.write_text(conf)
    args = cli.build_parser().parse_args(["ingest", "--source", "in", *argv])
    args.config = load_config(str(path))
    assert command_settings(args).implicit_consumers is expected
