"""The ingest queries' streaming checkpoints, read from outside the query.

Structured Streaming writes ``offsets/<N>`` before it runs micro-batch ``N`` and
``commits/<N>`` after ``foreachBatch`` returned, so a checkpoint tells, without talking to the
query, whether a batch is under way (or was interrupted): an offsets file with no commit. Two
jobs need that:

* the ingest, at start, to know whether its first batch repeats one an earlier run began (only
  then can tables hold part of it, ``jobs.ingest.BatchWriter``);
* ``ackstate compact``, before a ledger trim, to wait for the batches that were running when it
  asked for the trim (``jobs.compact.LedgerTrimmer``).

Checkpoints live under the warehouse (``_checkpoints/ingest-*``) unless ``--checkpoint`` puts
them elsewhere; those are registered under the warehouse (``_checkpoints/_registry``), so
compact finds every one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("ackstate.checkpoints")

CHECKPOINTS_DIR = "_checkpoints"
REGISTRY_DIR = "_registry"


def default_root(warehouse: str | Path) -> Path:
    return Path(warehouse) / CHECKPOINTS_DIR


def register(warehouse: str | Path, app_id: str, checkpoint: str | Path) -> None:
    """Record that ``app_id`` writes this warehouse from ``checkpoint`` (idempotent). Only a
    checkpoint outside the warehouse is recorded: one inside is found where it is, and a copy of
    the warehouse then points at its own checkpoints, not at the original's."""
    root = default_root(warehouse).absolute()
    if Path(checkpoint).absolute().is_relative_to(root):
        return
    registry = root / REGISTRY_DIR
    registry.mkdir(parents=True, exist_ok=True)
    entry = registry / f"{app_id}.json"
    text = json.dumps({"app_id": app_id, "checkpoint": str(Path(checkpoint).absolute())})
    if not entry.exists() or entry.read_text() != text:
        tmp = entry.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(entry)


def registered(warehouse: str | Path) -> list[Path]:
    """Every ingest checkpoint of the warehouse: the default ones and the registered ones."""
    root = default_root(warehouse)
    found: set[Path] = set()
    registry = root / REGISTRY_DIR
    if registry.is_dir():
        for entry in sorted(registry.glob("*.json")):
            try:
                found.add(Path(json.loads(entry.read_text())["checkpoint"]))
            except (OSError, ValueError, KeyError) as exc:
                log.warning("ignoring unreadable checkpoint registry entry %s: %s", entry, exc)
    if root.is_dir():
        found.update(p.absolute() for p in root.glob("ingest-*") if p.is_dir())
    return sorted(found)


def _last_batch(directory: Path) -> int | None:
    if not directory.is_dir():
        return None
    ids = [int(p.name) for p in directory.iterdir() if p.name.isdigit()]
    return max(ids) if ids else None


@dataclass(frozen=True)
class Running:
    """A micro-batch that was planned (offsets written) but not committed."""

    checkpoint: Path
    batch_id: int

    def finished(self) -> bool:
        last = _last_batch(self.checkpoint / "commits")
        return last is not None and last >= self.batch_id

    def __str__(self) -> str:
        return f"batch {self.batch_id} of {self.checkpoint}"


def uncommitted_batch(checkpoint: str | Path) -> int | None:
    """The batch a query on ``checkpoint`` is running (or was running when it stopped), if any."""
    path = Path(checkpoint)
    planned = _last_batch(path / "offsets")
    if planned is None:
        return None
    committed = _last_batch(path / "commits")
    return planned if committed is None or committed < planned else None


def running_batches(warehouse: str | Path) -> list[Running]:
    """The uncommitted batches of every ingest checkpoint of the warehouse."""
    result = []
    for checkpoint in registered(warehouse):
        batch = uncommitted_batch(checkpoint)
        if batch is not None:
            result.append(Running(checkpoint, batch))
    return result
