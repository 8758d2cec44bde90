"""What one ingest query reads, where it writes, and how: ``IngestOptions``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine import EngineSettings
from jobs.compact.compaction import CompactOptions
from jobs.platform import locations
from jobs.platform.checkpoints import CHECKPOINTS_DIR
from jobs.platform.errors import IngestError

if TYPE_CHECKING:
    from jobs.platform.config import AckstateConfig


@dataclass(frozen=True)
class IngestOptions:
    source: str
    warehouse: str
    format: str = "json"
    trigger: str = "available-now"
    processing_time: str = "3 seconds"
    checkpoint: str | None = None
    max_files_per_trigger: int | None = None
    settings: EngineSettings = field(default_factory=EngineSettings)
    write_threads: int = 4
    """How many table writes of a batch run at once (each in its own session; 1 = one by one)."""
    warm_state: bool = True
    """``[ingest] warm_state``: a batch takes the state of its topic partitions from the last
    batch's when no other writer changed the state tables since (``jobs.ingest.warm``);
    false: every batch reads it from Delta."""
    write_mode: str = "rewrite"
    """``[ingest] write_mode``: ``rewrite`` writes a batch's changes to a projection table as a
    Delta transaction that replaces the files holding its topic partitions
    (``jobs.platform.rewrite``); ``merge`` as a Delta MERGE. The rows are the same."""
    interpreted_rows: int = 50_000
    """``[ingest] interpreted_rows``: a micro-batch of at most this many input records runs
    Spark's expressions interpreted instead of as generated code (``BatchWriter``); 0 = never."""
    single_partition_rows: int = 10_000
    """``[ingest] single_partition_rows``: a micro-batch of at most this many input records runs
    in one partition, with no shuffle between its steps (``BatchWriter``); 0 = never."""
    kafka: Mapping[str, Any] = field(default_factory=dict)
    """``[kafka]`` (``format`` kafka): ``bootstrap_servers``, ``starting_offsets``,
    ``max_offsets_per_trigger``, and ``options`` passed to the consumer as ``kafka.<key>``."""
    query_id: str | None = None
    """The writer's id in the tables' ``query_id`` and its idempotency key; default: derived
    from the checkpoint (``app_id``). ``ackstate bootstrap`` names itself."""
    compact_every: int = 0
    """``[ingest] compact_every``: compact the warehouse after every N-th micro-batch that wrote,
    inside the query, so that one application commits to each table (S3); 0 = never."""
    compaction: CompactOptions | None = None
    """What that compaction does (``[compact]``); ledger trims are left to ``ackstate compact``."""

    def interpreted(self, input_rows: int) -> bool:
        """Whether a micro-batch of ``input_rows`` input records runs interpreted."""
        return 0 < input_rows <= self.interpreted_rows

    def single_partition(self, input_rows: int) -> bool:
        """Whether a micro-batch of ``input_rows`` input records runs in one partition."""
        return 0 < input_rows <= self.single_partition_rows

    @property
    def checkpoint_path(self) -> str:
        if self.checkpoint:
            return locations.resolve(self.checkpoint)
        digest = hashlib.sha1(self.source_id.encode()).hexdigest()[:12]
        return locations.join(self.warehouse, CHECKPOINTS_DIR, f"ingest-{digest}")

    @property
    def source_id(self) -> str:
        """What the query reads, as one string: a Kafka topic with its servers, or a path."""
        if self.format == "kafka":
            return f"kafka://{self.kafka.get('bootstrap_servers', '')}/{self.source}"
        return locations.resolve(self.source)

    @property
    def app_id(self) -> str:
        """Stable across restarts of the same query (same checkpoint): the idempotency key."""
        if self.query_id:
            return self.query_id
        return "ackstate-ingest-" + hashlib.sha1(self.checkpoint_path.encode()).hexdigest()[:16]


def engine_settings(config: AckstateConfig, implicit_consumers: bool | None = None) -> EngineSettings:
    """The engine settings an ingest obeys: the ``--conf`` engine keys, and ``implicit_consumers``
    (``--implicit-consumers`` when given, else ``[ingest] implicit_consumers``, default false)."""
    if implicit_consumers is None:
        implicit_consumers = bool(config.ingest.get("implicit_consumers", False))
    return EngineSettings.from_config({**config.engine, "implicit_consumers": implicit_consumers})


def write_threads(config: AckstateConfig) -> int:
    """``[ingest] write_threads``: how many table writes of a batch run at once."""
    return int(config.ingest.get("write_threads", IngestOptions.write_threads))


def interpreted_rows(config: AckstateConfig) -> int:
    """``[ingest] interpreted_rows``: the largest micro-batch (input records) whose Spark
    expressions run interpreted; 0 = none."""
    rows = int(config.ingest.get("interpreted_rows", IngestOptions.interpreted_rows))
    if rows < 0:
        raise IngestError(f"[ingest] interpreted_rows = {rows}: use 0 (never) or a number of input records")
    return rows


def single_partition_rows(config: AckstateConfig) -> int:
    """``[ingest] single_partition_rows``: the largest micro-batch (input records) that runs in
    one partition; 0 = none."""
    rows = int(config.ingest.get("single_partition_rows", IngestOptions.single_partition_rows))
    if rows < 0:
        raise IngestError(
            f"[ingest] single_partition_rows = {rows}: use 0 (never) or a number of input records"
        )
    return rows


WRITE_MODES = ("rewrite", "merge")


def write_mode(config: AckstateConfig) -> str:
    """``[ingest] write_mode``: how a batch writes its projection tables (``IngestOptions``)."""
    mode = str(config.ingest.get("write_mode", IngestOptions.write_mode))
    if mode not in WRITE_MODES:
        raise IngestError(f"[ingest] write_mode = {mode!r}: use one of {', '.join(WRITE_MODES)}")
    return mode


def batch_settings(config: AckstateConfig) -> dict[str, Any]:
    """The ``[ingest]`` settings of how each batch runs, as ``IngestOptions`` fields: what
    ``ackstate ingest`` and the benches read alike."""
    return {
        "write_threads": write_threads(config),
        "warm_state": warm_state(config),
        "write_mode": write_mode(config),
        "interpreted_rows": interpreted_rows(config),
        "single_partition_rows": single_partition_rows(config),
    }


def warm_state(config: AckstateConfig) -> bool:
    """``[ingest] warm_state``: keep the committed state between batches (default true)."""
    return bool(config.ingest.get("warm_state", IngestOptions.warm_state))
