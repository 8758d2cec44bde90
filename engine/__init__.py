"""ackstate's engine: Pulsar's acknowledgement state machine, pure Python (never Spark).

The domain reads like Pulsar's managed-ledger: ``Position``, ``Ledgers``, ``AckRangeSet``,
``Cursor``, ``Producers`` (dedup) and, for a whole topic partition,
``PartitionState.apply(EventBatch, settings)``.
"""

from engine.cursor import BatchAck, Cursor, MessageId
from engine.dedup import Producers, Receipt
from engine.errors import CorruptState, EngineRefusal
from engine.events import EventBatch
from engine.ledgers import Ledgers
from engine.partition import ApplyResult, PartitionState, Reject, TrimResult
from engine.position import EARLIEST, Position, parse_position, position_text
from engine.rangeset import AckRangeSet
from engine.settings import EngineSettings

__all__ = [
    "EARLIEST",
    "AckRangeSet",
    "ApplyResult",
    "BatchAck",
    "CorruptState",
    "Cursor",
    "EngineRefusal",
    "EngineSettings",
    "EventBatch",
    "Ledgers",
    "MessageId",
    "PartitionState",
    "Position",
    "Producers",
    "Receipt",
    "Reject",
    "TrimResult",
    "parse_position",
    "position_text",
]
