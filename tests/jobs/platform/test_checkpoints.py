"""The heartbeat a running ingest keeps in its warehouse, which `ackstate compact` reads on S3."""

from __future__ import annotations

import time
from pathlib import Path

from jobs.platform import checkpoints
from jobs.platform.checkpoints import LIVE_WITHIN_SECONDS, HeartbeatThread, beat, live_ingests, stop_beating


def test_a_fresh_heartbeat_is_live_and_an_old_or_removed_one_is_not(tmp_path: Path) -> None:
    now = 1_000_000.0
    beat(tmp_path, "app-a", 5, now=now)
    beat(tmp_path, "app-b", 0, now=now - LIVE_WITHIN_SECONDS - 1)  # left by a killed driver
    (tmp_path / "_checkpoints" / "_live" / "garbled.json").write_text("{")
    [live] = live_ingests(tmp_path, now=now + 1)
    assert (live.app_id, live.at, live.compact_every) == ("app-a", now, 5)
    stop_beating(tmp_path, "app-a")
    assert live_ingests(tmp_path, now=now + 1) == []
    stop_beating(tmp_path, "app-a")  # twice is fine


def test_the_thread_beats_while_the_query_runs_and_removes_its_heartbeat_after(tmp_path: Path) -> None:
    running = [True]
    thread = HeartbeatThread(str(tmp_path), "app-t", 2, lambda: running[0])
    thread.start()
    location = Path(checkpoints.heartbeat_location(tmp_path, "app-t"))
    deadline = time.monotonic() + 10
    while not location.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [b.app_id for b in live_ingests(tmp_path)] == ["app-t"]
    running[0] = False
    thread.join(timeout=5)
    assert not thread.is_alive() and not location.exists()
