"""The Pulsar cache entries of ``ackstate setup --pulsar``: complete, current, or named as missing."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from jobs.platform import broker
from jobs.platform.broker import find_interceptor_nar, find_pulsar_lib
from jobs.platform.errors import PulsarSetupError
from jobs.platform.java import QUICK_JIT
from jobs.platform.maven import MANIFEST


def _entry(directory: Path, files: list[str], source: str | None = None) -> None:
    directory.mkdir(parents=True)
    for name in files:
        (directory / name).write_bytes(b"x")
    (directory / MANIFEST).write_text(json.dumps({"files": files, "source": source}))


def test_missing_broker_jars_name_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(PulsarSetupError, match=r"ackstate setup --pulsar"):
        find_pulsar_lib(tmp_path)


def test_a_jar_gone_from_the_cache_makes_it_incomplete(tmp_path: Path) -> None:
    lib = broker.pulsar_lib(tmp_path)
    _entry(lib, ["a.jar", "b.jar"])
    assert find_pulsar_lib(tmp_path) == lib
    (lib / "b.jar").unlink()
    with pytest.raises(PulsarSetupError):
        find_pulsar_lib(tmp_path)


def test_a_nar_built_from_other_sources_counts_as_missing(tmp_path: Path) -> None:
    """Tests must never run a broker with a plugin older than interceptor/."""
    current = broker.interceptor_source_digest()
    assert current is not None, "interceptor/ is part of the checkout"
    _entry(broker.interceptor_dir(tmp_path), ["ackstate-interceptor.nar"], source="older")
    with pytest.raises(PulsarSetupError, match="older than interceptor/"):
        find_interceptor_nar(tmp_path)
    (broker.interceptor_dir(tmp_path) / MANIFEST).write_text(
        json.dumps({"files": ["ackstate-interceptor.nar"], "source": current})
    )
    assert find_interceptor_nar(tmp_path).name == "ackstate-interceptor.nar"


def test_log_warnings_keeps_the_last_kinds_of_warning_and_error(tmp_path: Path) -> None:
    """What a failed judge reports of the broker: its WARN and ERROR lines, newest last, a line
    repeated but for its time and numbers once with its count."""
    local = broker.StandaloneBroker(tmp_path)
    assert local.log_warnings() == ""
    local.log_file.write_text(
        "2026-12-01T20:00:06 - INFO  - [main] - started\n"
        "2026-12-01T20:00:07 - WARN  - [bk] - Ledger: 13  fenced\n"
        "2026-12-01T20:00:08 - ERROR - [bk] - bookie died\n"
        "2026-12-01T20:00:09 - WARN  - [client-43-1] - Failed to resolve 127.0.0.1\n"
        "2026-12-01T20:00:10 - WARN  - [web] - slow load\n"
        "2026-12-01T20:00:11 - WARN  - [client-44-1] - Failed to resolve 127.0.0.1\n"
    )
    assert local.log_warnings(most=3).splitlines() == [
        "2026-12-01T20:00:08 - ERROR - [bk] - bookie died",
        "2026-12-01T20:00:10 - WARN  - [web] - slow load",
        "2026-12-01T20:00:11 - WARN  - [client-44-1] - Failed to resolve 127.0.0.1 (x2)",
    ]


def test_an_admin_call_waits_only_its_timeout_for_an_answer(tmp_path: Path) -> None:
    """``start`` polls with what is left of its own deadline: a broker that accepts the
    connection and never answers must not hold it for ``ADMIN_TIMEOUT_SECONDS``."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        local = broker.StandaloneBroker(tmp_path, web_port=silent.getsockname()[1])
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            local.admin("/admin/v2/namespaces/public", quiet=True, timeout=0.5)
        assert time.monotonic() - began < 10 < broker.ADMIN_TIMEOUT_SECONDS


def test_a_broker_maps_the_archive_unless_its_options_choose(tmp_path: Path) -> None:
    """The archive is added when it exists; a launch that dumps one (the setup's) gets none."""
    local = broker.StandaloneBroker(tmp_path / "b", jars_dir=tmp_path)
    assert not any("SharedArchiveFile" in option for option in local.launch_options())
    archive = broker.broker_archive_path(tmp_path)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"x")
    assert f"-XX:SharedArchiveFile={archive}" in local.launch_options()
    dumping = broker.StandaloneBroker(
        tmp_path / "d", jars_dir=tmp_path, java_options=("-XX:ArchiveClassesAtExit=/x.jsa",)
    )
    assert dumping.launch_options() == ["-XX:ArchiveClassesAtExit=/x.jsa"]
    quick = broker.StandaloneBroker(tmp_path / "q", jars_dir=tmp_path, quick_jit=True)
    assert QUICK_JIT in quick.launch_options()


def test_the_archive_of_other_jars_is_not_found(tmp_path: Path) -> None:
    """An archive fits one class path: jars changed by a new setup name another archive."""
    _entry(broker.pulsar_lib(tmp_path), ["a.jar", "b.jar"])
    before = broker.broker_archive_path(tmp_path)
    assert before == broker.broker_archive_path(tmp_path)
    (broker.pulsar_lib(tmp_path) / "b.jar").write_bytes(b"longer")
    assert broker.broker_archive_path(tmp_path) != before
