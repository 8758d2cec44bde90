"""The ingest queries' streaming checkpoints, read from outside the query.

Structured Streaming writes ``offsets/<N>`` before it runs micro-batch ``N`` and
``commits/<N>`` after ``foreachBatch`` returned, so a checkpoint tells, without talking to the
query, whether a batch is under way (or was interrupted): an offsets file with no commit. Two
jobs need that:

* the ingest, at start, to know whether its first batch repeats one an earlier run began (only
  then can tables hold part of it, ``jobs.ingest.batch.BatchWriter``);
* ``ackstate compact``, before a ledger trim, to wait for the batches that were running when it
  asked for the trim (``jobs.compact.compaction.LedgerTrimmer``).

Checkpoints live under the warehouse (``_checkpoints/ingest-*``) unless ``--checkpoint`` puts
them elsewhere; those are registered under the warehouse (``_checkpoints/_registry``), so
compact finds every one.

A running ingest also keeps a heartbeat there (``_checkpoints/_live/<app id>.json``, rewritten
every ``HEARTBEAT_SECONDS``, removed when the query stops): on S3, where Delta's log store lets
only one application commit safely, ``ackstate compact`` refuses while one is fresh.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.platform import locations

log = logging.getLogger("ackstate.checkpoints")

CHECKPOINTS_DIR = "_checkpoints"
REGISTRY_DIR = "_registry"


def default_root(warehouse: str | Path) -> str:
    return locations.join(warehouse, CHECKPOINTS_DIR)


def register(warehouse: str | Path, app_id: str, checkpoint: str | Path) -> None:
    """Record that ``app_id`` writes this warehouse from ``checkpoint`` (idempotent). Only a
    checkpoint outside the warehouse is recorded: one inside is found where it is, and a copy of
    the warehouse then points at its own checkpoints, not at the original's."""
    root = default_root(warehouse)
    if locations.is_within(checkpoint, root):
        return
    entry = locations.join(root, REGISTRY_DIR, f"{app_id}.json")
    text = json.dumps({"app_id": app_id, "checkpoint": locations.resolve(checkpoint)})
    if not locations.exists(entry) or locations.read_text(entry) != text:
        locations.write_text(entry, text)


def registered(warehouse: str | Path) -> list[str]:
    """Every ingest checkpoint of the warehouse: the default ones and the registered ones."""
    root = default_root(warehouse)
    found: set[str] = set()
    registry = locations.join(root, REGISTRY_DIR)
    for name, is_dir in locations.children(registry):
        if is_dir or not name.endswith(".json"):
            continue
        entry = locations.join(registry, name)
        try:
            found.add(locations.resolve(json.loads(locations.read_text(entry))["checkpoint"]))
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring unreadable checkpoint registry entry %s: %s", entry, exc)
    found.update(
        locations.join(root, name)
        for name, is_dir in locations.children(root)
        if is_dir and name.startswith("ingest-")
    )
    return sorted(found)


def _last_batch(directory: str) -> int | None:
    ids = [int(name) for name, _ in locations.children(directory) if name.isdigit()]
    return max(ids) if ids else None


@dataclass(frozen=True)
class Running:
    """A micro-batch that was planned (offsets written) but not committed."""

    checkpoint: str
    batch_id: int

    def finished(self) -> bool:
        last = _last_batch(locations.join(self.checkpoint, "commits"))
        return last is not None and last >= self.batch_id

    def __str__(self) -> str:
        return f"batch {self.batch_id} of {self.checkpoint}"


def uncommitted_batch(checkpoint: str | Path) -> int | None:
    """The batch a query on ``checkpoint`` is running (or was running when it stopped), if any."""
    planned = _last_batch(locations.join(checkpoint, "offsets"))
    if planned is None:
        return None
    committed = _last_batch(locations.join(checkpoint, "commits"))
    return planned if committed is None or committed < planned else None


def running_batches(warehouse: str | Path) -> list[Running]:
    """The uncommitted batches of every ingest checkpoint of the warehouse."""
    result = []
    for checkpoint in registered(warehouse):
        batch = uncommitted_batch(checkpoint)
        if batch is not None:
            result.append(Running(checkpoint, batch))
    return result


# ---- heartbeats of live ingest queries --------------------------------------------------------
HEARTBEATS_DIR = "_live"
HEARTBEAT_SECONDS = 30.0
"""How often a running ingest rewrites its heartbeat."""
LIVE_WITHIN_SECONDS = 3 * HEARTBEAT_SECONDS
"""A heartbeat younger than this is a live ingest; an older one was left by a killed driver."""


@dataclass(frozen=True)
class Heartbeat:
    """An ingest query that says it is running, and when it last said so."""

    app_id: str
    at: float
    """Seconds since the epoch."""
    compact_every: int


def heartbeat_location(warehouse: str | Path, app_id: str) -> str:
    return locations.join(default_root(warehouse), HEARTBEATS_DIR, f"{app_id}.json")


def beat(warehouse: str | Path, app_id: str, compact_every: int, now: float | None = None) -> None:
    """Record that ``app_id`` is running now (one small write, whole or not at all)."""
    stamp = time.time() if now is None else now
    body = {"app_id": app_id, "at": stamp, "compact_every": compact_every}
    locations.write_text(heartbeat_location(warehouse, app_id), json.dumps(body))


def stop_beating(warehouse: str | Path, app_id: str) -> None:
    """The query stopped cleanly: its heartbeat goes, so nobody waits for it to grow old."""
    locations.remove(heartbeat_location(warehouse, app_id))


def live_ingests(warehouse: str | Path, now: float | None = None) -> list[Heartbeat]:
    """The ingest queries whose heartbeat in ``warehouse`` is younger than ``LIVE_WITHIN_SECONDS``."""
    stamp = time.time() if now is None else now
    directory = locations.join(default_root(warehouse), HEARTBEATS_DIR)
    found = []
    for name, is_dir in locations.children(directory):
        if is_dir or not name.endswith(".json"):
            continue
        try:
            body = json.loads(locations.read_text(locations.join(directory, name)))
            beat_ = Heartbeat(str(body["app_id"]), float(body["at"]), int(body.get("compact_every", 0)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable heartbeat %s: %s", name, exc)
            continue
        if stamp - beat_.at < LIVE_WITHIN_SECONDS:
            found.append(beat_)
    return found


class HeartbeatThread(threading.Thread):
    """Keeps the heartbeat of one running query until the query stops, then removes it."""

    def __init__(self, warehouse: str, app_id: str, compact_every: int, is_active: Callable[[], bool]):
        super().__init__(name=f"ackstate-heartbeat-{app_id}", daemon=True)
        self.warehouse, self.app_id, self.compact_every = warehouse, app_id, compact_every
        self.is_active = is_active
        self.stopped = threading.Event()

    def run(self) -> None:
        last = float("-inf")
        try:
            while self.is_active() and not self.stopped.is_set():
                if time.monotonic() - last >= HEARTBEAT_SECONDS:
                    last = time.monotonic()
                    try:
                        beat(self.warehouse, self.app_id, self.compact_every)
                    except Exception as exc:  # a missed beat only makes the query look older
                        log.warning("heartbeat of %s not written: %s", self.app_id, exc)
                self.stopped.wait(1.0)  # a stopped query's heartbeat goes within a second
            stop_beating(self.warehouse, self.app_id)
        except Exception as exc:  # the session may be gone with the query
            log.debug("heartbeat of %s not removed: %s", self.app_id, exc)
