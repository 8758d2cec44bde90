"""The broker's class archive: ``ackstate setup --pulsar`` dumps it, and a broker maps it.

A broker that silently started without it would still pass every other test, only slower: this
one fails instead, so a broken dump (or a launch that stopped adding the archive) is seen.
"""

from __future__ import annotations

from pathlib import Path

from jobs.platform.broker import StandaloneBroker, broker_archive_path


def test_a_broker_maps_the_archive_the_setup_dumped(tmp_path: Path) -> None:
    archive = broker_archive_path()
    assert archive.is_file(), f"no broker class archive at {archive}: `ackstate setup --pulsar` dumps it"
    with StandaloneBroker(tmp_path / "broker", quick_jit=True) as local:
        assert local.process is not None
        maps = Path(f"/proc/{local.process.pid}/maps").read_text()
        assert local.admin("/admin/v2/clusters") == ["standalone"]
    assert str(archive) in maps, "the broker's JVM did not map its class archive"
