"""All acknowledgement state of one topic partition, and how a batch of its events applies.

Everything of a topic partition changes only through that partition's events in ``seq`` order
(DESIGN.md, "One micro-batch"). ``PartitionState.apply`` keeps that order where it matters and
vectorises where it does not:

1. replays (``seq`` not above the last applied one) are dropped as ``stale_seq``;
2. PUBLISH events extend the ledgers; every other event sees the last published entry *of its
   own time* (``lac`` per event), so applying all publishes first changes no outcome;
3. per subscription, order-sensitive events (SUBSCRIBE, cumulative ACK) cut the event sequence
   into segments; inside a segment individual acks commute, so a segment is one bitmap union
   (``Cursor.ack_entries``) instead of one Python call per ack;
4. SEND, SEND_FAILED and the accepted PUBLISH events pass through the producers
   (``engine.dedup``) in seq order among themselves: they do not interact with cursors.

On an Exclusive or Failover subscription, the DISPATCH, NACK and REDELIVER commands that change
nothing (``Subscription.inert_commands``) are dropped before the segments are cut, so the
individual acks between them form long runs. The rest (a Shared subscription's DISPATCHes and
acks above all) is one Python step per event; on a Shared or Key_Shared subscription the
DISPATCHes and individual acks between its other events are applied by one loop per run
(``Subscription.apply_run``) rather than a chain of calls per event. Those steps read Python
lists converted once per batch (``_EventColumns``, or per segment for a run: ``RunEvents``)
and each event's last published entry from one search per subscription
(``_LacTimeline.positions``); the earliest client timer, checked before every event, is cached
(``Subscription.next_due``); the cursor side of their individual acks is staged and applied at
once before anything reads the cursor (``Cursor.stage_ack``, ``Cursor.apply_staged``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from engine.ackset import words_to_mask
from engine.collector import paused as collector_paused
from engine.cursor import SUB_TYPES, Cursor, MessageId
from engine.dedup import Producers, SendResult
from engine.errors import (
    AckBeyondLastPublished,
    CumulativeAckMultipleIds,
    CumulativeAckNotAllowed,
    DispatchBeyondLastPublished,
    EngineRefusal,
    InvalidValue,
    PublishOutOfOrder,
    UnknownConsumer,
    UnknownSubscription,
)
from engine.events import (
    ACK,
    ACK_CUMULATIVE,
    ACK_INDIVIDUAL,
    CLOSE_CONSUMER,
    CREATE_SUBSCRIPTION,
    CURSOR_OPERATIONS,
    DELETE_TOPIC,
    DISPATCH,
    MARK_DELETE,
    NACK,
    PUBLISH,
    REDELIVER,
    RESET_CURSOR,
    SUBSCRIBE,
    TOPIC_OPERATIONS,
    UNSUBSCRIBE,
    EventBatch,
    among,
    gather_ranges,
    type_table,
)
from engine.keyshared import sticky_key_hash
from engine.ledgers import Ledgers
from engine.position import EARLIEST, Position, position_text, positions_of
from engine.rangeset import MAX_ENTRY_ID
from engine.settings import EngineSettings
from engine.subscription import (
    REDELIVER as REDELIVER_REASON,
)
from engine.subscription import (
    RUN_ACK,
    RUN_ACKS,
    RUN_CUMULATIVE,
    RUN_DISPATCH,
    RUN_PARTIAL_ACKS,
    TYPE_BEFORE_DISPATCHER,
    Consumer,
    RunEvents,
    Subscription,
    SubscriptionSettings,
)
from engine.topic import is_non_persistent

_INDIVIDUAL_ACK_MODES = ("Shared", "Key_Shared")
# the events applied per subscription (the cursor operations carry no consumer)
_CONSUMER_EVENTS = (SUBSCRIBE, CLOSE_CONSUMER, DISPATCH, ACK, NACK, REDELIVER, *CURSOR_OPERATIONS)
# the commands that attach an unknown consumer under ``implicit_consumers``
_ATTACHING = (DISPATCH, ACK, NACK, REDELIVER)
# On a non-persistent topic these change no acknowledgement state (see PartitionState.apply).
# An UNSUBSCRIBE deletes a non-persistent subscription too (NonPersistentSubscription.delete);
# the admin API refuses a CREATE_SUBSCRIPTION there, and so does validation.
_NON_PERSISTENT_INERT = (
    *(PUBLISH, DISPATCH, ACK, NACK, REDELIVER),
    *(kind for kind in CURSOR_OPERATIONS if kind != UNSUBSCRIBE),
)
_IS_CONSUMER_EVENT = type_table(_CONSUMER_EVENTS)
_IS_NON_PERSISTENT_INERT = type_table(_NON_PERSISTENT_INERT)
_IS_TOPIC_OPERATION = type_table(TOPIC_OPERATIONS)


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
    # subscriptions deleted by an UNSUBSCRIBE of the batch (one created again later in the batch
    # is also in ``changed``, as a new subscription)
    unsubscribed: set[str] = field(default_factory=set)
    # producers a DELETE_TOPIC of the batch deleted: the ones no longer in the state lose their
    # row (``sends.changed`` may still name them; ``Producers.rows`` gives none for them)
    deleted_producers: set[str] = field(default_factory=set)
    published: int = 0
    sends: SendResult = field(default_factory=SendResult)  # receipts and changed producers

    def extend(self, later: ApplyResult) -> None:
        """Add what a later part of the same batch did (``PartitionState._apply_around_topic_operations``)."""
        self.rejects.extend(later.rejects)
        self.applied += later.applied
        self.stale += later.stale
        self.changed |= later.changed
        self.unsubscribed |= later.unsubscribed
        self.deleted_producers |= later.deleted_producers
        self.published += later.published
        self.sends.extend(later.sends)


def _stale(row: int, seq: int, fence: int) -> Reject:
    """The replay fence's refusal: ``seq`` is not above the last one applied."""
    return Reject(row, "stale_seq", f"seq {seq} is not above {fence}")


@dataclass(slots=True)
class TrimResult:
    """What ``PartitionState.trim_ledgers`` deleted and which cursors it moved."""

    removed: list[tuple[int, int]] = field(default_factory=list)  # (ledger id, last entry id)
    advanced: set[str] = field(default_factory=set)  # subscriptions whose cursor moved

    @property
    def entries_removed(self) -> int:
        return sum(last + 1 for _, last in self.removed)


class PartitionState:
    """Ledgers, cursors, consumers, producers and the replay fence (``last_seq``) of one topic
    partition."""

    __slots__ = (
        "cursors",
        "last_event_time",
        "last_seq",
        "ledgers",
        "partition",
        "producers",
        "subscriptions",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        ledgers: Ledgers | None = None,
        cursors: dict[str, Cursor] | None = None,
        last_seq: int = -1,
        last_event_time: int = 0,
        subscriptions: dict[str, Subscription] | None = None,
        producers: Producers | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.ledgers = ledgers if ledgers is not None else Ledgers()
        self.cursors = cursors if cursors is not None else {}
        self.subscriptions = subscriptions if subscriptions is not None else {}
        self.last_seq = last_seq
        self.last_event_time = last_event_time
        self.producers = producers if producers is not None else Producers()

    def subscription(self, name: str) -> Subscription:
        sub = self.subscriptions.get(name)
        if sub is None:
            sub = self.subscriptions[name] = Subscription()
        return sub

    def apply(self, batch: EventBatch, settings: EngineSettings) -> ApplyResult:
        """Apply one micro-batch of this partition's events (see the module docstring), with the
        cyclic garbage collector paused (``engine.collector``: the state holds no cycles)."""
        with collector_paused():
            return self._apply(batch, settings)

    def _apply(self, batch: EventBatch, settings: EngineSettings) -> ApplyResult:
        result = ApplyResult()
        if len(batch) == 0:
            return result
        if np.any(np.diff(batch.seq) < 0):
            batch = batch.take(np.argsort(batch.seq, kind="stable"))
        topic_operations = np.flatnonzero(_IS_TOPIC_OPERATION[batch.type])
        if topic_operations.size:
            return self._apply_around_topic_operations(batch, topic_operations, settings)

        # 1. the replay fence: seq must be above every seq applied before it
        fence = np.maximum.accumulate(np.concatenate(([self.last_seq], batch.seq[:-1])))
        stale = batch.seq <= fence
        for i in np.flatnonzero(stale).tolist():
            result.rejects.append(_stale(int(batch.row[i]), int(batch.seq[i]), int(fence[i])))
        live = ~stale
        result.stale = int(stale.sum())
        # the partition's clock: the largest event time applied so far, as of each event
        clock = np.maximum.accumulate(
            np.maximum(np.where(live, batch.event_time, self.last_event_time), self.last_event_time)
        )

        # A non-persistent topic keeps no acknowledgement state: no ledger (every message is
        # reported at 0:0, NonPersistentTopic.publishMessage), no cursor to move
        # (NonPersistentSubscription.acknowledgeMessage and redeliverUnacknowledgedMessages are
        # no-ops) and no unacked count (Consumer.addAndGetUnAckedMsgs counts only when
        # isPersistentTopic). Those events are consumed without effect; consumers still come and go.
        if is_non_persistent(self.topic):
            effective = live & ~_IS_NON_PERSISTENT_INERT[batch.type]
        else:
            effective = live

        # 2. publishes extend the ledgers; every other event sees the last entry of its own time
        lac_at = self._apply_publishes(batch, effective, result)

        # 3. consumer events, per subscription (SEND and SEND_FAILED are consumed without effect
        # here: producer dedup is separate state)
        sub_settings = settings.for_partition(self.topic, self.partition)
        cons = np.flatnonzero(effective & _IS_CONSUMER_EVENT[batch.type] & (batch.sub_code >= 0))
        if cons.size:
            cols = _EventColumns(batch)
            by_sub = cons[np.argsort(batch.sub_code[cons], kind="stable")]
            codes = batch.sub_code[by_sub]
            bounds = np.flatnonzero(np.diff(codes)) + 1
            for group in np.split(by_sub, bounds):
                name = batch.sub_names[int(batch.sub_code[group[0]])]
                self._apply_subscription(name, group, batch, cols, sub_settings, lac_at, clock, result)

        # 4. producers: dedup decisions and receipts, in seq order among themselves
        result.sends = self.producers.apply(
            batch, live, lac_at.published, self.last_event_time, self.topic, settings
        )
        result.rejects.extend(Reject(*r) for r in result.sends.rejects)

        # a refused command is still consumed (counted as applied and recorded as rejected):
        # like the broker, the engine answered it
        result.applied = int(live.sum())
        live_seq = batch.seq[live]
        if live_seq.size:
            self.last_seq = int(live_seq.max())
            self.last_event_time = max(self.last_event_time, int(batch.event_time[live].max()))
        # 4. client timers due by the end of the batch (the clock only moves with events)
        for name, sub in self.subscriptions.items():
            due = sub.next_due()
            if due is not None and due <= self.last_event_time and name in self.cursors:
                sub.fire_timers(self.cursors[name], self.last_event_time, sub_settings)
        for name, sub in self.subscriptions.items():
            if sub.changes:
                result.changed.add(name)
        if result.unsubscribed:  # a name an ack marked before its UNSUBSCRIBE has no cursor now
            result.changed.intersection_update(self.cursors)
        self._place_cursors_before_first_ledger(result)
        return result

    def _apply_around_topic_operations(
        self, batch: EventBatch, at: np.ndarray, settings: EngineSettings
    ) -> ApplyResult:
        """A batch (sorted by seq) with LOAD_TOPIC or DELETE_TOPIC events: the events between
        them are applied as batches of their own, each topic operation between them
        (``_load_topic``, ``_delete_topic``), and the results joined. A topic loads or goes
        rarely, so the batch that holds one pays the split."""
        result = ApplyResult()
        start = 0
        for k in [*at.tolist(), len(batch)]:
            if k > start:
                result.extend(self._apply(batch.take(np.arange(start, k)), settings))
            if k < len(batch):
                self._topic_operation(batch, k, settings, result)
            start = k + 1
        if result.unsubscribed:
            result.changed.intersection_update(self.cursors)
        return result

    def _topic_operation(
        self, batch: EventBatch, i: int, settings: EngineSettings, result: ApplyResult
    ) -> None:
        """LOAD_TOPIC or DELETE_TOPIC at ``i``, past the replay fence. A non-persistent topic
        keeps nothing beyond the broker's object of it (``NonPersistentTopic`` holds its
        subscriptions in memory only), so its load is also the deletion of what came before."""
        seq = int(batch.seq[i])
        if seq <= self.last_seq:
            result.rejects.append(_stale(int(batch.row[i]), seq, self.last_seq))
            result.stale += 1
            return
        self.last_seq = seq
        self.last_event_time = max(self.last_event_time, int(batch.event_time[i]))
        result.applied += 1
        if batch.type[i] == DELETE_TOPIC or is_non_persistent(self.topic):
            self._delete_topic(result)
        else:
            self._load_topic(seq, settings, result)

    def _load_topic(self, seq: int, settings: EngineSettings, result: ApplyResult) -> None:
        """LOAD_TOPIC: the broker loaded the topic partition afresh (its start, or the topic
        moving to it). The new topic object (``BrokerService.loadOrCreatePersistentTopic``) has
        no consumer: one still connected here was never closed (a broker stopped with
        ``kill -9``) and goes now (``Subscription.close_all``). Each cursor is recovered from
        what it persisted (``ManagedCursorImpl.recoveredCursor``), which counts the consumed
        entries afresh from the precise backlog: what a cursor reset left counted
        (``Cursor.consumed_overcount``) is gone. No subscription has a dispatcher until a
        consumer joins it (``Subscription.dispatcher``)."""
        sub_settings = settings.for_partition(self.topic, self.partition)
        for name, cursor in self.cursors.items():
            sub = self.subscription(name)
            if sub.consumers:
                sub.close_all(cursor, seq, self.last_event_time, sub_settings)
                result.changed.add(name)
            if sub.dispatcher:  # the new object's subscription has none until a consumer joins
                sub.dispatcher = False
                result.changed.add(name)
            if cursor.consumed_overcount:
                cursor.consumed_overcount = 0
                result.changed.add(name)

    def _delete_topic(self, result: ApplyResult) -> None:
        """DELETE_TOPIC: the broker deleted the topic partition (``PersistentTopic.delete``,
        from the admin API or the inactive-topic GC): every subscription
        (``PersistentTopic.unsubscribe``), every ledger (``ManagedLedgerImpl.asyncDelete``) and
        the deduplication state (its cursor is one of the managed ledger's) go. A topic of the
        same name made later starts afresh: new ledgers, no subscription, and a producer's
        sequence ids are new to it. The replay fence stays: it is this partition's event
        order, which goes on across topic objects."""
        result.unsubscribed.update(self.cursors)
        result.changed.clear()
        self.cursors.clear()
        self.subscriptions.clear()
        self.ledgers = Ledgers()
        result.deleted_producers.update(self.producers.by_name)
        dedup_enabled = self.producers.dedup_enabled
        self.producers = Producers()
        self.producers.dedup_enabled = dedup_enabled

    def _place_cursors_before_first_ledger(self, result: ApplyResult) -> None:
        """A cursor opened on a topic with no entry yet sits before the ledger that gets the first.

        The broker opens a ledger when the topic loads; ManagedLedgerImpl.asyncOpenCursor on that
        empty ledger puts mark-delete at ``(currentLedger, -1)``, and ``internalStats`` shows it so.
        Events name a ledger only when an entry lands in it, so a cursor opened before any PUBLISH
        is at EARLIEST until then, and moves to ``(first ledger, -1)`` here: the same place (no
        entry lies between them), named as the broker names it.
        """
        first = self.ledgers.first_ledger_id
        if first is None:
            return
        for name, cursor in self.cursors.items():
            if cursor.mark_delete == EARLIEST:
                cursor.mark_delete = (first, -1)
                result.changed.add(name)

    def trim_ledgers(self, first_retained_ledger_id: int) -> TrimResult:
        """Delete the ledgers below ``first_retained_ledger_id``, as a topic's retention does.

        ManagedLedgerImpl.internalTrimLedgers in Pulsar's order: first
        ``advanceCursorsIfNecessary`` (every cursor behind the last deleted entry is mark-deleted
        there, see ``Cursor.advance_past_deleted_ledgers``), then ``doDeleteLedgers``. The last
        known ledger is never deleted (``Ledgers.trim_before``). A moved cursor's subscription
        forgets the replays it can no longer deliver (``Subscription.forget_deleted``); the
        changes are in its ``changes``. Not an event: ``last_seq`` and the event clock stay as
        they are. Idempotent: a second call deletes nothing.
        """
        ledger_list = list(self.ledgers)
        removable = [(lid, last) for lid, last in ledger_list[:-1] if lid < first_retained_ledger_id]
        if not removable:
            return TrimResult()
        # calculateLastEntryInLedgerList: every known ledger has entries, so it is the last one's
        highest = removable[-1]
        lac = self.ledgers.last_position
        advanced = {
            name
            for name, cursor in self.cursors.items()
            if cursor.advance_past_deleted_ledgers(highest, self.ledgers, lac)
        }
        for name in advanced:
            sub = self.subscriptions.get(name)
            if sub is not None:
                sub.forget_deleted(self.cursors[name].mark_delete)
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
        lac_key = -1 if lac == EARLIEST else (int(np.searchsorted(ranks, lac[0])) << 32) | (lac[1] + 1)
        keys = np.where(in_range, keys, -1)
        running = np.maximum.accumulate(np.concatenate(([lac_key], keys)))[:-1]
        ok = in_range & (keys > running)
        timeline = _LacTimeline(lac, idx[ok], ledger[ok], entry[ok])
        refused = np.flatnonzero(~ok)
        # an out-of-order PUBLISH is named against the last entry when it came
        lasts = timeline.positions(idx[refused]) if refused.size else []
        for i, last in zip(refused.tolist(), lasts, strict=True):
            row = int(batch.row[idx[i]])
            pos = (int(ledger[i]), int(entry[i]))
            if not in_range[i]:
                result.rejects.append(
                    Reject(
                        row,
                        "invalid_value",
                        f"PUBLISH position {position_text(pos)} outside 0..{MAX_ENTRY_ID}",
                    )
                )
            else:
                result.rejects.append(
                    Reject(
                        row,
                        PublishOutOfOrder.reason,
                        f"PUBLISH {position_text(pos)} is not after {position_text(last)}",
                    )
                )
        self.ledgers.publish_run(ledger[ok], entry[ok])
        result.published = int(ok.sum())
        return timeline

    # ---- one subscription -----------------------------------------------------------
    def _apply_subscription(
        self,
        name: str,
        group: np.ndarray,
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        lac_at: _LacTimeline,
        clock: np.ndarray,
        result: ApplyResult,
    ) -> None:
        """The events of one subscription (``group``: batch indices, ascending), in order.

        SUBSCRIBE and CLOSE_CONSUMER cut the group into epochs, in which the subscription's
        type, connected consumers and active consumer stay as they are (``_epochs``). An
        epoch's first event is applied before the rest is looked at; then, on an Exclusive or
        Failover subscription, the DISPATCH, NACK and REDELIVER commands that change nothing
        (``Subscription.inert_commands``) are dropped from it, so the individual acks between
        them form runs, and ``_apply_events`` applies what is left.
        """
        kinds = batch.type[group]
        individual = (kinds == ACK) & (batch.ack_type[group] == ACK_INDIVIDUAL)
        within: np.ndarray | None = None  # the DISPATCHes within their last entry, if needed
        for lo, hi, filterable in _epochs(kinds, settings.implicit_consumers):
            if not filterable:
                keep = np.arange(lo, hi)
                self._apply_events(
                    name, group[keep], individual[keep], batch, cols, settings, lac_at, clock, result
                )
                continue
            # the SUBSCRIBE or CLOSE_CONSUMER that opens the epoch (or its first event) first
            first = group[lo : lo + 1]
            self._ordered_segment(
                name,
                first.tolist(),
                lac_at.positions(first),
                clock[first].tolist(),
                batch,
                cols,
                settings,
                result,
            )
            keep = np.arange(lo + 1, hi)
            sub = self.subscriptions.get(name)
            cursor = self.cursors.get(name)
            if sub is not None and cursor is not None:
                members = group[lo + 1 : hi]
                inert = sub.inert_commands(
                    cursor, kinds[lo + 1 : hi], batch.consumer_id[members], batch.event_time[members]
                )
                if inert is not None:
                    if within is None:
                        within = self._dispatches_within_lac(group, kinds, batch, lac_at)
                    # a DISPATCH beyond its last entry is refused: it stays
                    drop = inert & (within[lo + 1 : hi] | (kinds[lo + 1 : hi] != DISPATCH))
                    keep = keep[~drop]
            self._apply_events(
                name, group[keep], individual[keep], batch, cols, settings, lac_at, clock, result
            )

    @staticmethod
    def _dispatches_within_lac(
        group: np.ndarray, kinds: np.ndarray, batch: EventBatch, lac_at: _LacTimeline
    ) -> np.ndarray:
        """Which events of ``group`` are DISPATCHes of a position at or below the last published
        entry of their time (the others are refused, or are no DISPATCH)."""
        lac_l, lac_e = lac_at.arrays(group)
        led, ent = batch.ledger_id[group], batch.entry_id[group]
        return (kinds == DISPATCH) & ((led < lac_l) | ((led == lac_l) & (ent <= lac_e)))

    def _apply_events(
        self,
        name: str,
        members: np.ndarray,
        individual: np.ndarray,
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        lac_at: _LacTimeline,
        clock: np.ndarray,
        result: ApplyResult,
    ) -> None:
        """The events ``members`` (batch indices, ascending; ``individual``: which of them are
        individual acks) in order.

        Runs of more than ``_LONG_RUN`` individual acks go to ``_individual_ack_segment``;
        every other event is applied one by one (``_ordered_segment``), the acks of a shorter
        run too (the cursor side staged, which beats the array set-up there). What every event
        needs from the arrays (its last published entry, its clock) is read for all at once,
        and only for the events that remain after ``_apply_subscription`` dropped the inert
        ones.
        """
        if members.size == 0:
            return
        cuts, ack_runs = _long_ack_runs(individual)
        events = members.tolist()
        lacs = lac_at.positions(members)
        clocks = clock[members].tolist()
        for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True):
            seg, seg_lacs, seg_clocks = events[lo:hi], lacs[lo:hi], clocks[lo:hi]
            if lo in ack_runs:
                self._individual_ack_segment(
                    name, seg, seg_lacs, seg_clocks, batch, cols, settings, lac_at, result
                )
            else:
                self._ordered_segment(name, seg, seg_lacs, seg_clocks, batch, cols, settings, result)

    def _individual_ack_segment(
        self,
        name: str,
        events: list[int],
        lacs: list[Position],
        clocks: list[int],
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        lac_at: _LacTimeline,
        result: ApplyResult,
    ) -> None:
        """A run of individual acks: they commute, but a client timer falling due inside the run
        must fire between the acks around it, so the run is cut at each timer's time."""
        start, end = 0, len(events)
        while start < end:
            sub = self.subscriptions.get(name)
            due = sub.next_due() if sub is not None else None
            # the acks before the timer (clocks only grow); acks never add a timer
            stop = end if due is None else bisect.bisect_left(clocks, due, start, end)
            if stop == start:
                self._fire(name, clocks[start], settings)
                stop = start + 1
            self._individual_acks(
                name, events[start:stop], lacs[start:stop], batch, cols, settings, lac_at, result
            )
            start = stop

    def _ordered_segment(
        self,
        name: str,
        events: list[int],
        lacs: list[Position],
        clocks: list[int],
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        result: ApplyResult,
    ) -> None:
        """Order-sensitive events one by one, each after the client timers due by its clock.

        DISPATCH, over half of a typical stream, and the individual acks of a short run take
        direct paths once the subscription exists; everything else (and a DISPATCH before its
        SUBSCRIBE) goes through ``_ordered_event``, the only place that creates a cursor or a
        subscription, after which both are looked up again.

        Four shortcuts keep the per-event work small, each exact:

        * on a Shared or Key_Shared subscription with batch-index acks off, each run of
          DISPATCHes and individual acks is handed to ``Subscription.apply_run``, which applies
          them in one loop with the consumer side of ``dispatch`` and ``ack_entry`` written out,
          staging the acks' positions; it stops at the first event it cannot take (a refusal, a
          timer due, a consumer to attach, a cursor that cannot stage), which is applied below;
        * on an Exclusive or Failover subscription (which has no client timer) with batch-index
          acks off, each run of cumulative acks of one whole entry from connected consumers
          (``Subscription.cumulative_run_end``) moves mark-delete in one loop
          (``Cursor.mark_delete_run``) while the cursor has no acked range or batch state; it
          stops where the plain call would refuse or do more;

        * the cursor side of individual acks is staged (``Cursor.stage_ack``) and applied at
          once (``Cursor.apply_staged``) before anything that reads the cursor: a timer, an
          implicit attach, an ``_ordered_event``, an ack that cannot be staged, the segment's
          end. Between those, DISPATCH and the consumer side of an ack read only the cursor's
          type and, with batch-index acks on, its batch state, which staging requires off;
        * a DISPATCH on an Exclusive or Failover subscription with no replay entry
          (``Subscription.dispatch_is_inert``) from a connected consumer, at or below its last
          published entry, changes nothing and is passed over without a call.
        """
        sub = self.subscriptions.get(name)
        cursor = self.cursors.get(name)
        inert = _dispatches_inert(sub, cursor)
        implicit = settings.implicit_consumers
        enabled = settings.acknowledgment_at_batch_index_level_enabled
        types, ack_types, consumer_ids = cols.type, cols.ack_type, cols.consumer_id
        batch_sizes, times = cols.batch_size, cols.event_time
        positions: dict[int, Position] | None = None  # of the DISPATCHes, built at the first
        staged = _StagedAcks(self.ledgers, enabled)
        acked = False  # an individual ack was applied: the name joins result.changed at the end
        # runs of DISPATCHes and individual acks on a Shared or Key_Shared subscription
        # (Subscription.apply_run), of cumulative acks on an Exclusive or Failover one
        # (Cursor.mark_delete_run); their lists built when the first run is met
        runs = len(events) >= _MIN_RUN and not enabled
        run: RunEvents | None = None
        k, n = 0, len(events)
        while k < n:
            if runs and cursor is not None and sub is not None:
                if run is None:
                    run = self._run_events(events, lacs, clocks, cols)
                shared = cursor.sub_type in _INDIVIDUAL_ACK_MODES
                if not shared and run.kinds[k] == RUN_CUMULATIVE:
                    end = sub.cumulative_run_end(run, k)
                    if end > k:
                        staged.flush(cursor)  # as before a cumulative ack
                        taken = cursor.mark_delete_run(run.targets, lacs, k, end)
                        if taken > k:
                            result.changed.add(name)
                            k = taken
                            continue
                elif shared and run.kinds[k] > 0:
                    if run.hashes is None and cursor.sub_type == "Key_Shared":
                        run.hashes = cols.sticky_key_hashes(events)
                    k_run, last = sub.apply_run(
                        cursor,
                        run,
                        k,
                        self.ledgers,
                        staged.last_entries,
                        True if staged.lac is not None else None,
                        staged.positions,
                        settings,
                    )
                    if last >= 0:  # acks staged: as ``_StagedAcks.stage_entries`` leaves it
                        staged.lac = lacs[last]
                        acked = True
                    if k_run > k:
                        k = k_run
                        continue
            i, lac, now = events[k], lacs[k], clocks[k]
            k += 1
            if implicit and (sub is None or consumer_ids[i] not in sub.consumers):
                if cursor is not None:
                    staged.flush(cursor)
                self._attach_implicitly(name, i, cols, settings, result)
                sub = self.subscriptions.get(name)
                inert = _dispatches_inert(sub, cursor)
            kind = types[i]
            if kind == ACK and ack_types[i] == ACK_INDIVIDUAL:
                if cursor is None:
                    result.rejects.append(_never_subscribed(cols.row[i], name))
                    continue
                if sub is not None:
                    due = sub.next_due()
                    if due is not None and due <= now:
                        staged.flush(cursor)
                        sub.fire_timers(cursor, now, settings)
                if self._ack_event(name, cursor, sub, i, lac, batch, cols, settings, result, staged):
                    acked = True
                continue
            if sub is not None and cursor is not None:
                due = sub.next_due()
                if due is not None and due <= now:
                    staged.flush(cursor)
                    sub.fire_timers(cursor, now, settings)
                if kind == DISPATCH:  # half of a typical stream: ``_dispatch``, written out
                    if run is not None:
                        pos = run.targets[k - 1]
                    else:
                        if positions is None:
                            positions = cols.dispatch_positions(events)
                        pos = positions[i]
                    consumer_id = consumer_ids[i]
                    try:
                        if pos > lac:
                            raise _dispatch_beyond(pos, lac)
                        if inert and consumer_id in sub.consumers:
                            continue
                        sub.dispatch(
                            cursor,
                            consumer_id,
                            pos,
                            batch_sizes[i],
                            cols.sticky_key_hash(i) if cursor.sub_type == "Key_Shared" else 0,
                            times[i],
                            settings,
                        )
                    except EngineRefusal as refusal:
                        result.rejects.append(Reject(cols.row[i], refusal.reason, str(refusal)))
                        result.changed.add(name)  # batch state may have been recorded before it
                    continue
                if kind == ACK:  # not an individual one: cumulative, or only the consumer check
                    if staged.lac is not None:
                        staged.flush(cursor)
                    try:
                        self._ack_command(name, sub, cursor, i, batch, cols, lac, enabled, result)
                    except EngineRefusal as refusal:
                        result.rejects.append(Reject(cols.row[i], refusal.reason, str(refusal)))
                        result.changed.add(name)  # batch state may have been recorded before it
                    continue
            if cursor is not None:
                staged.flush(cursor)
            self._ordered_event(name, i, batch, cols, settings, lac, result)
            sub = self.subscriptions.get(name)
            cursor = self.cursors.get(name)
            inert = _dispatches_inert(sub, cursor)
        if cursor is not None:
            staged.flush(cursor)
        if acked:
            result.changed.add(name)

    def _run_events(
        self, events: list[int], lacs: list[Position], clocks: list[int], cols: _EventColumns
    ) -> RunEvents:
        """``events`` (batch indices) as ``Subscription.apply_run`` and
        ``Subscription.cumulative_run_end`` read them, as lists in the segment's order: which are
        a DISPATCH, an individual ACK with at least one id or a cumulative ACK of one whole
        entry, and the position or positions each names."""
        batch = cols._batch
        at = np.asarray(events, dtype=np.int64)
        types = batch.type[at]
        lo, hi = batch.msg_offsets[at], batch.msg_offsets[at + 1]
        sets = batch.ackset_offsets
        ack_types = batch.ack_type[at]
        acks = (types == ACK) & (ack_types == ACK_INDIVIDUAL) & (hi > lo)
        whole = sets[lo] == sets[hi]
        cumulative = (types == ACK) & (ack_types == ACK_CUMULATIVE) & (hi - lo == 1) & whole
        kinds = np.where(
            types == DISPATCH,
            RUN_DISPATCH,
            np.where(
                acks,
                np.where(whole, np.where(hi - lo == 1, RUN_ACK, RUN_ACKS), RUN_PARTIAL_ACKS),
                np.where(cumulative, RUN_CUMULATIVE, 0),
            ),
        )
        ledger, entry = batch.ledger_id[at], batch.entry_id[at]
        named = acks | cumulative
        if named.any():  # an ACK's first id, in place of its (unused) entry columns
            first = np.where(named, lo, 0)
            ledger = np.where(named, batch.msg_ledger[first], ledger)
            entry = np.where(named, batch.msg_entry[first], entry)
        targets: list[object] = positions_of(ledger.tolist(), entry.tolist())
        several = np.flatnonzero(kinds >= RUN_ACKS)
        if several.size:
            msg_positions = cols.msg_positions()
            for k, start, end in zip(
                several.tolist(), lo[several].tolist(), hi[several].tolist(), strict=True
            ):
                targets[k] = msg_positions[start:end]
            partial = np.flatnonzero(kinds == RUN_PARTIAL_ACKS)
            spans = zip(partial.tolist(), lo[partial].tolist(), hi[partial].tolist(), strict=True)
            for k, start, end in spans:
                # which ids name a whole entry: no ack-set words
                wholes = (sets[start:end] == sets[start + 1 : end + 1]).tolist()
                targets[k] = (targets[k], wholes)
        return RunEvents(
            kinds=kinds.tolist(),
            targets=targets,
            consumer_ids=batch.consumer_id[at].tolist(),
            batch_sizes=batch.batch_size[at].tolist(),
            times=list(map(cols.event_time.__getitem__, events)),  # the batch list's ints, no new ones
            clocks=clocks,
            lacs=lacs,
        )

    def _attach_implicitly(
        self, name: str, i: int, cols: _EventColumns, settings: SubscriptionSettings, result: ApplyResult
    ) -> None:
        """``implicit_consumers``: a command from a consumer id the subscription does not know
        attaches that consumer, as if it had subscribed just before the command.

        A stream that starts in the middle of a cluster's life (``ackstate bootstrap``, or a
        plugin installed on a running broker) misses the SUBSCRIBE of every consumer already
        connected. The consumer gets the subscription's type, its id as name, priority level 0 and the
        client defaults (no ack timeout, 60 s nack delay, no dead letter), and is marked
        ``implicit``. Only a subscription the state knows takes one (its cursor says where it
        is); where the broker would refuse the SUBSCRIBE (a second consumer on an Exclusive
        subscription), nothing is attached and the command is refused as ``unknown_consumer``.
        """
        cursor = self.cursors.get(name)
        if cursor is None or cols.type[i] not in _ATTACHING:
            return
        consumer_id = cols.consumer_id[i]
        sub = self.subscription(name)
        if consumer_id in sub.consumers or consumer_id < 0:
            return
        now = cols.event_time[i]
        consumer = Consumer(
            consumer_id=consumer_id,
            name=str(consumer_id),
            priority_level=0,
            order=0,
            subscribed_at=now,
            implicit=True,
        )
        try:
            sub.subscribe(cursor, consumer, cursor.sub_type, cols.seq[i], settings)
        except EngineRefusal:
            return
        result.changed.add(name)

    def _fire(self, name: str, now: int, settings: SubscriptionSettings) -> None:
        sub = self.subscriptions.get(name)
        cursor = self.cursors.get(name)
        if sub is None or cursor is None:
            return
        due = sub.next_due()
        if due is not None and due <= now:
            sub.fire_timers(cursor, now, settings)

    def _ordered_event(
        self,
        name: str,
        i: int,
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        lac: Position,
        result: ApplyResult,
    ) -> None:
        cursor = self.cursors.get(name)
        kind = cols.type[i]
        now = cols.event_time[i]
        consumer_id = cols.consumer_id[i]
        enabled = settings.acknowledgment_at_batch_index_level_enabled
        try:
            if kind == SUBSCRIBE:
                sub_type = str(batch.sub_type[i])
                if sub_type not in SUB_TYPES:
                    raise InvalidValue(f"unknown subscription type {sub_type!r}")
                created = cursor is None
                if created:
                    initial = str(batch.initial_position[i] or "Latest")
                    cursor = Cursor.subscribe(sub_type, initial, self.ledgers, lac)
                consumer = Consumer(
                    consumer_id=consumer_id,
                    name=str(batch.consumer_name[i] if batch.consumer_name[i] is not None else consumer_id),
                    priority_level=int(batch.priority_level[i]),
                    order=0,
                    subscribed_at=now,
                    ack_timeout_ms=int(batch.ack_timeout_ms[i]),
                    negative_ack_delay_ms=int(batch.negative_ack_delay_ms[i]),
                    max_redeliver_count=int(batch.max_redeliver_count[i]),
                )
                try:
                    self.subscription(name).subscribe(cursor, consumer, sub_type, cols.seq[i], settings)
                finally:
                    # Pulsar creates the cursor before the consumer is admitted or refused
                    if created:
                        self.cursors[name] = cursor
                        result.changed.add(name)
                result.changed.add(name)
                return
            if kind == CREATE_SUBSCRIPTION:
                self._create_subscription(name, cursor, batch, i, lac, result)
                return
            if cursor is None:
                raise UnknownSubscription(f"event for subscription {name!r}, which never subscribed")
            if kind == UNSUBSCRIBE:
                self._unsubscribe(name, result)
                return
            sub = self.subscription(name)
            if kind in (RESET_CURSOR, MARK_DELETE):
                self._cursor_operation(name, sub, cursor, kind, batch, i, lac, result)
                return
            if kind == CLOSE_CONSUMER:
                sub.close(cursor, consumer_id, cols.seq[i], now, settings)
                return
            if kind == DISPATCH:
                self._dispatch(sub, cursor, i, cols.dispatch_positions([i])[i], cols, lac, settings)
                return
            if kind in (NACK, REDELIVER):
                lo, hi = cols.msg_offsets[i], cols.msg_offsets[i + 1]
                positions = cols.msg_positions()[lo:hi]
                if kind == NACK:
                    sub.nack(cursor, consumer_id, positions, now)
                else:
                    sub.redeliver(cursor, consumer_id, positions or None, now, REDELIVER_REASON, settings)
                return
            self._ack_command(name, sub, cursor, i, batch, cols, lac, enabled, result)
        except EngineRefusal as refusal:
            result.rejects.append(Reject(cols.row[i], refusal.reason, str(refusal)))
            if name in self.cursors:
                result.changed.add(name)  # batch state may have been recorded before the refusal

    def _unsubscribe(self, name: str, result: ApplyResult) -> None:
        """UNSUBSCRIBE: the broker deleted the subscription (PersistentSubscription.delete, after
        a consumer's unsubscribe or the admin API's delete): its cursor, consumers, pending acks
        and replays go with it. The broker refuses the unsubscribe of a consumer while others
        are connected unless forced, and closes the consumers first, so the events before it
        close them; whatever is still connected here goes too. A later SUBSCRIBE of the same
        name makes a new subscription, as the broker does."""
        del self.cursors[name]
        self.subscriptions.pop(name, None)
        result.changed.discard(name)
        result.unsubscribed.add(name)

    def _create_subscription(
        self, name: str, cursor: Cursor | None, batch: EventBatch, i: int, lac: Position, result: ApplyResult
    ) -> None:
        """CREATE_SUBSCRIPTION: the admin API made the subscription, with no consumer
        (``PersistentTopicsBase.internalCreateSubscription``: ``createSubscription`` at the last
        entry, then ``resetCursor`` to the message id asked for). The event names the mark-delete
        the reset left. The subscription has no dispatcher (type "None") until a consumer joins
        it, and its cursor holds ``TYPE_BEFORE_DISPATCHER`` meanwhile.

        The broker refuses to make a subscription it holds (409, "Subscription already exists"),
        so one ackstate holds here is one a consumer joined between the creation and the reset:
        the reset is applied to it as a RESET_CURSOR.
        """
        if cursor is not None:
            self._cursor_operation(name, self.subscription(name), cursor, RESET_CURSOR, batch, i, lac, result)
            return
        created = Cursor(TYPE_BEFORE_DISPATCHER)
        created.reset((int(batch.ledger_id[i]), int(batch.entry_id[i])), self.ledgers, lac)
        self.cursors[name] = created
        self.subscription(name).dispatcher = False
        result.changed.add(name)

    def _cursor_operation(
        self,
        name: str,
        sub: Subscription,
        cursor: Cursor,
        kind: int,
        batch: EventBatch,
        i: int,
        lac: Position,
        result: ApplyResult,
    ) -> None:
        """RESET_CURSOR (``Cursor.reset``) or MARK_DELETE (``Cursor.mark_delete_to``): the broker
        moved the cursor itself, with no consumer's command.

        The subscription's consumers keep their pending acks, as ``Consumer.pendingAcks`` does:
        a reset disconnects them first (``dispatcher.disconnectActiveConsumers``; each arrives
        as its own CLOSE_CONSUMER), and a mark-delete leaves them to be acked or closed. Replays
        at or below the new mark-delete are forgotten (``Subscription.forget_deleted``): the
        dispatcher's next replay read drops what the cursor counts as deleted.
        """
        pos = (int(batch.ledger_id[i]), int(batch.entry_id[i]))
        result.changed.add(name)
        if kind == RESET_CURSOR:
            cursor.reset(pos, self.ledgers, lac)
        else:
            cursor.mark_delete_to(pos, self.ledgers, lac)
        sub.forget_deleted(cursor.mark_delete)

    def _ack_command(
        self,
        name: str,
        sub: Subscription,
        cursor: Cursor,
        i: int,
        batch: EventBatch,
        cols: _EventColumns,
        lac: Position,
        enabled: bool,
        result: ApplyResult,
    ) -> None:
        """An ACK other than an individual one, on a subscription that exists: a cumulative ack
        (``Consumer.messageAcked``, then ``Cursor.ack_cumulative``), else only the consumer
        check. ``_ordered_segment`` calls it directly (a quarter of the acks of the generated
        mix are cumulative), ``_ordered_event`` for the rest; refusals propagate."""
        sub.check_consumer(cols.consumer_id[i], "ACK")
        if cols.ack_type[i] != ACK_CUMULATIVE:
            return
        lo, hi = cols.msg_offsets[i], cols.msg_offsets[i + 1]
        if cursor.sub_type in _INDIVIDUAL_ACK_MODES:
            # Consumer.messageAcked: "Received cumulative ack on shared subscription, ignoring"
            raise CumulativeAckNotAllowed(
                f"cumulative ack on {cursor.sub_type} subscription {name!r} ignored"
            )
        if hi - lo != 1:
            # Consumer.messageAcked: a cumulative ack carries exactly one message id
            raise CumulativeAckMultipleIds(f"cumulative ack with {hi - lo} message ids ignored")
        cursor.ack_cumulative(self._message_id(batch, cols, lo, name), self.ledgers, lac, enabled)
        result.changed.add(name)

    def _dispatch(
        self,
        sub: Subscription,
        cursor: Cursor,
        i: int,
        pos: Position,
        cols: _EventColumns,
        lac: Position,
        settings: SubscriptionSettings,
    ) -> None:
        """DISPATCH event ``i``, of the entry at ``pos``."""
        if pos > lac:
            raise _dispatch_beyond(pos, lac)
        # An acked entry can still be dispatched: a dispatcher sends what it read before the ack
        # landed (a real 4.0.7 broker, tests/pulsar: a consumer acks 24:0 and asks for
        # redelivery; the rewound read sends 24:0 again). Consumer.sendMessages then counts it
        # like any other entry (a Shared consumer's unackedMessages grows by its batch size).
        sticky = cols.sticky_key_hash(i) if cursor.sub_type == "Key_Shared" else 0
        sub.dispatch(
            cursor,
            cols.consumer_id[i],
            pos,
            cols.batch_size[i],
            sticky,
            cols.event_time[i],
            settings,
        )

    def _message_id(self, batch: EventBatch, cols: _EventColumns, m: int, name: str) -> MessageId:
        lo, hi = cols.ackset_offsets[m], cols.ackset_offsets[m + 1]
        pos = cols.msg_positions()[m]
        if hi == lo:  # MessageId(pos) without its Python __new__: mostly cumulative acks
            return tuple.__new__(MessageId, (pos, None, 1))
        mask = words_to_mask(batch.ackset_words[lo:hi].tolist())
        return MessageId(pos, mask, cols.msg_batch_size[m] or self._batch_size_of(name, pos, mask))

    def _batch_size_of(self, name: str, pos: Position, mask: int) -> int:
        """The batch size of an acked entry whose message id does not carry it.

        Clients send ``ack_set`` without ``batch_size`` (the Python client does); the broker takes
        the size from the pending ack (Consumer.getBatchSize: ``pendingAcks.get(...)``, any
        consumer's). Else the size an earlier partial ack recorded; else the smallest size the
        ack set allows (its highest unacked index + 1: the client sets every bit of the batch
        before clearing the acked ones).
        """
        sub = self.subscriptions.get(name)
        if sub is not None:
            owner = sub.holder.get(pos)
            consumer = sub.consumers.get(owner) if owner is not None else None
            if consumer is not None and pos in consumer.pending:
                return consumer.pending[pos].batch_size
        cursor = self.cursors.get(name)
        partial = cursor.batch_acks.get(pos) if cursor is not None else None
        if partial is not None:
            return partial.batch_size
        return max(1, mask.bit_length())

    def _individual_acks(
        self,
        name: str,
        events: list[int],
        lacs: list[Position],
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        lac_at: _LacTimeline,
        result: ApplyResult,
    ) -> None:
        """A run of individual acks of one subscription as one bitmap operation.

        ``events``: batch indices; ``lacs``: the last published entry as of each of them.
        """
        if len(events) <= _SMALL_RUN and name in self.cursors:
            # between dispatches runs are short: plain calls beat the vectorised set-up
            self._individual_acks_one_by_one(name, events, lacs, batch, cols, settings, result)
            return
        seg = np.asarray(events, dtype=np.int64)
        enabled = settings.acknowledgment_at_batch_index_level_enabled
        cursor = self.cursors.get(name)
        if cursor is None:
            for i in seg.tolist():
                result.rejects.append(_never_subscribed(int(batch.row[i]), name))
            return
        sub = self.subscriptions.get(name)
        if settings.implicit_consumers:
            ids = batch.consumer_id[seg]
            seen = np.fromiter(sub.consumers if sub is not None else (), dtype=np.int64)
            _, first = np.unique(ids, return_index=True)
            for k in np.sort(first[~np.isin(ids[first], seen)]).tolist():
                self._attach_implicitly(name, int(seg[k]), cols, settings, result)
            sub = self.subscriptions.get(name)
        connected = sub.consumers if sub is not None else {}
        known = among(batch.consumer_id[seg], list(connected))
        if not known.all():
            # ServerCnx drops acks of a consumer id it does not know on the connection
            for i in seg[~known].tolist():
                result.rejects.append(
                    Reject(
                        int(batch.row[i]),
                        UnknownConsumer.reason,
                        f"ACK from consumer {int(batch.consumer_id[i])}, which is not connected",
                    )
                )
            seg = seg[known]
        counts = np.diff(batch.msg_offsets)[seg]
        midx = gather_ranges(batch.msg_offsets[:-1][seg], counts)
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
                pos = (int(led[m]), int(ent[m]))
                lac = (int(lac_l[k]), int(lac_e[k]))
                result.rejects.append(
                    Reject(
                        int(batch.row[seg[k]]),
                        AckBeyondLastPublished.reason,
                        f"ack of {position_text(pos)} beyond the last published entry "
                        f"{position_text(lac)}; the call stopped there",
                    )
                )
        has_set = np.diff(batch.ackset_offsets)[midx] > 0
        if sub is not None and cursor.sub_type in _INDIVIDUAL_ACK_MODES and sub.holds_anything():
            # the consumer side (pending acks, unacked counts) in order, before the cursor moves
            shadow: dict[Position, int] = {}
            written: dict[Position, int] = {}  # by the current command, folded in when it ends
            command = -1
            # every id of a command, also those after one beyond the last entry: the consumer
            # side runs over the whole list before the cursor call that stops at the bad one
            # (Consumer.individualAckNormal, then ManagedCursorImpl.asyncDelete)
            for m in range(len(midx)):
                if int(ev_of_msg[m]) != command:
                    command = int(ev_of_msg[m])
                    shadow.update(written)
                    written.clear()
                mid = self._message_id(batch, cols, int(midx[m]), name)
                sub.ack(
                    cursor,
                    int(batch.consumer_id[seg[command]]),
                    mid.position,
                    mid.ack_set,
                    mid.batch_size,
                    shadow,
                    settings,
                    written,
                )
        plain = applied & ~has_set
        by_ledger: dict[int, np.ndarray] = {}
        if plain.any():
            pl, pe = led[plain], ent[plain]
            order = np.argsort(pl, kind="stable")
            pl, pe = pl[order], pe[order]
            cuts = np.flatnonzero(np.diff(pl)) + 1
            for chunk_l, chunk_e in zip(np.split(pl, cuts), np.split(pe, cuts), strict=True):
                by_ledger[int(chunk_l[0])] = chunk_e
        with_set = np.flatnonzero(applied & has_set).tolist()
        batch_ids = [self._message_id(batch, cols, int(midx[m]), name) for m in with_set]
        lac_end = (int(lac_l[-1]), int(lac_e[-1]))
        cursor.ack_entries(by_ledger, batch_ids, self.ledgers, lac_end, enabled)
        result.changed.add(name)

    def _individual_acks_one_by_one(
        self,
        name: str,
        events: list[int],
        lacs: list[Position],
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        result: ApplyResult,
    ) -> None:
        """``Consumer.messageAcked`` + ``asyncDelete`` per ACK event, in order: a short piece of
        a run cut by a timer, where the vectorised set-up costs more than the calls. The cursor
        and the subscription are looked up once for the run (an ACK changes neither the
        cursor's type nor which subscription object holds the consumers; an implicit attach is
        looked up again)."""
        cursor = self.cursors[name]
        sub = self.subscriptions.get(name)
        acked = False
        for i, lac in zip(events, lacs, strict=True):
            if settings.implicit_consumers and (sub is None or cols.consumer_id[i] not in sub.consumers):
                self._attach_implicitly(name, i, cols, settings, result)
                sub = self.subscriptions.get(name)
            acked = self._ack_event(name, cursor, sub, i, lac, batch, cols, settings, result) or acked
        if acked:
            result.changed.add(name)

    def _ack_event(
        self,
        name: str,
        cursor: Cursor,
        sub: Subscription | None,
        i: int,
        lac: Position,
        batch: EventBatch,
        cols: _EventColumns,
        settings: SubscriptionSettings,
        result: ApplyResult,
        staged: _StagedAcks | None = None,
    ) -> bool:
        """One individual ACK event (after any implicit attach): the consumer side, then the
        cursor (staged in ``staged`` where it can be). Returns whether it was applied (False:
        refused, its consumer is not connected)."""
        consumer_id = cols.consumer_id[i]
        if sub is None or consumer_id not in sub.consumers:
            result.rejects.append(
                Reject(
                    cols.row[i],
                    UnknownConsumer.reason,
                    f"ACK from consumer {consumer_id}, which is not connected",
                )
            )
            return False
        sets = cols.ackset_offsets
        lo, hi = cols.msg_offsets[i], cols.msg_offsets[i + 1]
        consumer_side = cursor.sub_type in _INDIVIDUAL_ACK_MODES and sub.holds_anything()
        whole = sets[lo] == sets[hi]
        if whole and hi - lo == 1:  # one id naming a whole entry: most acks, the steps below
            pos = cols.msg_positions()[lo]
            if consumer_side:
                sub.ack_entry(cursor, consumer_id, pos, settings)
            try:
                if staged is None or not staged.stage_entry(cursor, pos, lac):
                    enabled = settings.acknowledgment_at_batch_index_level_enabled
                    cursor.ack([MessageId(pos)], self.ledgers, lac, enabled)
            except EngineRefusal as refusal:
                result.rejects.append(_refused_ack(cols.row[i], refusal))
            return True
        if whole:
            # several ids, none with an ack set: positions, without a MessageId each, and no
            # masks for a later id of the command to read
            positions = cols.msg_positions()[lo:hi]
            if consumer_side:
                for pos in positions:
                    sub.ack_entry(cursor, consumer_id, pos, settings)
        else:
            mids = [self._message_id(batch, cols, m, name) for m in range(lo, hi)]
            if consumer_side:
                before: dict[Position, int] = {}  # one command: every id reads the state before it
                written: dict[Position, int] = {}
                for mid in mids:  # all ids, as Consumer.individualAckNormal (see _individual_acks)
                    sub.ack(
                        cursor,
                        consumer_id,
                        mid.position,
                        mid.ack_set,
                        mid.batch_size,
                        before,
                        settings,
                        written,
                    )
        enabled = settings.acknowledgment_at_batch_index_level_enabled
        try:
            if whole:
                if staged is None or not staged.stage_entries(cursor, positions, lac):
                    cursor.ack(list(map(MessageId, positions)), self.ledgers, lac, enabled)
            elif staged is None or not staged.stage(cursor, mids, lac):
                cursor.ack(mids, self.ledgers, lac, enabled)
        except EngineRefusal as refusal:
            result.rejects.append(_refused_ack(cols.row[i], refusal))
        return True


def _dispatches_inert(sub: Subscription | None, cursor: Cursor | None) -> bool:
    """Whether the subscription's DISPATCHes from connected consumers change nothing
    (``Subscription.dispatch_is_inert``); read again whenever the loop looks the two up again."""
    return sub is not None and cursor is not None and sub.dispatch_is_inert(cursor)


def _dispatch_beyond(pos: Position, lac: Position) -> DispatchBeyondLastPublished:
    return DispatchBeyondLastPublished(
        f"DISPATCH of {position_text(pos)}, beyond the last published entry {position_text(lac)}"
    )


def _refused_ack(row: int, refusal: EngineRefusal) -> Reject:
    """An ACK whose cursor side the cursor refused part way (``Cursor.ack`` stops at the id)."""
    return Reject(row, refusal.reason, f"{refusal}; the call stopped there")


def _never_subscribed(row: int, name: str) -> Reject:
    return Reject(row, UnknownSubscription.reason, f"ACK for subscription {name!r}, which never subscribed")


_MIN_RUN = 8  # events a segment needs for its runs to be looked for (Subscription.apply_run)
_SMALL_RUN = 8  # individual-ack events below which a run is applied call by call


# the events that make or delete a subscription, or change its type or its connected consumers
_IS_STRUCTURAL = type_table((SUBSCRIBE, CLOSE_CONSUMER, UNSUBSCRIBE, CREATE_SUBSCRIPTION))
_LONG_RUN = 64  # individual-ack events above which a run is applied as arrays
_MIN_EPOCH = 64  # events an epoch needs for its inert commands to be looked for


def _long_ack_runs(individual: np.ndarray) -> tuple[list[int], set[int]]:
    """Where ``_apply_events`` cuts its events (``individual``: which are individual acks), and
    which pieces start a run of more than ``_LONG_RUN`` individual acks.

    With no more individual acks than that in all, no run can be long: one piece, without the
    run arithmetic (a dozen numpy calls, for most subscriptions of a batch of many)."""
    if np.count_nonzero(individual) <= _LONG_RUN:
        return [], set()
    # runs of equal "is an individual ack"; the long ack runs are the pieces cut out
    changes = np.flatnonzero(np.diff(individual.astype(np.int8))) + 1
    starts = np.concatenate(([0], changes))
    ends = np.concatenate((changes, [individual.size]))
    long_run = individual[starts] & (ends - starts > _LONG_RUN)
    cuts = np.unique(np.concatenate((starts[long_run], ends[long_run])))
    return cuts[(cuts > 0) & (cuts < individual.size)].tolist(), set(starts[long_run].tolist())


def _epochs(kinds: np.ndarray, implicit_consumers: bool) -> list[tuple[int, int, bool]]:
    """A subscription's group cut at its SUBSCRIBE and CLOSE_CONSUMER events, as
    ``(lo, hi, filterable)``: in a filterable epoch no event after the first changes the
    subscription's type or consumers, so which DISPATCHes change nothing can be decided for all
    of them once the first is applied. Epochs shorter than ``_MIN_EPOCH`` are joined into
    unfilterable pieces (the look costs more than it saves), and so is everything under
    ``implicit_consumers``, where any command can attach a consumer.
    """
    n = kinds.size
    if implicit_consumers or n < _MIN_EPOCH:
        return [(0, n, False)]
    starts = [0, *(k for k in np.flatnonzero(_IS_STRUCTURAL[kinds]).tolist() if k > 0)]
    ends = [*starts[1:], n]
    out: list[tuple[int, int, bool]] = []
    for lo, hi in zip(starts, ends, strict=True):
        if hi - lo >= _MIN_EPOCH:
            out.append((lo, hi, True))
        elif out and not out[-1][2]:
            out[-1] = (out[-1][0], hi, False)
        else:
            out.append((lo, hi, False))
    return out


class _StagedAcks:
    """The individual acks of one ``_ordered_segment`` whose cursor side waits
    (``Cursor.stage_ack``): the whole-entry positions, and the last staged call's last published
    entry. ``flush`` applies them before anything reads the cursor."""

    __slots__ = ("enabled", "lac", "last_entries", "ledgers", "positions")

    def __init__(self, ledgers: Ledgers, acknowledgment_at_batch_index_level_enabled: bool) -> None:
        self.ledgers = ledgers
        # each ledger's last entry id: the ledgers do not change while a subscription applies
        # (publishes apply first), and a dictionary answers "does it exist" quicker than a search
        self.last_entries: dict[int, int] = dict(ledgers)
        self.enabled = acknowledgment_at_batch_index_level_enabled
        self.positions: list[Position] = []
        self.lac: Position | None = None  # None: no call staged since the last flush

    def stage(self, cursor: Cursor, message_ids: list[MessageId], lac: Position) -> bool:
        """Stage one ack call; False when it cannot be (``Cursor.can_stage_acks``,
        ``Cursor.stage_ack``): then what was staged is applied, and the caller applies the call.
        A refused call (``stage_ack`` raises) counts as staged, as ``ack`` auto-advances then."""
        # staged acks change neither what ``can_stage_acks`` reads nor its answer
        if self.lac is not None or cursor.can_stage_acks(self.enabled, self.ledgers):
            previous, self.lac = self.lac, lac
            if cursor.stage_ack(message_ids, self.last_entries, lac, self.positions):
                return True
            self.lac = previous
        self.flush(cursor)
        return False

    def stage_entries(self, cursor: Cursor, positions: list[Position], lac: Position) -> bool:
        """``stage`` of a call whose ids all name whole entries, given as their positions
        (``Cursor.stage_entry_acks``)."""
        if self.lac is not None or cursor.can_stage_acks(self.enabled, self.ledgers):
            previous, self.lac = self.lac, lac
            if cursor.stage_entry_acks(positions, self.last_entries, lac, self.positions):
                return True
            self.lac = previous
        self.flush(cursor)
        return False

    def stage_entry(self, cursor: Cursor, pos: Position, lac: Position) -> bool:
        """``stage_entries`` of a call of one id (most acks): an existing entry at or below
        ``lac`` (``Cursor.stage_entry_acks``'s checks) is staged here without a list and two
        calls; anything else goes through ``stage_entries``, which refuses or declines it."""
        if (
            (self.lac is not None or cursor.can_stage_acks(self.enabled, self.ledgers))
            and pos <= lac
            and 0 <= pos[1] <= self.last_entries.get(pos[0], -1)
        ):
            self.lac = lac
            self.positions.append(pos)
            return True
        return self.stage_entries(cursor, [pos], lac)

    def flush(self, cursor: Cursor) -> None:
        if self.lac is not None:
            cursor.apply_staged(self.positions, self.ledgers, self.lac)
            self.positions = []
            self.lac = None


class _LacTimeline:
    """The last published entry as of each event of a batch (publishes are applied first)."""

    __slots__ = ("_before", "_entry", "_idx", "_ledger", "_positions")

    def __init__(self, before: Position, idx: np.ndarray, ledger: np.ndarray, entry: np.ndarray) -> None:
        self._before, self._idx, self._ledger, self._entry = before, idx, ledger, entry
        self._positions: list[Position] | None = None  # [before, each accepted publish], built once

    @property
    def published(self) -> np.ndarray:
        """Indices of the PUBLISH events the ledgers accepted, ascending."""
        return self._idx

    def positions(self, events: np.ndarray) -> list[Position]:
        """The last published entry as of each given event index, as Positions (one search for
        all of them; the per-event paths then index a list)."""
        if self._positions is None:
            self._positions = [self._before, *positions_of(self._ledger.tolist(), self._entry.tolist())]
        # the number of accepted publishes before event i is the index into _positions
        return list(map(self._positions.__getitem__, np.searchsorted(self._idx, events).tolist()))

    def arrays(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ledger, entry) of the last published entry as of each given event index."""
        j = np.searchsorted(self._idx, events) - 1
        safe = np.maximum(j, 0)
        ledger = np.where(j >= 0, self._ledger[safe] if self._ledger.size else 0, self._before[0])
        entry = np.where(j >= 0, self._entry[safe] if self._entry.size else 0, self._before[1])
        return ledger.astype(np.int64), entry.astype(np.int64)


class _IntsAt:
    """``array[i]`` as a Python int: a column read for a few events of a batch."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __getitem__(self, i: int) -> int:
        return int(self._array[i])


class _EventColumns:
    """The fields the per-event paths read, as Python lists, converted once per batch.

    Those paths take one Python step per event (order matters there); indexing a list is several
    times cheaper than reading a numpy scalar and converting it with ``int()`` at each use.
    """

    __slots__ = (
        "_batch",
        "_msg_positions",
        "_sticky",
        "ack_type",
        "ackset_offsets",
        "batch_size",
        "consumer_id",
        "event_time",
        "key",
        "msg_batch_size",
        "msg_offsets",
        "row",
        "seq",
        "type",
    )

    def __init__(self, batch: EventBatch) -> None:
        self._batch = batch
        self.type: list[int] = batch.type.tolist()
        self.ack_type: list[int] = batch.ack_type.tolist()
        # read only by SUBSCRIBE, CLOSE_CONSUMER, an implicit attach and refusals: read one at a
        # time from the arrays rather than made into a list of large ints every batch
        self.seq = _IntsAt(batch.seq)
        self.row = _IntsAt(batch.row)
        self.event_time: list[int] = batch.event_time.tolist()
        self.consumer_id: list[int] = batch.consumer_id.tolist()
        self.batch_size: list[int] = batch.batch_size.tolist()
        self.key: list[str | None] = batch.key.tolist()
        self.msg_offsets: list[int] = batch.msg_offsets.tolist()
        self.msg_batch_size: list[int] = batch.msg_batch_size.tolist()
        self.ackset_offsets: list[int] = batch.ackset_offsets.tolist()
        self._sticky: dict[str | None, int] = {}
        self._msg_positions: list[Position] | None = None

    def msg_positions(self) -> list[Position]:
        """Each message id's position (ACK, NACK, REDELIVER), built at the first call. The array
        path of a long ack run reads the columns, so a batch of such runs never builds it.

        A method, not ``__getattr__``: a class with ``__getattr__`` makes every attribute read of
        its instances go through the hook (CPython does not specialise them), about 40 ns each,
        and the per-event paths read several columns per event."""
        value = self._msg_positions
        if value is None:
            batch = self._batch
            value = self._msg_positions = positions_of(batch.msg_ledger.tolist(), batch.msg_entry.tolist())
        return value

    def dispatch_positions(self, events: list[int]) -> dict[int, Position]:
        """The position each DISPATCH among ``events`` (batch indices) names, by index.

        Built per segment of the per-event path, for the DISPATCHes that reach it, rather than
        for every DISPATCH of the batch: about half of the generated mix's DISPATCHes are an
        Exclusive or Failover subscription's, dropped before (``Subscription.inert_commands``)
        without reading their position."""
        batch = self._batch
        at = np.asarray(events, dtype=np.int64)
        at = at[batch.type[at] == DISPATCH]
        named = positions_of(batch.ledger_id[at].tolist(), batch.entry_id[at].tolist())
        return dict(zip(at.tolist(), named, strict=True))

    def sticky_key_hashes(self, events: list[int]) -> list[int]:
        """``sticky_key_hash`` of each event's key, by lookups in C: each distinct key of the
        events is hashed once per batch first (events that are no DISPATCH carry no key, so
        theirs is the hash of None, which nothing reads)."""
        keys = list(map(self.key.__getitem__, events))
        cache = self._sticky
        for key in set(keys).difference(cache):
            cache[key] = sticky_key_hash(key)
        return list(map(cache.__getitem__, keys))

    def sticky_key_hash(self, i: int) -> int:
        """``sticky_key_hash`` of event i's key. Murmur3 in Python costs microseconds and a
        partition's keys repeat (ordering keys), so each distinct key is hashed once per batch."""
        key = self.key[i]
        value = self._sticky.get(key)
        if value is None:
            value = self._sticky[key] = sticky_key_hash(key)
        return value
