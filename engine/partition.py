"""All acknowledgement state of one topic partition, and how a batch of its events applies.

Everything of a topic partition changes only through that partition's events in ``seq`` order
(DESIGN.md, "One micro-batch"). ``PartitionState.apply`` keeps that order where it matters and
vectorises where it does not:

1. replays (``seq`` not above the last applied one) are dropped as ``stale_seq``;
2. PUBLISH events extend the ledgers; every other event sees the last published entry *of its
   own time* (``lac`` per event), so applying all publishes first changes no outcome;
3. per subscription, order-sensitive events (SUBSCRIBE, cumulative ACK) cut the event sequence
   into segments; inside a segment individual acks commute, so a segment is one bitmap union
   (``Cursor.ack_entries``) instead of one Python call per ack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from engine.ackset import words_to_mask
from engine.cursor import SUB_TYPES, Cursor, MessageId
from engine.errors import (
    CumulativeAckMultipleIds,
    CumulativeAckNotAllowed,
    EngineRefusal,
    InvalidMarkDeletePosition,
    PublishOutOfOrder,
    UnknownSubscription,
)
from engine.events import ACK, ACK_CUMULATIVE, ACK_INDIVIDUAL, PUBLISH, SUBSCRIBE, EventBatch, _gather_ranges
from engine.ledgers import Ledgers
from engine.position import EARLIEST, Position
from engine.rangeset import MAX_ENTRY_ID

_INDIVIDUAL_ACK_MODES = ("Shared", "Key_Shared")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Broker settings the engine obeys, named after Pulsar's (snake_case in ``--conf``)."""

    acknowledgment_at_batch_index_level_enabled: bool = False  # Pulsar 4.0 default

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EngineSettings:
        return cls(
            acknowledgment_at_batch_index_level_enabled=bool(
                config.get("acknowledgment_at_batch_index_level_enabled", False)
            )
        )


class Reject(NamedTuple):
    """An event the engine did not (fully) apply: caller's row id, reason code, detail."""

    row: int
    reason: str
    detail: str


@dataclass(slots=True)
class ApplyResult:
    rejects: list[Reject] = field(default_factory=list)
    applied: int = 0
    stale: int = 0
    changed: set[str] = field(default_factory=set)  # subscriptions whose cursor state changed
    published: int = 0


@dataclass(slots=True)
class TrimResult:
    """What ``PartitionState.trim_ledgers`` deleted and which cursors it moved."""

    removed: list[tuple[int, int]] = field(default_factory=list)  # (ledger id, last entry id)
    advanced: set[str] = field(default_factory=set)  # subscriptions whose cursor moved

    @property
    def entries_removed(self) -> int:
        return sum(last + 1 for _, last in self.removed)


class PartitionState:
    """Ledgers, cursors and the replay fence (``last_seq``) of one topic partition."""

    __slots__ = ("cursors", "last_event_time", "last_seq", "ledgers", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int,
        ledgers: Ledgers | None = None,
        cursors: dict[str, Cursor] | None = None,
        last_seq: int = -1,
        last_event_time: int = 0,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.ledgers = ledgers if ledgers is not None else Ledgers()
        self.cursors = cursors if cursors is not None else {}
        self.last_seq = last_seq
        self.last_event_time = last_event_time

    def apply(self, batch: EventBatch, settings: EngineSettings) -> ApplyResult:
        result = ApplyResult()
        if len(batch) == 0:
            return result
        if np.any(np.diff(batch.seq) < 0):
            batch = batch.take(np.argsort(batch.seq, kind="stable"))

        # 1. the replay fence: seq must be above every seq applied before it
        fence = np.maximum.accumulate(np.concatenate(([self.last_seq], batch.seq[:-1])))
        stale = batch.seq <= fence
        for i in np.flatnonzero(stale).tolist():
            result.rejects.append(
                Reject(
                    int(batch.row[i]), "stale_seq", f"seq {int(batch.seq[i])} is not above {int(fence[i])}"
                )
            )
        live = ~stale
        result.stale = int(stale.sum())

        # 2. publishes extend the ledgers; every other event sees the last entry of its own time
        lac_at = self._apply_publishes(batch, live, result)

        # 3. consumer events, per subscription. CLOSE_CONSUMER, DISPATCH, NACK, REDELIVER, SEND
        # and SEND_FAILED are consumed (seq advances) but change no cursor yet: the consumer and
        # dedup model that gives them effect is not built yet.
        enabled = settings.acknowledgment_at_batch_index_level_enabled
        cons = np.flatnonzero(
            live & ((batch.type == SUBSCRIBE) | (batch.type == ACK)) & (batch.sub_code >= 0)
        )
        if cons.size:
            by_sub = cons[np.argsort(batch.sub_code[cons], kind="stable")]
            codes = batch.sub_code[by_sub]
            bounds = np.flatnonzero(np.diff(codes)) + 1
            for group in np.split(by_sub, bounds):
                name = batch.sub_names[int(batch.sub_code[group[0]])]
                self._apply_subscription(name, group, batch, enabled, lac_at, result)

        # a refused command is still consumed (counted as applied and recorded as rejected):
        # like the broker, the engine answered it
        result.applied = int(live.sum())
        live_seq = batch.seq[live]
        if live_seq.size:
            self.last_seq = int(live_seq.max())
            self.last_event_time = max(self.last_event_time, int(batch.event_time[live].max()))
        return result

    def trim_ledgers(self, first_retained_ledger_id: int) -> TrimResult:
        """Delete the ledgers below ``first_retained_ledger_id``, as a topic's retention does.

        ManagedLedgerImpl.internalTrimLedgers in Pulsar's order: first
        ``advanceCursorsIfNecessary`` (every cursor behind the last deleted entry is mark-deleted
        there, see ``Cursor.advance_past_deleted_ledgers``), then ``doDeleteLedgers``. The last
        known ledger is never deleted (``Ledgers.trim_before``). Not an event: ``last_seq`` and
        the event clock stay as they are. Idempotent: a second call deletes nothing.
        """
        ledger_list = list(self.ledgers)
        removable = [(lid, last) for lid, last in ledger_list[:-1] if lid < first_retained_ledger_id]
        if not removable:
            return TrimResult()
        # calculateLastEntryInLedgerList: every known ledger has entries, so it is the last one's
        highest = Position(*removable[-1])
        lac = self.ledgers.last_position
        advanced = {
            name
            for name, cursor in self.cursors.items()
            if cursor.advance_past_deleted_ledgers(highest, self.ledgers, lac)
        }
        removed = self.ledgers.trim_before(first_retained_ledger_id)
        return TrimResult(removed, advanced)

    # ---- publishes ------------------------------------------------------------------
    def _apply_publishes(self, batch: EventBatch, live: np.ndarray, result: ApplyResult) -> _LacTimeline:
        """Append every valid PUBLISH; return the last published entry as of each event.

        A managed ledger only appends, so a PUBLISH at or before the last entry is refused.
        Positions are compared as int64 keys (ledger rank << 32 | entry + 1) to stay vectorised.
        """
        lac = self.ledgers.last_position
        idx = np.flatnonzero(live & (batch.type == PUBLISH))
        if idx.size == 0:
            empty = np.empty(0, dtype=np.int64)
            return _LacTimeline(lac, empty, empty, empty)
        ledger = batch.ledger_id[idx]
        entry = batch.entry_id[idx]
        in_range = (ledger >= 0) & (entry >= 0) & (entry <= MAX_ENTRY_ID)
        known = np.asarray([lid for lid, _ in self.ledgers], dtype=np.int64)
        ranks = np.unique(np.concatenate((known, ledger)))
        keys = (np.searchsorted(ranks, ledger).astype(np.int64) << 32) | (entry + 1)
        lac_key = (
            -1 if lac == EARLIEST else (int(np.searchsorted(ranks, lac.ledger_id)) << 32) | (lac.entry_id + 1)
        )
        keys = np.where(in_range, keys, -1)
        running = np.maximum.accumulate(np.concatenate(([lac_key], keys)))[:-1]
        ok = in_range & (keys > running)
        for i in np.flatnonzero(~ok).tolist():
            row = int(batch.row[idx[i]])
            pos = Position(int(ledger[i]), int(entry[i]))
            if not in_range[i]:
                result.rejects.append(
                    Reject(row, "invalid_value", f"PUBLISH position {pos} outside 0..{MAX_ENTRY_ID}")
                )
            else:
                result.rejects.append(
                    Reject(row, PublishOutOfOrder.reason, f"PUBLISH {pos} is not after {lac}")
                )
        for lid, eid in zip(ledger[ok].tolist(), entry[ok].tolist(), strict=True):
            self.ledgers.publish(Position(lid, eid))
        result.published = int(ok.sum())
        return _LacTimeline(lac, idx[ok], ledger[ok], entry[ok])

    # ---- one subscription -----------------------------------------------------------
    def _apply_subscription(
        self,
        name: str,
        group: np.ndarray,
        batch: EventBatch,
        enabled: bool,
        lac_at: _LacTimeline,
        result: ApplyResult,
    ) -> None:
        individual = (batch.type[group] == ACK) & (batch.ack_type[group] == ACK_INDIVIDUAL)
        # segment boundaries: where "is an individual ack" changes
        cuts = np.flatnonzero(np.diff(individual.astype(np.int8))) + 1
        for seg in np.split(group, cuts):
            first = int(seg[0])
            if batch.type[first] == ACK and batch.ack_type[first] == ACK_INDIVIDUAL:
                self._individual_acks(name, seg, batch, enabled, lac_at, result)
            else:
                for i in seg.tolist():
                    self._ordered_event(name, i, batch, enabled, lac_at.at(i), result)

    def _ordered_event(
        self, name: str, i: int, batch: EventBatch, enabled: bool, lac: Position, result: ApplyResult
    ) -> None:
        cursor = self.cursors.get(name)
        kind = int(batch.type[i])
        try:
            if kind == SUBSCRIBE:
                sub_type = str(batch.sub_type[i])
                if cursor is None:
                    initial = str(batch.initial_position[i] or "Latest")
                    self.cursors[name] = Cursor.subscribe(sub_type, initial, self.ledgers, lac)
                    result.changed.add(name)
                elif cursor.sub_type != sub_type and sub_type in SUB_TYPES:
                    # the subscription takes the type of its latest consumer (Pulsar switches the
                    # dispatcher when no consumer of the old type is connected)
                    cursor.sub_type = sub_type
                    result.changed.add(name)
                return
            if cursor is None:
                raise UnknownSubscription(f"ACK for subscription {name!r}, which never subscribed")
            if batch.ack_type[i] != ACK_CUMULATIVE:
                return
            lo, hi = int(batch.msg_offsets[i]), int(batch.msg_offsets[i + 1])
            if cursor.sub_type in _INDIVIDUAL_ACK_MODES:
                # Consumer.messageAcked: "Received cumulative ack on shared subscription, ignoring"
                raise CumulativeAckNotAllowed(
                    f"cumulative ack on {cursor.sub_type} subscription {name!r} ignored"
                )
            if hi - lo != 1:
                # Consumer.messageAcked: a cumulative ack carries exactly one message id
                raise CumulativeAckMultipleIds(f"cumulative ack with {hi - lo} message ids ignored")
            cursor.ack_cumulative(self._message_id(batch, lo), self.ledgers, lac, enabled)
            result.changed.add(name)
        except EngineRefusal as refusal:
            result.rejects.append(Reject(int(batch.row[i]), refusal.reason, str(refusal)))
            if name in self.cursors:
                result.changed.add(name)  # batch state may have been recorded before the refusal

    @staticmethod
    def _message_id(batch: EventBatch, m: int) -> MessageId:
        pos = Position(int(batch.msg_ledger[m]), int(batch.msg_entry[m]))
        lo, hi = int(batch.ackset_offsets[m]), int(batch.ackset_offsets[m + 1])
        if hi == lo:
            return MessageId(pos)
        return MessageId(pos, words_to_mask(batch.ackset_words[lo:hi].tolist()), int(batch.msg_batch_size[m]))

    def _individual_acks(
        self,
        name: str,
        seg: np.ndarray,
        batch: EventBatch,
        enabled: bool,
        lac_at: _LacTimeline,
        result: ApplyResult,
    ) -> None:
        """A run of individual acks of one subscription as one bitmap operation."""
        cursor = self.cursors.get(name)
        if cursor is None:
            for i in seg.tolist():
                result.rejects.append(
                    Reject(
                        int(batch.row[i]),
                        UnknownSubscription.reason,
                        f"ACK for subscription {name!r}, which never subscribed",
                    )
                )
            return
        counts = np.diff(batch.msg_offsets)[seg]
        midx = _gather_ranges(batch.msg_offsets[:-1][seg], counts)
        if midx.size == 0:
            return
        ev_of_msg = np.repeat(np.arange(seg.size), counts)
        lac_l, lac_e = lac_at.arrays(seg)
        led = batch.msg_ledger[midx]
        ent = batch.msg_entry[midx]
        ll, le = lac_l[ev_of_msg], lac_e[ev_of_msg]
        bad = (led > ll) | ((led == ll) & (ent > le))
        applied = np.ones(midx.size, dtype=bool)
        if bad.any():
            # asyncDelete fails the whole call at the first position beyond the last entry;
            # positions before it in the same call stay applied, the rest are not applied
            flat = np.concatenate(([0], np.cumsum(counts)))
            cum = np.concatenate(([0], np.cumsum(bad)))
            before_event = np.repeat(cum[flat[:-1]], counts)
            applied = (cum[1:] - before_event) == 0  # no bad position at or before it in its call
            first_bad = np.flatnonzero(bad & (cum[:-1] == before_event))
            for m in first_bad.tolist():
                k = int(ev_of_msg[m])
                pos = Position(int(led[m]), int(ent[m]))
                lac = Position(int(lac_l[k]), int(lac_e[k]))
                result.rejects.append(
                    Reject(
                        int(batch.row[seg[k]]),
                        InvalidMarkDeletePosition.reason,
                        f"ack of {pos} beyond the last published entry {lac}; the call stopped there",
                    )
                )
        has_set = np.diff(batch.ackset_offsets)[midx] > 0
        plain = applied & ~has_set
        by_ledger: dict[int, np.ndarray] = {}
        if plain.any():
            pl, pe = led[plain], ent[plain]
            order = np.argsort(pl, kind="stable")
            pl, pe = pl[order], pe[order]
            cuts = np.flatnonzero(np.diff(pl)) + 1
            for chunk_l, chunk_e in zip(np.split(pl, cuts), np.split(pe, cuts), strict=True):
                by_ledger[int(chunk_l[0])] = chunk_e
        batch_ids = [
            self._message_id(batch, int(midx[m])) for m in np.flatnonzero(applied & has_set).tolist()
        ]
        lac_end = Position(int(lac_l[-1]), int(lac_e[-1]))
        cursor.ack_entries(by_ledger, batch_ids, self.ledgers, lac_end, enabled)
        result.changed.add(name)


class _LacTimeline:
    """The last published entry as of each event of a batch (publishes are applied first)."""

    __slots__ = ("_before", "_entry", "_idx", "_ledger")

    def __init__(self, before: Position, idx: np.ndarray, ledger: np.ndarray, entry: np.ndarray) -> None:
        self._before, self._idx, self._ledger, self._entry = before, idx, ledger, entry

    def at(self, i: int) -> Position:
        j = int(np.searchsorted(self._idx, i)) - 1
        return self._before if j < 0 else Position(int(self._ledger[j]), int(self._entry[j]))

    def arrays(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ledger, entry) of the last published entry as of each given event index."""
        j = np.searchsorted(self._idx, events) - 1
        safe = np.maximum(j, 0)
        ledger = np.where(j >= 0, self._ledger[safe] if self._ledger.size else 0, self._before.ledger_id)
        entry = np.where(j >= 0, self._entry[safe] if self._entry.size else 0, self._before.entry_id)
        return ledger.astype(np.int64), entry.astype(np.int64)
