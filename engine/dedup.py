"""The producers of one topic partition: message deduplication and the non-persistent send limit.

Persistent topics mirror ``MessageDeduplication`` (pulsar-broker ``service/persistent``), spec 7:

* ``pushed[p]`` (``highestSequencedPushed``) is raised when a send is accepted, before it is
  persisted; ``persisted[p]`` (``highestSequencedPersisted``) is set when it is (PUBLISH,
  ``recordMessagePersisted`` from ``PersistentTopic.addComplete``);
* a SEND is judged by its *lowest* sequence id and recorded by its *highest*
  (``isDuplicateNormal``): at or below ``pushed`` it is ``Dup`` when also at or below
  ``persisted``, else ``Unknown``; otherwise ``NotDup`` and ``pushed := highest``. A batch whose
  lowest id was pushed is judged whole, even when it carries newer ids;
* SEND_FAILED is ``addFailed`` followed by the unfence once pending writes drain
  (``decrementPendingWriteOpsAndCheck``): ``resetHighestSequenceIdPushed`` sets
  ``pushed := persisted`` (a producer with nothing persisted loses its ``pushed`` entry);
* deduplication off (``brokerDeduplicationEnabled`` / the topic's policy): every send is
  ``NotDup`` and nothing is recorded; switching it either way clears both maps (``checkStatus``:
  disabling deletes the ``pulsar.dedup`` cursor, enabling opens it at the end of the ledger).

Non-persistent topics have no deduplication (``NonPersistentTopic.checkMessageDeduplicationInfo``
is a no-op). ``ServerCnx.handleSend`` drops a send when the connection's
``nonPersistentPendingMessages > maxConcurrentNonPersistentMessagePerConnection`` (strictly
greater: with the default 1000, 1001 sends may be in flight), answers it with a *success*
receipt ``-1:-1`` and counts its messages (``Producer.recordMessageDrop``). A send is in flight
from its SEND until its ``completed_at`` (contract addition), judged on the partition's
event-time clock, so the decision does not depend on micro-batch boundaries.

Receipts are what the broker answers (``Producer.MessagePublishContext.completed``): ``Dup`` is a
success with message id ``-1:-1``; ``Unknown`` is ``CommandSendError(PersistenceError)``; a
``NotDup`` send is answered with its position when its PUBLISH comes, possibly in a later
micro-batch (the send waits in ``Producer.pending``), or with ``PersistenceError`` when a
SEND_FAILED fails it first.
"""

from __future__ import annotations

import heapq
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.codec import StateReader, frame
from engine.events import SEND, SEND_FAILED, EventBatch
from engine.position import Position
from engine.topic import is_persistent

if TYPE_CHECKING:
    from engine.settings import EngineSettings

NOT_DUP, DUP, UNKNOWN = "NotDup", "Dup", "Unknown"
PERSISTENCE_ERROR = "PersistenceError"  # ServerError.PersistenceError
DUP_RECEIPT = (-1, -1)  # publishContext.completed(null, -1, -1)
DROPPED_RECEIPT = (-1, -1)  # ServerCnx.handleSend: sendSendReceiptResponse(..., -1, -1)
NON_PERSISTENT_RECEIPT = (0, 0)  # NonPersistentTopic.publishMessage: completed(null, 0L, 0L)

_UNNAMED_CONNECTION = -1

_MAGIC = b"AKD"
_VERSION = 1
_HEADER = struct.Struct("<BI")  # flags (bit 0: dedup enabled), producer count
_PRODUCER = struct.Struct("<BqqqqI")  # flags (bit 0 pushed, bit 1 persisted), pushed, persisted,
# drop count, last event time, pending count
_PENDING = struct.Struct("<qqqB")  # seq, sequence id, highest sequence id, records persisted
_CONNECTION = struct.Struct("<qI")  # connection id, in-flight count


# ---- state ---------------------------------------------------------------------------------
@dataclass(slots=True)
class PendingSend:
    """A ``NotDup`` send waiting for its PUBLISH (an entry in ``pendingWriteOps``)."""

    seq: int  # the SEND event's seq: the key its receipt is filled by
    sequence_id: int
    highest_sequence_id: int
    records: bool  # its PUBLISH records ``persisted`` (false: a marker or a chunk but the last)


@dataclass(slots=True)
class Producer:
    """One producer name's dedup entries, drop count and sends in flight."""

    pushed: int | None = None  # highestSequencedPushed[p]
    persisted: int | None = None  # highestSequencedPersisted[p]
    msg_drop_count: int = 0  # messages dropped over the non-persistent limit
    last_event_time: int = 0
    pending: deque[PendingSend] = field(default_factory=deque)


@dataclass(slots=True)
class Receipt:
    """The broker's answer to one SEND, or (``row == -1``) the late answer to an earlier one.

    A late answer carries only ``seq`` and the receipt fields; the rest is already written.
    ``position`` None with no ``error``: still waiting for its PUBLISH.
    """

    seq: int
    row: int = -1
    event_time: int | None = None
    producer_name: str | None = None
    sequence_id: int | None = None
    highest_sequence_id: int | None = None
    status: str | None = None
    position: Position | None = None
    error: str | None = None
    dropped: bool | None = None


@dataclass(slots=True)
class SendResult:
    receipts: list[Receipt] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)  # producers whose row changed
    rejects: list[tuple[int, str, str]] = field(default_factory=list)  # (row, reason, detail)

    def extend(self, later: SendResult) -> None:
        """Add what a later part of the same batch answered."""
        self.receipts.extend(later.receipts)
        self.changed |= later.changed
        self.rejects.extend(later.rejects)


class Producers:
    """Every producer of a topic partition, plus the in-flight sends of each connection."""

    __slots__ = ("by_name", "dedup_enabled", "in_flight")

    def __init__(self) -> None:
        self.by_name: dict[str, Producer] = {}
        # non-persistent: per connection, a min-heap of the completed_at of sends in flight
        self.in_flight: dict[int, list[int]] = {}
        self.dedup_enabled = False  # the setting this state was last applied with

    def __len__(self) -> int:
        return len(self.by_name)

    @property
    def has_pending(self) -> bool:
        return any(p.pending for p in self.by_name.values())

    # ---- apply -----------------------------------------------------------------------
    def apply(
        self,
        batch: EventBatch,
        live: np.ndarray,
        published: np.ndarray,
        clock_before: int,
        topic: str,
        settings: EngineSettings,
    ) -> SendResult:
        """Apply the batch's SEND, SEND_FAILED and (accepted) PUBLISH events, in seq order.

        ``published`` are the indices of the PUBLISH events the ledgers accepted; a refused
        PUBLISH persisted nothing. ``clock_before`` is the partition's event-time clock before
        the batch. The batch is ordered by seq.
        """
        result = SendResult()
        persistent = is_persistent(topic)
        dedup = settings.deduplication_enabled(topic)
        if dedup != self.dedup_enabled:
            self._switch_deduplication(dedup, result)
        sends = np.flatnonzero(live & ((batch.type == SEND) | (batch.type == SEND_FAILED)))
        if not persistent or not (sends.size or dedup or self.has_pending):
            published = published[:0]  # nothing to record and no receipt waits for them
        if sends.size == 0 and published.size == 0:
            if self.in_flight and live.any():
                self._expire_in_flight(max(clock_before, int(batch.event_time[live].max())))
            return result
        cols = batch.sends
        if cols is None:
            for i in sends.tolist():
                result.rejects.append((int(batch.row[i]), "missing_field", "SEND needs producer fields"))
            return result
        order = np.sort(np.concatenate((sends, published)))
        clock = np.maximum.accumulate(np.where(live, batch.event_time, clock_before))
        clock = np.maximum(clock, clock_before)
        names = cols.producer_names
        this_batch: dict[int, Receipt] = {}
        limit = settings.max_concurrent_non_persistent_message_per_connection
        columns = zip(
            batch.type[order].tolist(),
            batch.seq[order].tolist(),
            batch.row[order].tolist(),
            batch.event_time[order].tolist(),
            clock[order].tolist(),
            cols.producer_code[order].tolist(),
            cols.sequence_id[order].tolist(),
            cols.highest_sequence_id[order].tolist(),
            cols.num_messages[order].tolist(),
            cols.connection_id[order].tolist(),
            cols.completed_at[order].tolist(),
            cols.chunk_id[order].tolist(),
            cols.num_chunks_from_msg[order].tolist(),
            cols.marker[order].tolist(),
            batch.ledger_id[order].tolist(),
            batch.entry_id[order].tolist(),
            strict=True,
        )
        for (
            kind, seq, row, event_time, now, code, sequence_id, highest, messages, connection, completed_at,
            chunk, chunks, marker, ledger_id, entry_id,
        ) in columns:  # fmt: skip
            name = names[code] if code >= 0 else None
            if kind == SEND:
                if name is None or sequence_id < 0:
                    result.rejects.append((row, "missing_field", "SEND needs producer_name and sequence_id"))
                    continue
                if highest < sequence_id:
                    highest = sequence_id
                receipt = Receipt(seq, row, event_time, name, sequence_id, highest, NOT_DUP, dropped=False)
                this_batch[seq] = receipt
                result.receipts.append(receipt)
                producer = self._producer(name, event_time, result)
                if persistent:
                    # only the last chunk of a chunked message is checked and recorded
                    self._send(producer, receipt, dedup, marker, chunk < 0 or chunk == chunks - 1)
                else:
                    self._send_non_persistent(
                        producer, receipt, now, connection, completed_at, messages, limit
                    )
            elif kind == SEND_FAILED:
                if not persistent:
                    result.rejects.append((row, "invalid_value", "SEND_FAILED on a non-persistent topic"))
                    continue
                self._send_failed(dedup, this_batch, result)
            else:
                position = (ledger_id, entry_id)
                self._published(name, sequence_id, highest, position, event_time, dedup, this_batch, result)
        self._expire_in_flight(int(clock[-1]))
        return result

    def _producer(self, name: str, event_time: int, result: SendResult) -> Producer:
        producer = self.by_name.get(name)
        if producer is None:
            producer = self.by_name[name] = Producer()
        if event_time > producer.last_event_time:
            producer.last_event_time = event_time
        result.changed.add(name)
        return producer

    def _switch_deduplication(self, enabled: bool, result: SendResult) -> None:
        """``MessageDeduplication.checkStatus``: both transitions start from empty maps."""
        for name, producer in self.by_name.items():
            if producer.pushed is not None or producer.persisted is not None:
                producer.pushed = producer.persisted = None
                result.changed.add(name)
        self.dedup_enabled = enabled

    @staticmethod
    def _send(producer: Producer, receipt: Receipt, dedup: bool, marker: bool, whole_or_last: bool) -> None:
        """``PersistentTopic.publishMessage``: isDuplicate, then append, answer or refuse.

        ``isDuplicate`` answers NotDup without looking when deduplication is off, for a marker,
        and for a chunk but the last (``IS_LAST_CHUNK`` false: its PUBLISH records nothing).
        """
        sequence_id, highest = receipt.sequence_id, receipt.highest_sequence_id
        assert sequence_id is not None and highest is not None
        status = NOT_DUP
        if dedup and not marker and whole_or_last:
            status = is_duplicate(producer, sequence_id, highest)
            receipt.status = status
        if status == DUP:
            receipt.position = DUP_RECEIPT
        elif status == UNKNOWN:
            receipt.error = PERSISTENCE_ERROR  # completed(MessageDupUnknownException, -1, -1)
        else:
            producer.pending.append(
                PendingSend(receipt.seq, sequence_id, highest, not marker and whole_or_last)
            )

    def _send_non_persistent(
        self,
        producer: Producer,
        receipt: Receipt,
        now: int,
        connection: int,
        completed_at: int,
        messages: int,
        limit: int,
    ) -> None:
        """``ServerCnx.handleSend`` on a non-persistent topic: the per-connection limit."""
        heap = self.in_flight.get(connection)
        while heap and heap[0] <= now:
            heapq.heappop(heap)
        if heap is not None and len(heap) > limit:
            receipt.position, receipt.dropped = DROPPED_RECEIPT, True
            producer.msg_drop_count += messages
            return
        if completed_at > now:
            heapq.heappush(self.in_flight.setdefault(connection, []), completed_at)
        receipt.position = NON_PERSISTENT_RECEIPT

    def _send_failed(self, dedup: bool, this_batch: dict[int, Receipt], result: SendResult) -> None:
        """``PersistentTopic.addFailed`` then, once pending writes drain, the unfence: every send
        still waiting failed (``PersistenceError``) and ``resetHighestSequenceIdPushed`` runs."""
        for name, producer in self.by_name.items():
            if producer.pending:
                for pending in producer.pending:
                    _late(this_batch, result, pending.seq).error = PERSISTENCE_ERROR
                producer.pending.clear()
                result.changed.add(name)
            if dedup and producer.pushed != producer.persisted:
                producer.pushed = producer.persisted
                result.changed.add(name)

    def _published(
        self,
        name: str | None,
        sequence_id: int,
        highest: int,
        position: Position,
        event_time: int,
        dedup: bool,
        this_batch: dict[int, Receipt],
        result: SendResult,
    ) -> None:
        """``PersistentTopic.addComplete``: recordMessagePersisted, then the send's receipt."""
        if name is None:
            return
        producer = self.by_name.get(name)
        matched = None
        if producer is not None and producer.pending:
            for k, pending in enumerate(producer.pending):
                if pending.sequence_id == sequence_id:
                    matched = pending
                    del producer.pending[k]
                    break
        if matched is not None:
            _late(this_batch, result, matched.seq).position = position
        records = dedup and (matched.records if matched is not None else sequence_id >= 0)
        if matched is None and not records:
            return
        producer = self._producer(name, event_time, result)
        if records:
            value = matched.highest_sequence_id if matched is not None else max(highest, sequence_id)
            producer.persisted = value  # highestSequencedPersisted.put(p, max(highest, seq))
            # Every persisted entry went through isDuplicate, which raised pushed; an event stream
            # that starts after the SEND (or never shows it) keeps that invariant this way.
            if producer.pushed is None or producer.pushed < value:
                producer.pushed = value

    def _expire_in_flight(self, now: int) -> None:
        """Forget the non-persistent sends completed by ``now``: no later send can count them."""
        for connection in list(self.in_flight):
            heap = self.in_flight[connection]
            while heap and heap[0] <= now:
                heapq.heappop(heap)
            if not heap:
                del self.in_flight[connection]

    # ---- projections -----------------------------------------------------------------
    def rows(self, names: set[str]) -> list[tuple[str, Producer]]:
        """The ``producers`` rows of the given producers, by name."""
        return [(name, self.by_name[name]) for name in sorted(names) if name in self.by_name]

    # ---- encoding --------------------------------------------------------------------
    def encode(self) -> bytes | None:
        """Versioned, exact binary form (``topic_partitions.producers_state``); None when empty.

        Layout (little endian): b"AKD", version u8, flags u8 (bit 0: dedup enabled), producer
        count u32; per producer, by name: name length u32 and UTF-8 bytes, flags u8 (bit 0:
        pushed present, bit 1: persisted present), pushed i64, persisted i64, drop count i64,
        last event time i64, pending count u32, then per pending send: seq i64, sequence id
        i64, highest sequence id i64, records u8; connection count u32, per connection by id:
        id i64, count u32, completed_at i64 ascending.
        """
        if not self.by_name and not self.in_flight:
            return None
        out = [frame(_MAGIC, _VERSION), _HEADER.pack(int(self.dedup_enabled), len(self.by_name))]
        for name in sorted(self.by_name):
            p = self.by_name[name]
            raw = name.encode()
            flags = (p.pushed is not None) | ((p.persisted is not None) << 1)
            out.append(struct.pack("<I", len(raw)) + raw)
            out.append(
                _PRODUCER.pack(
                    flags,
                    p.pushed or 0,
                    p.persisted or 0,
                    p.msg_drop_count,
                    p.last_event_time,
                    len(p.pending),
                )
            )
            out.extend(
                _PENDING.pack(s.seq, s.sequence_id, s.highest_sequence_id, s.records) for s in p.pending
            )
        out.append(struct.pack("<I", len(self.in_flight)))
        for connection in sorted(self.in_flight):
            heap = sorted(self.in_flight[connection])
            out.append(_CONNECTION.pack(connection, len(heap)) + struct.pack(f"<{len(heap)}q", *heap))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes | None) -> Producers:
        state = cls()
        if not data:
            return state
        reader = StateReader(data, _MAGIC, _VERSION, "producer state")
        flags, n = reader.unpack(_HEADER)
        state.dedup_enabled = bool(flags & 1)
        for _ in range(n):
            name = reader.text(reader.u32())
            pflags, pushed, persisted, drops, last, npending = reader.unpack(_PRODUCER)
            producer = Producer(
                pushed if pflags & 1 else None, persisted if pflags & 2 else None, drops, last
            )
            for _ in range(npending):
                seq, sequence_id, highest, records = reader.unpack(_PENDING)
                producer.pending.append(PendingSend(seq, sequence_id, highest, bool(records)))
            state.by_name[name] = producer
        for _ in range(reader.u32()):
            connection, count = reader.unpack(_CONNECTION)
            state.in_flight[connection] = list(reader.longs(count))
        reader.end()
        return state

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Producers)
            and self.by_name == other.by_name
            and self.dedup_enabled == other.dedup_enabled
            and {c: sorted(h) for c, h in self.in_flight.items()}
            == {c: sorted(h) for c, h in other.in_flight.items()}
        )

    def __repr__(self) -> str:
        return f"Producers({self.by_name}, in_flight={self.in_flight}, dedup={self.dedup_enabled})"


def is_duplicate(producer: Producer, sequence_id: int, highest_sequence_id: int) -> str:
    """``MessageDeduplication.isDuplicateNormal`` for one (non-chunk or last-chunk) send.

    ``sequence_id`` is the batch's lowest id, ``highest_sequence_id`` already
    ``max(highest, lowest)``.
    """
    pushed = producer.pushed
    if pushed is not None and sequence_id <= pushed:
        persisted = producer.persisted
        return DUP if persisted is not None and sequence_id <= persisted else UNKNOWN
    producer.pushed = highest_sequence_id
    return NOT_DUP


def _late(this_batch: dict[int, Receipt], result: SendResult, seq: int) -> Receipt:
    """The receipt of the SEND with this seq: its own if it is in this batch, else a late one."""
    receipt = this_batch.get(seq)
    if receipt is None:
        receipt = this_batch[seq] = Receipt(seq)
        result.receipts.append(receipt)
    return receipt
