"""The consumers of one subscription: who is attached, what each holds, what is due again.

Broker-side state next to the cursor (spec pulsar-broker.md sections 3-5, 8), plus the two client
timers whose effect the broker sees (client spec 2 and 3: nack delay and ack timeout, both ending
in a redeliver-with-ids request):

* the connected consumers in subscription order, with name, priority level and client settings;
* Exclusive/Failover: the active consumer (``AbstractDispatcherSingleActiveConsumer``) and the
  time a Failover switch takes effect (``activeConsumerFailoverDelayTimeMillis``);
* Shared/Key_Shared: each consumer's ``pendingAcks`` (``PendingAcksMap``) and ``unackedMessages``
  with the ``blockedConsumerOnUnackedMsgs`` flag, the dispatcher's redelivery tracker
  (``InMemoryRedeliveryTracker``) and its replay set, and the scheduled nack redeliveries.

Time is the topic partition's event time: a timer due at ``t`` fires before the first event
whose clock reaches ``t`` (``fire_timers``), so replays give the same tables whatever the
micro-batch boundaries were. The engine does not decide dispatch (DISPATCH events say what the
broker sent); it keeps what follows from it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain, compress, groupby, islice, repeat
from operator import attrgetter, itemgetter, not_
from typing import Any, NamedTuple

import numpy as np

from engine.ackset import unacked_count
from engine.codec import StateReader, frame
from engine.collector import paused as collector_paused
from engine.cursor import Cursor
from engine.errors import (
    ConsumerIdInUse,
    ConsumerNotConnected,
    ExclusiveConsumerBusy,
    RedeliverDuringFailoverSwitch,
    RedeliverNotActiveConsumer,
    SubscriptionTypeMismatch,
    UnknownConsumer,
)
from engine.events import DISPATCH as DISPATCH_EVENT
from engine.events import EVENT_DEFAULTS, among
from engine.events import NACK as NACK_EVENT
from engine.events import REDELIVER as REDELIVER_EVENT
from engine.ledgers import Ledgers
from engine.position import Position, packed_keys, position_columns, positions_of, sorted_after

SHARED_MODES = ("Shared", "Key_Shared")
NO_DISPATCHER = "None"
"""The ``type`` ``stats`` shows of a subscription no consumer has joined since its topic loaded,
or since the admin API made it."""
TYPE_BEFORE_DISPATCHER = "Exclusive"
"""The type a cursor holds while its subscription has had no dispatcher yet (made by the admin
API, or read as "None" by ``ackstate bootstrap``): Pulsar's has none, and the first SUBSCRIBE
replaces it (``Subscription.subscribe``); only an implicitly attached consumer gets it."""
SINGLE_ACTIVE_MODES = ("Exclusive", "Failover")
DEFAULT_NEGATIVE_ACK_DELAY_MS = int(EVENT_DEFAULTS["negative_ack_delay_ms"])  # type: ignore[call-overload]
MIN_NACK_DELAY_MS = 100  # NegativeAcksTracker.MIN_NACK_DELAY_MS

# redelivery reasons (CONTRACT.md `redeliveries.reason`)
NACK, ACK_TIMEOUT, REDELIVER, CONSUMER_CLOSED = "NACK", "ACK_TIMEOUT", "REDELIVER", "CONSUMER_CLOSED"
_REASONS = (NACK, ACK_TIMEOUT, REDELIVER, CONSUMER_CLOSED)

_NACKED_POSITION = itemgetter(2)  # of a ``Subscription.nacks`` entry (due_at, consumer id, position)

_MAGIC = b"AKS"
_VERSION = 1


# ---- state ------------------------------------------------------------------------------
@dataclass(slots=True)
class PendingAck:
    """One entry a consumer holds unacked (PendingAcksMap value plus what the tables show)."""

    batch_size: int
    sticky_key_hash: int  # 0 = STICKY_KEY_HASH_NOT_SET (Shared)
    dispatched_at: int
    redelivery_count: int  # the count CommandMessage carried
    ack_timeout_at: int  # -1: not tracked (ack timeout off, or nacked)


@dataclass(slots=True)
class Consumer:
    consumer_id: int
    name: str
    priority_level: int
    order: int  # subscription order: the dispatcher's consumer list
    subscribed_at: int
    ack_timeout_ms: int = 0
    negative_ack_delay_ms: int = DEFAULT_NEGATIVE_ACK_DELAY_MS
    max_redeliver_count: int = 0
    unacked_messages: int = 0
    blocked: bool = False
    closed_at: int | None = None
    pending: dict[Position, PendingAck] = field(default_factory=dict)
    implicit: bool = False
    """Attached by a command rather than a SUBSCRIBE (``implicit_consumers``): a stream that
    starts after the consumer subscribed."""


@dataclass(slots=True)
class Redelivery:
    """A position due (``scheduled`` False) or scheduled for redelivery, as `redeliveries` shows it."""

    consumer_id: int
    reason: str
    requested_at: int
    due_at: int
    redelivery_count: int  # the count its next dispatch carries
    dead_letter: bool
    scheduled: bool = False  # a client timer that has not fired yet
    delivered_at: int | None = None  # only on emitted rows: the dispatch that delivered it


@dataclass(slots=True)
class BulkReplay:
    """The replays one redeliver-all added, held as columns until something reads them one by one.

    A redeliver-all of a Shared consumer hands every pending ack back at once (a million in
    ``bench --subscriptions``). Each becomes a replay row with the same consumer, reason and
    times, and the redelivery tracker's count + 1: as sorted int64 columns that is a few numpy
    operations, where a ``Redelivery`` per position in three dictionaries was most of the time.
    ``Subscription._materialize`` writes the rows into those dictionaries, exactly as the eager
    path would have, the first time anything reads or writes them by position (a DISPATCH, an
    ACK, a timer, ``encode``); the projections read the columns (``Changes.bulk``).
    """

    ledgers: np.ndarray  # int64, position order, each position once, all after mark-delete
    entries: np.ndarray
    counts: np.ndarray  # the tracker count after the bump: the rows' redelivery_count
    consumer_id: int
    reason: str
    due: int  # requested_at and due_at (a redeliver-all is due at once)

    def __len__(self) -> int:
        return int(self.ledgers.size)

    def positions(self) -> list[Position]:
        return positions_of(self.ledgers.tolist(), self.entries.tolist())

    def rows(self) -> list[Redelivery]:
        """The ``Redelivery`` of each position, as ``_replay_all`` makes them for new positions."""
        cid, reason, due = self.consumer_id, self.reason, self.due
        return list(
            map(
                Redelivery,
                repeat(cid),
                repeat(reason),
                repeat(due),
                repeat(due),
                self.counts.tolist(),
                repeat(False),
            )
        )


RUN_DISPATCH, RUN_ACK, RUN_ACKS, RUN_PARTIAL_ACKS, RUN_CUMULATIVE = 1, 2, 3, 4, -1
"""``RunEvents.kinds``: a DISPATCH; an individual ACK of one whole entry; of several whole
entries; of ids some of which carry an ack set (each taken by ``Subscription.apply_run``); a
cumulative ACK of one whole entry (``Subscription.cumulative_run_end`` and
``Cursor.mark_delete_run``, on an Exclusive or Failover subscription). 0: any other event,
which ends a run; ``apply_run`` stops at a kind that is not positive."""


@dataclass(slots=True)
class RunEvents:
    """A segment of one subscription's events as ``Subscription.apply_run`` reads them: one item
    per event, in order, so that the run indexes lists instead of a batch's columns.

    ``targets`` holds a DISPATCH's position, an ACK's one position, its list of positions, or
    for ``RUN_PARTIAL_ACKS`` that list and which of its ids name a whole entry (the kind says
    which; anything for kind 0). ``hashes`` (each DISPATCH's sticky key hash) is only
    read on a Key_Shared subscription and may stay None until one needs it."""

    kinds: list[int]
    targets: list[Any]
    consumer_ids: list[int]
    batch_sizes: list[int]
    times: list[int]  # event time: what a dispatch records
    clocks: list[int]  # the partition's clock: what timers are due by
    lacs: list[Position]  # the last published entry as of each event
    hashes: list[int] | None = None


class ActiveChange(NamedTuple):
    seq: int
    event_time: int
    previous: tuple[int, str] | None
    new: tuple[int, str] | None
    effective_at: int


@dataclass(frozen=True, slots=True)
class SubscriptionSettings:
    """The broker settings the consumer model obeys (Pulsar 4.0 defaults)."""

    acknowledgment_at_batch_index_level_enabled: bool = False
    max_unacked_messages_per_consumer: int = 50_000
    active_consumer_failover_delay_time_millis: int = 1_000
    active_consumer_failover_consistent_hashing: bool = False
    partition_index: int = -1
    topic_name: str = ""
    implicit_consumers: bool = False


@dataclass(slots=True)
class Changes:
    """What one batch changed, for the projections (not encoded)."""

    consumers: set[int] = field(default_factory=set)
    closed: dict[int, Consumer] = field(default_factory=dict)
    # consumer id -> positions whose pending ack (of that consumer) changed: a set per consumer,
    # so a redeliver-all records a million positions as one set, not a million (id, pos) tuples
    pending: dict[int, set[Position]] = field(default_factory=dict)
    # consumer id -> what each redeliver-all took from it, as sorted (ledger, entry) columns:
    # changed pending acks too, recorded without a Python object per position
    taken: dict[int, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    redeliveries: dict[Position, Redelivery | None] = field(default_factory=dict)
    # redeliver-alls still held as columns (``BulkReplay``): for their positions they are later
    # than anything in ``redeliveries`` (every write there materializes them first)
    bulk: list[BulkReplay] = field(default_factory=list)
    active: list[ActiveChange] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.consumers
            or self.closed
            or self.pending
            or self.taken
            or self.redeliveries
            or self.bulk
            or self.active
        )

    def pending_changed(self, consumer_id: int, pos: Position) -> None:
        """The pending ack of ``consumer_id`` at ``pos`` was added, changed or removed."""
        positions = self.pending.get(consumer_id)
        if positions is None:
            positions = self.pending[consumer_id] = set()
        positions.add(pos)

    def pending_pairs(self) -> set[tuple[int, Position]]:
        """Every changed pending ack as (consumer id, position)."""
        pairs = {(cid, pos) for cid, positions in self.pending.items() for pos in positions}
        for cid, taken in self.taken.items():
            for ledgers, entries in taken:
                pairs.update(zip(repeat(cid), positions_of(ledgers.tolist(), entries.tolist())))
        return pairs

    def all_redeliveries(self) -> dict[Position, Redelivery | None]:
        """Every changed replay row by position, the columns of ``bulk`` included (for checks;
        the projections read ``bulk`` as columns)."""
        rows = dict(self.redeliveries)
        for block in self.bulk:
            rows.update(zip(block.positions(), block.rows(), strict=True))
        return rows


class Subscription:
    """Consumers, pending acks, redelivery tracker and schedule of one subscription."""

    __slots__ = (
        "_bulk",
        "_due",
        "_due_known",
        "_redeliveries",
        "_tracker",
        "active",
        "changes",
        "consumers",
        "dispatcher",
        "holder",
        "nacks",
        "next_order",
        "switch_until",
    )

    def __init__(self) -> None:
        self.consumers: dict[int, Consumer] = {}  # connected, in subscription order
        # ``PersistentSubscription.dispatcher`` exists: the first consumer since the topic was
        # loaded made it, and it stays when its consumers leave. Without one (after a
        # LOAD_TOPIC, before any consumer subscribed) ``stats`` shows the type "None".
        self.dispatcher = True
        self.holder: dict[Position, int] = {}  # pending entry -> consumer id
        self.active: int | None = None
        self.switch_until = -1  # a Failover switch takes effect at this event time
        # ``tracker`` and ``redeliveries`` (properties) hold these plus the redeliver-alls in
        # ``_bulk``, kept as columns until something reads them by position (``BulkReplay``).
        # A block's positions are in no other block and not in ``_redeliveries``: they left
        # the consumer's pending acks when it was made, and only a DISPATCH puts a position back
        # there, which materializes the blocks first.
        self._tracker: dict[Position, int] = {}  # InMemoryRedeliveryTracker
        self._redeliveries: dict[Position, Redelivery] = {}  # replay set + scheduled nacks
        self._bulk: list[BulkReplay] = []
        self.nacks: list[tuple[int, int, Position]] = []  # (due_at, consumer id, position)
        self.next_order = 0
        self.changes = Changes()
        # ``next_due`` is asked before every event of the subscription; scanning every pending
        # ack each time is quadratic with ack timeouts on. It is cached: a timer added lowers the
        # cached minimum at once, removing the timer that *is* the minimum forgets it (the next
        # ``next_due`` scans again). Only the methods of this class add or remove timers.
        self._due: int | None = None
        self._due_known = False

    # ---- the replay set and the tracker ------------------------------------------------
    @property
    def tracker(self) -> dict[Position, int]:
        """``InMemoryRedeliveryTracker``: position -> times redelivered."""
        if self._bulk:
            self._materialize()
        return self._tracker

    @property
    def redeliveries(self) -> dict[Position, Redelivery]:
        """The replay set and the scheduled nacks, as `redeliveries` shows them."""
        if self._bulk:
            self._materialize()
        return self._redeliveries

    def _materialize(self) -> None:
        """Write the redeliver-alls held as columns into the tracker, the replay set and (if this
        batch's changes still hold them) the changed replays: the same updates, in the same order,
        as ``_replay_all`` would have made when they happened. Nothing wrote those dictionaries
        in between (every writer materializes first), so they end up as the eager path left them."""
        blocks, self._bulk = self._bulk, []
        changes = self.changes
        for block in blocks:
            positions, rows = block.positions(), block.rows()
            self._tracker.update(zip(positions, block.counts.tolist(), strict=True))
            self._redeliveries.update(zip(positions, rows, strict=True))
            if any(pending is block for pending in changes.bulk):
                changes.redeliveries.update(zip(positions, rows, strict=True))
        changes.bulk = [b for b in changes.bulk if all(b is not block for block in blocks)]

    # ---- queries ------------------------------------------------------------------------
    def stats_type(self, cursor: Cursor) -> str:
        """The subscription's ``type`` in ``stats`` (``PersistentSubscription.getTypeString``):
        its dispatcher's type, or "None" while it has no dispatcher (``dispatcher``)."""
        return cursor.sub_type if self.dispatcher else NO_DISPATCHER

    def unacked_messages(self) -> int:
        return sum(c.unacked_messages for c in self.consumers.values())

    def active_name(self) -> str | None:
        consumer = self.consumers.get(self.active) if self.active is not None else None
        return consumer.name if consumer else None

    def next_due(self) -> int | None:
        """The earliest client timer (nack or ack timeout) still to fire, or None."""
        if not self._due_known:
            self._due = self._scan_next_due()
            self._due_known = True
        return self._due

    def _scan_next_due(self) -> int | None:
        """``next_due`` computed from scratch (the cache's source of truth)."""
        dues = [d for d, _, _ in self.nacks]
        for consumer in self.consumers.values():
            if consumer.ack_timeout_ms > 0:
                dues.extend(p.ack_timeout_at for p in consumer.pending.values() if p.ack_timeout_at >= 0)
        return min(dues) if dues else None

    def _timer_added(self, due: int) -> None:
        """Keep the cached ``next_due`` right after a nack or ack-timeout timer was added."""
        if self._due_known and (self._due is None or due < self._due):
            self._due = due

    def _timer_removed(self, due: int) -> None:
        """Keep the cached ``next_due`` right after a timer due at ``due`` was removed: only the
        removal of the earliest one can move it (to a time found by the next scan)."""
        if self._due_known and due == self._due:
            self._due_known = False

    def _timers_changed(self) -> None:
        """Many timers changed at once (a consumer joined or left, timers fired): scan again."""
        self._due_known = False

    def holds_anything(self) -> bool:
        """Whether an ack can change consumer state (pending acks, counts, redeliveries)."""
        return bool(self.holder or self._tracker or self._redeliveries or self._bulk or self.nacks)

    def is_empty(self) -> bool:
        """Nothing to keep: a fresh ``Subscription()`` is the same state."""
        return self.dispatcher and not (
            self.consumers or self._tracker or self._redeliveries or self._bulk or self.nacks
        )

    # ---- SUBSCRIBE / CLOSE_CONSUMER ---------------------------------------------------------
    def subscribe(
        self,
        cursor: Cursor,
        consumer: Consumer,
        sub_type: str,
        seq: int,
        settings: SubscriptionSettings,
    ) -> None:
        """``PersistentSubscription.addConsumer`` then the dispatcher's ``addConsumer``.

        A different type is refused while consumers of the old type are connected ("Subscription
        is of different type"); with none connected the dispatcher is replaced by one of the new
        type. Exclusive admits one consumer (``ConsumerBusyException``).
        """
        if consumer.consumer_id in self.consumers:
            raise ConsumerIdInUse(f"consumer id {consumer.consumer_id} is already connected")
        if self.consumers and cursor.sub_type != sub_type:
            raise SubscriptionTypeMismatch(
                f"subscription is of type {cursor.sub_type}; a {sub_type} consumer cannot join it"
            )
        if sub_type == "Exclusive" and self.consumers:
            raise ExclusiveConsumerBusy("Exclusive consumer is already connected")
        if not self.consumers and cursor.sub_type != sub_type:
            cursor.sub_type = sub_type
            self.active = None
        self.dispatcher = True
        consumer.order = self.next_order
        self.next_order += 1
        self.consumers[consumer.consumer_id] = consumer
        self._timers_changed()
        self.changes.closed.pop(consumer.consumer_id, None)  # one row per consumer id
        self.changes.consumers.add(consumer.consumer_id)
        if sub_type in SINGLE_ACTIVE_MODES:
            self._pick_active(sub_type, seq, consumer.subscribed_at, settings)

    def close(
        self, cursor: Cursor, consumer_id: int, seq: int, now: int, settings: SubscriptionSettings
    ) -> None:
        """``removeConsumer``: Failover re-picks; Shared hands the consumer's entries back."""
        consumer = self._remove(consumer_id, now)
        if cursor.sub_type in SHARED_MODES:
            self._hand_back(cursor, consumer, now)
        elif cursor.sub_type in SINGLE_ACTIVE_MODES:
            self._pick_active(cursor.sub_type, seq, now, settings)

    def close_all(self, cursor: Cursor, seq: int, now: int, settings: SubscriptionSettings) -> None:
        """The broker loaded the topic afresh (LOAD_TOPIC): the new topic object's subscription
        has no consumer, so each one still connected here is gone. That is a broker stopped
        without closing them (``kill -9``): a graceful stop or unload closed each one first.
        Each goes as ``removeConsumer`` takes it, and on Exclusive and Failover the active
        consumer goes once, with no pick among the leaving ones in between."""
        for consumer_id in list(self.consumers):
            consumer = self._remove(consumer_id, now)
            if cursor.sub_type in SHARED_MODES:
                self._hand_back(cursor, consumer, now)
        if cursor.sub_type in SINGLE_ACTIVE_MODES and self.active is not None:
            self._pick_active(cursor.sub_type, seq, now, settings)

    def _remove(self, consumer_id: int, now: int) -> Consumer:
        """The consumer out of ``consumers``, with its client's timers and nacks."""
        consumer = self.consumers.pop(consumer_id, None)
        if consumer is None:
            raise ConsumerNotConnected(f"consumer {consumer_id} was not connected")
        consumer.closed_at = now
        self._timers_changed()  # its nacks and ack timeouts go with it
        self.changes.closed[consumer_id] = consumer
        self.changes.consumers.discard(consumer_id)
        # its client's nack tracker closes with it (NegativeAcksTracker.close)
        self._drop_nacks_of(consumer_id)
        return consumer

    def _hand_back(self, cursor: Cursor, consumer: Consumer, now: int) -> None:
        """A removed Shared or Key_Shared consumer's pending entries go to the replay set."""
        consumer_id = consumer.consumer_id
        for pos in list(consumer.pending):
            self._remove_pending(consumer, pos, 0)
            # PersistentDispatcherMultipleConsumers.removeConsumer: to the replay set, no
            # redelivery-count bump (addMessageToReplay without the tracker)
            if self.consumers and pos > cursor.mark_delete:
                self._set_redelivery(
                    pos,
                    Redelivery(
                        consumer_id,
                        CONSUMER_CLOSED,
                        now,
                        now,
                        self.tracker.get(pos, 0),
                        False,
                    ),
                )
        consumer.unacked_messages = 0
        if not self.consumers:
            # the last consumer left: replay set and redelivery tracker are cleared
            for pos in list(self.redeliveries):
                self._set_redelivery(pos, None)
            self.tracker.clear()
            self.nacks.clear()
            self._timers_changed()

    def _pick_active(self, sub_type: str, seq: int, now: int, settings: SubscriptionSettings) -> None:
        """``pickAndScheduleActiveConsumer`` (spec 5.1); the switch delay as a timestamp (5.2)."""
        from engine.failover import select_active

        members = list(self.consumers.values())
        index = select_active(
            [(c.priority_level, c.name) for c in members],
            settings.partition_index,
            settings.topic_name,
            settings.active_consumer_failover_consistent_hashing,
        )
        new = members[index].consumer_id if index is not None else None
        if new == self.active:
            return
        previous = self.consumers.get(self.active) if self.active is not None else None
        if previous is None and self.active is not None:
            previous = self.changes.closed.get(self.active)
        delay = settings.active_consumer_failover_delay_time_millis
        if sub_type == "Failover" and delay > 0 and new is not None:
            if self.switch_until <= now:  # a switch already pending keeps its original timer
                self.switch_until = now + delay
            effective_at = self.switch_until
        else:
            effective_at = now
        self.active = new
        self.changes.active.append(
            ActiveChange(
                seq,
                now,
                (previous.consumer_id, previous.name) if previous else None,
                (new, members[index].name) if index is not None and new is not None else None,
                effective_at,
            )
        )
        for consumer in members:
            self.changes.consumers.add(consumer.consumer_id)

    # ---- DISPATCH ---------------------------------------------------------------------------
    def inert_commands(
        self, cursor: Cursor, kinds: np.ndarray, consumer_ids: np.ndarray, event_times: np.ndarray
    ) -> np.ndarray | None:
        """Which of these commands (event type codes, consumer ids, event times) change nothing
        here, applied in order while the type, the consumers and the active consumer stay as
        they are (no SUBSCRIBE, CLOSE_CONSUMER or implicit attach among them); None when this
        subscription is not one where any is (``dispatch_is_inert`` is false, or a client
        timer is scheduled, which would fire before the next event).

        On an Exclusive or Failover subscription with no replay entry and no timer, from a
        connected consumer:

        * a DISPATCH (``dispatch``), if its position is within its last published entry, which
          the caller checks;
        * a NACK: the client redelivers everything instead (``nack`` stops after the consumer
          check);
        * a REDELIVER from the active consumer at or after a failover switch took effect
          (``redeliver``: a rewind, nothing kept).

        None of them, nor an ACK, adds a replay entry or a timer to such a subscription, so the
        answer holds for every command in the list.
        """
        if not self.dispatch_is_inert(cursor) or self.next_due() is not None:
            return None
        connected = among(consumer_ids, list(self.consumers))
        inert = (kinds == DISPATCH_EVENT) | (kinds == NACK_EVENT)
        if self.active is not None:
            inert |= (
                (kinds == REDELIVER_EVENT)
                & (consumer_ids == self.active)
                & (event_times >= self.switch_until)
            )
        return connected & inert

    def dispatch_is_inert(self, cursor: Cursor) -> bool:
        """Whether ``dispatch`` from a connected consumer changes nothing here: an Exclusive or
        Failover subscription (``Consumer.sendMessages`` keeps pending acks and unacked counts
        only for Shared and Key_Shared) with no replay entry a dispatch could deliver.

        It stays true until the subscription's type or replay set changes: only SUBSCRIBE,
        CLOSE_CONSUMER, NACK, REDELIVER and an implicit attach can do that, never a DISPATCH, an
        ACK or a timer of such a subscription (the partition asks again after each of those).
        """
        return cursor.sub_type not in SHARED_MODES and not self._redeliveries and not self._bulk

    def dispatch(
        self,
        cursor: Cursor,
        consumer_id: int,
        pos: Position,
        batch_size: int,
        sticky_key_hash: int,
        now: int,
        settings: SubscriptionSettings,
    ) -> None:
        """``Consumer.sendMessages``: the pending ack and the unacked count (Shared/Key_Shared).

        Half of a typical stream: ``_consumer`` and ``Changes.pending_changed`` are written out
        here rather than called."""
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise UnknownConsumer(f"DISPATCH from consumer {consumer_id}, which is not connected")
        if self._bulk:
            self._materialize()
        replayed = self._redeliveries.get(pos) if self._redeliveries else None
        if replayed is not None and not replayed.scheduled:
            replayed.delivered_at = now
            self.changes.redeliveries[pos] = replayed
            del self._redeliveries[pos]
        if cursor.sub_type not in SHARED_MODES:
            return
        owner_id = self.holder.get(pos)
        if owner_id is not None and owner_id != consumer_id:
            # the broker sent it elsewhere: it is no longer pending for its former holder
            owner = self.consumers[owner_id]
            owner.unacked_messages -= self._remaining(cursor, pos, owner.pending[pos].batch_size, settings)
            self._remove_pending(owner, pos, settings.max_unacked_messages_per_consumer)
        pending = consumer.pending
        already = pending.get(pos)
        if already is None:
            # _remaining, without the call when batch-index acks are off (over half the events)
            consumer.unacked_messages += (
                self._remaining(cursor, pos, batch_size, settings)
                if settings.acknowledgment_at_batch_index_level_enabled
                else batch_size
            )
        elif already.ack_timeout_at >= 0:
            self._timer_removed(already.ack_timeout_at)
        timeout_at = now + consumer.ack_timeout_ms if consumer.ack_timeout_ms > 0 else -1
        count = self._tracker.get(pos, 0) if self._tracker else 0
        pending[pos] = PendingAck(batch_size, sticky_key_hash, now, count, timeout_at)
        if timeout_at >= 0:
            self._timer_added(timeout_at)
        self.holder[pos] = consumer_id
        changes = self.changes
        changed = changes.pending.get(consumer_id)
        if changed is None:
            changed = changes.pending[consumer_id] = set()
        changed.add(pos)
        limit = settings.max_unacked_messages_per_consumer
        if limit > 0 and consumer.unacked_messages >= limit:
            consumer.blocked = True
        changes.consumers.add(consumer_id)

    # ---- ACK (the consumer side of it; the cursor applies the positions) ---------------------
    def check_consumer(self, consumer_id: int, what: str) -> None:
        """``_consumer`` without the consumer: every ACK command asks."""
        if consumer_id not in self.consumers:
            self._consumer(consumer_id, what)  # raises

    def ack(
        self,
        cursor: Cursor,
        consumer_id: int,
        pos: Position,
        ack_set: int | None,
        batch_size: int,
        shadow: dict[Position, int],
        settings: SubscriptionSettings,
        written: dict[Position, int] | None = None,
    ) -> None:
        """``Consumer.messageAcked`` for one individual id, before the cursor applies it.

        ``shadow`` holds the unacked-index masks as the earlier acks of the same run left them
        (the cursor applies the whole run at once afterwards). With ``written``, the masks this id
        leaves go there instead, and the caller folds them into ``shadow`` when the command ends:
        Consumer.individualAckNormal measures every id of one CommandAck against the cursor as it
        was before the command (``getCursorAckSet``; the cursor is updated after the loop), so two
        ids of one batch in one command each count their own acked indices. ``ack_entry`` is
        its whole-entry branch for the per-event path.
        """
        out = shadow if written is None else written
        if cursor.sub_type not in SHARED_MODES:
            return
        owner, pending = self._acked_pending(consumer_id, pos)
        enabled = settings.acknowledgment_at_batch_index_level_enabled
        mask = None  # the unacked-index mask before this id; only batch-index acks read it
        if enabled:
            mask = shadow.get(pos)
            if mask is None:
                partial = cursor.batch_acks.get(pos)
                mask = partial.unacked if partial is not None else None
        if ack_set is None:
            if owner is not None and pending is not None:
                acked = pending.batch_size
                if enabled and mask is not None:
                    acked = unacked_count(mask)
                owner.unacked_messages -= acked  # _remove_pending records the consumer changed
                self._remove_pending(owner, pos, settings.max_unacked_messages_per_consumer)
            out[pos] = 0
            self._entry_acked(pos)
        elif enabled:
            if owner is not None and pending is not None:
                if mask is not None:
                    acked = unacked_count(mask) - unacked_count(mask & ack_set)
                else:
                    acked = batch_size - unacked_count(ack_set)
                owner.unacked_messages -= acked
                self.changes.consumers.add(owner.consumer_id)
                self.changes.pending_changed(owner.consumer_id, pos)
            out[pos] = (mask if mask is not None else (1 << batch_size) - 1) & ack_set
        # PersistentSubscription.acknowledgeMessage: redeliveryTracker.removeBatch(positions)
        self._tracker.pop(pos, None)

    def ack_entry(
        self, cursor: Cursor, consumer_id: int, pos: Position, settings: SubscriptionSettings
    ) -> None:
        """``ack`` of an id that names a whole entry, with an empty ``shadow`` and none kept, on a
        Shared or Key_Shared subscription: what each id of one per-event ACK command is (every id
        of a command reads the state before it, see ``ack``).

        Most acks are one such id: the per-event path calls this instead of ``ack``, without the
        ack-set arguments and the two dictionaries a one-id command only throws away. The same
        steps as ``ack``'s whole-entry branch (``tests/engine/test_fast_paths.py`` compares them).
        """
        # _acked_pending and _entry_acked, written out: every whole-entry ack comes here
        if self._bulk:
            self._materialize()
        owner = self.consumers[consumer_id]
        pending = owner.pending.get(pos)
        if pending is None:
            owner_id = self.holder.get(pos)
            holder = self.consumers.get(owner_id) if owner_id is not None else None
            if holder is not None:
                owner, pending = holder, holder.pending.get(pos)
        if pending is not None:
            acked = pending.batch_size
            if settings.acknowledgment_at_batch_index_level_enabled:
                partial = cursor.batch_acks.get(pos)
                if partial is not None:
                    acked = unacked_count(partial.unacked)
            owner.unacked_messages -= acked  # _remove_pending records the consumer changed
            self._remove_pending(owner, pos, settings.max_unacked_messages_per_consumer)
        if pos in self._redeliveries:
            self._set_redelivery(pos, None)
        if self.nacks:
            self._drop_nacks_at(pos)
        # PersistentSubscription.acknowledgeMessage: redeliveryTracker.removeBatch(positions)
        if self._tracker:
            self._tracker.pop(pos, None)

    def apply_run(
        self,
        cursor: Cursor,
        run: RunEvents,
        start: int,
        ledgers: Ledgers,
        last_entries: Mapping[int, int],
        can_stage: bool | None,
        staged: list[Position],
        settings: SubscriptionSettings,
    ) -> tuple[int, int]:
        """DISPATCHes and individual ACKs of a Shared or Key_Shared subscription, from ``run``'s
        event ``start`` on, for as long as each is one the plain calls would apply without a
        refusal, a timer or the cursor's state: ``dispatch``, and ``ack_entry`` for each
        whole-entry id of an ACK (``ack`` for an id with an ack set, which with batch-index acks
        off only drops the entry's redelivery count) followed by staging its positions
        (``Cursor.stage_ack``), all written out in one loop. Batch-index acks must be off (the
        caller's check).

        On the generated mix these are nine events in ten of a Shared subscription's, in runs
        of about twenty: one call per run instead of three to five per event, the lookups made
        once per run (8.2 % fewer instructions for the whole mix). It stops, returning the
        index of that event, at the first event that is none of these, or whose consumer is
        not connected, that a timer due by its clock precedes, that names a position beyond its
        last published entry or, for an ACK, one that does not exist or that staging cannot
        take (``can_stage``: whether ``Cursor.can_stage_acks`` holds, None while not yet
        asked). The caller applies that event the plain way. Returns ``(stop, last)``: ``last``
        is the index of the run's last ACK (its last published entry is the staged calls'
        ``lac``), -1 without one.
        ``tests/engine/test_fast_paths.py`` holds it to the plain calls.
        """
        kinds, targets, consumer_ids = run.kinds, run.targets, run.consumer_ids
        batch_sizes, times, clocks, lacs = run.batch_sizes, run.times, run.clocks, run.lacs
        hashes = run.hashes if cursor.sub_type == "Key_Shared" else None
        consumers, holder, tracker = self.consumers, self.holder, self._tracker
        redeliveries = self._redeliveries
        changes = self.changes
        changed_pending, changed_consumers = changes.pending, changes.consumers
        limit = settings.max_unacked_messages_per_consumer
        new_object = object.__new__
        # the earliest timer: only a dispatch adds one inside a run (lowering it here); one
        # removed can leave it early, which only ends the run sooner (the caller asks again)
        due = self.next_due()
        last = -1
        for k in range(start, len(kinds)):  # k: the stop index after a break
            kind = kinds[k]
            if kind <= 0:
                break
            consumer_id = consumer_ids[k]
            consumer = consumers.get(consumer_id)
            if consumer is None:
                break
            if due is not None and due <= clocks[k]:
                break
            lac = lacs[k]
            if kind == RUN_DISPATCH:
                pos = targets[k]
                if pos > lac:
                    break
                # dispatch, written out
                if self._bulk:
                    self._materialize()
                replayed = redeliveries.get(pos) if redeliveries else None
                if replayed is not None and not replayed.scheduled:
                    replayed.delivered_at = times[k]
                    changes.redeliveries[pos] = replayed
                    del redeliveries[pos]
                owner_id = holder.get(pos)
                if owner_id is not None and owner_id != consumer_id:
                    owner = consumers[owner_id]
                    owner.unacked_messages -= owner.pending[pos].batch_size
                    self._remove_pending(owner, pos, limit)
                pending = consumer.pending
                already = pending.get(pos)
                if already is None:
                    consumer.unacked_messages += batch_sizes[k]
                elif already.ack_timeout_at >= 0:
                    self._timer_removed(already.ack_timeout_at)
                now = times[k]
                timeout_at = now + consumer.ack_timeout_ms if consumer.ack_timeout_ms > 0 else -1
                # PendingAck(...) field by field: the dataclass's constructor enters its Python
                # ``__init__`` from C, a frame CPython 3.11 does not inline (twice the cost)
                made = new_object(PendingAck)
                made.batch_size = batch_sizes[k]
                made.sticky_key_hash = hashes[k] if hashes is not None else 0
                made.dispatched_at = now
                made.redelivery_count = tracker.get(pos, 0) if tracker else 0
                made.ack_timeout_at = timeout_at
                pending[pos] = made
                if timeout_at >= 0:
                    self._timer_added(timeout_at)
                    if due is None or timeout_at < due:
                        due = timeout_at
                holder[pos] = consumer_id
                changed = changed_pending.get(consumer_id)
                if changed is None:
                    changed = changed_pending[consumer_id] = set()
                changed.add(pos)
                if limit > 0 and consumer.unacked_messages >= limit:
                    consumer.blocked = True
                changed_consumers.add(consumer_id)
                continue
            # an ACK: first whether staging takes every position (Cursor.stage_entry_acks)
            if can_stage is None:
                can_stage = cursor.can_stage_acks(False, ledgers)
            if not can_stage:
                break
            wholes: list[bool] | None = None
            if kind == RUN_ACK:
                pos = targets[k]
                if pos > lac or not 0 <= pos[1] <= last_entries.get(pos[0], -1):
                    break
                positions: Any = (pos,)
            else:
                if kind == RUN_ACKS:
                    positions = targets[k]
                else:
                    positions, wholes = targets[k]
                refused = False
                for pos in positions:
                    if pos > lac or not 0 <= pos[1] <= last_entries.get(pos[0], -1):
                        refused = True
                        break
                if refused:
                    break
            if wholes is not None:
                # ``ack`` of an id with an ack set, batch-index acks off: the tracker only, and
                # nothing to stage (``Cursor.stage_ack``); each id's steps touch only its entry
                if self._bulk:
                    self._materialize()
                if tracker:
                    for pos in compress(positions, map(not_, wholes)):
                        tracker.pop(pos, None)
                positions = list(compress(positions, wholes))
            if holder or tracker or redeliveries or self._bulk or self.nacks:
                if self._bulk:
                    self._materialize()
                for pos in positions:  # ack_entry, written out
                    owner = consumer
                    pending = owner.pending.get(pos)
                    if pending is None:
                        owner_id = holder.get(pos)
                        held_by = consumers.get(owner_id) if owner_id is not None else None
                        if held_by is not None:
                            owner, pending = held_by, held_by.pending.get(pos)
                    if pending is not None:  # _remove_pending, written out
                        owner.unacked_messages -= pending.batch_size
                        del owner.pending[pos]
                        if pending.ack_timeout_at >= 0:
                            self._timer_removed(pending.ack_timeout_at)
                        owner_id = owner.consumer_id
                        if holder.get(pos) == owner_id:
                            del holder[pos]
                        if (owner.blocked and owner.unacked_messages <= limit // 2) or limit <= 0:
                            owner.blocked = False
                        changed = changed_pending.get(owner_id)
                        if changed is None:
                            changed = changed_pending[owner_id] = set()
                        changed.add(pos)
                        changed_consumers.add(owner_id)
                    if pos in redeliveries:
                        self._set_redelivery(pos, None)
                    if self.nacks and pos in map(_NACKED_POSITION, self.nacks):  # _drop_nacks_at's look
                        self._drop_nacks_at(pos)
                    if tracker:
                        tracker.pop(pos, None)
            staged.extend(positions)
            last = k
        else:
            return len(kinds), last
        return k, last

    def cumulative_run_end(self, run: RunEvents, start: int) -> int:
        """Where the run of cumulative acks that starts at ``run``'s event ``start`` ends, as far
        as this subscription decides: at the first event that is no cumulative ack of one whole
        entry (``RUN_CUMULATIVE``) or whose consumer is not connected (the plain path refuses
        it, or attaches it implicitly).

        On an Exclusive or Failover subscription a cumulative ack's consumer side is only that
        check (``Consumer.messageAcked``). Such a subscription has no client timer either: nacks
        and pending acks are kept for Shared and Key_Shared only, and a subscription changes its
        type only once every consumer, with its timers, has left. Should one have a timer, there
        is no run, and the plain path keeps its order. The cursor side of the run is
        ``Cursor.mark_delete_run``. On the generated mix nearly every event of these
        subscriptions that is not dropped as inert is such an ack, a quarter of all its acks.
        """
        if self.next_due() is not None:
            return start
        kinds, consumer_ids = run.kinds, run.consumer_ids
        consumers = self.consumers
        for k in range(start, len(kinds)):
            if kinds[k] != RUN_CUMULATIVE or consumer_ids[k] not in consumers:
                return k
        return len(kinds)

    def _acked_pending(self, consumer_id: int, pos: Position) -> tuple[Consumer | None, PendingAck | None]:
        """The pending ack an individual ack of ``pos`` by ``consumer_id`` removes, and whose it
        is: the acking consumer's own, else the holder's (``Consumer.individualAckNormal`` acks
        for the owner when another consumer acks); ``(None, None)`` or a None pending ack when
        nobody holds it."""
        if self._bulk:
            self._materialize()
        owner: Consumer | None = self.consumers[consumer_id]
        pending = owner.pending.get(pos)
        if pending is None:
            owner_id = self.holder.get(pos)
            owner = self.consumers.get(owner_id) if owner_id is not None else None
            pending = owner.pending.get(pos) if owner is not None else None
        return owner, pending

    def _entry_acked(self, pos: Position) -> None:
        """A whole entry is acked: it leaves the redelivery set and the nacks waiting their delay."""
        if pos in self._redeliveries:
            self._set_redelivery(pos, None)
        if self.nacks:
            self._drop_nacks_at(pos)

    # ---- NACK / REDELIVER ----------------------------------------------------------------
    def nack(self, cursor: Cursor, consumer_id: int, positions: list[Position], now: int) -> None:
        """The client's ``NegativeAcksTracker.add``: a redeliver-with-ids after the nack delay.

        Exclusive/Failover clients redeliver everything instead (a rewind, no state to keep).
        """
        consumer = self._consumer(consumer_id, "NACK")
        if cursor.sub_type not in SHARED_MODES:
            return
        due = now + max(consumer.negative_ack_delay_ms, MIN_NACK_DELAY_MS)
        for pos in dict.fromkeys(positions):
            self.nacks.append((due, consumer_id, pos))
            self._timer_added(due)
            pending = consumer.pending.get(pos)
            if pending is not None:
                if pending.ack_timeout_at >= 0:
                    self._timer_removed(pending.ack_timeout_at)
                pending.ack_timeout_at = -1  # a nack removes it from the ack-timeout tracker
                self.changes.pending_changed(consumer_id, pos)
                self._set_redelivery(
                    pos,
                    Redelivery(
                        consumer_id,
                        NACK,
                        now,
                        due,
                        self.tracker.get(pos, 0) + 1,
                        _dead_letter(consumer, pending),
                        scheduled=True,
                    ),
                )

    def redeliver(
        self,
        cursor: Cursor,
        consumer_id: int,
        positions: list[Position] | None,
        now: int,
        reason: str,
        settings: SubscriptionSettings,
    ) -> None:
        """``ServerCnx.handleRedeliverUnacknowledged`` (spec 4.1-4.4); ``None`` = redeliver all."""
        consumer = self._consumer(consumer_id, "REDELIVER")
        if cursor.sub_type in SINGLE_ACTIVE_MODES:
            # ids on Exclusive/Failover mean "redeliver all": a rewind to mark-delete, which
            # only the active consumer may ask for, and not while a failover switch is pending
            if consumer_id != self.active:
                raise RedeliverNotActiveConsumer("Only the active consumer can call resend")
            if now < self.switch_until:
                raise RedeliverDuringFailoverSwitch("a failover switch is pending; redeliver ignored")
            return
        if positions is None:
            with collector_paused():  # a million pending acks become replay rows: no cycles
                self._take_all_pending_and_replay(cursor, consumer, now, reason)
            return
        # only ids in this consumer's own pending acks (no owner search, unlike acks)
        taken = [p for p in dict.fromkeys(positions) if p in consumer.pending]
        for pos in taken:
            consumer.unacked_messages -= self._remaining(
                cursor, pos, consumer.pending[pos].batch_size, settings
            )
            self._remove_pending(consumer, pos, settings.max_unacked_messages_per_consumer)
        consumer.blocked = False
        self.changes.consumers.add(consumer_id)
        self._replay_all(consumer, sorted_after(taken, cursor.mark_delete), now, reason)

    def _take_all_pending_and_replay(self, cursor: Cursor, consumer: Consumer, now: int, reason: str) -> None:
        """A redeliver-all: every pending ack of ``consumer`` back to the replay set.

        The taken positions are sorted once as int64 columns; those after mark-delete become a
        ``BulkReplay`` (their tracker counts read as columns too), unless a position is already
        in the replay set or was not this consumer's by ``holder`` (a state whose consumers'
        pending acks overlap): then the rows are written one by one by ``_replay_all``, which
        handles both.
        """
        cid = consumer.consumer_id
        taken, all_mine = self._take_all_pending(consumer)
        self.changes.consumers.add(cid)
        ledgers, entries = position_columns(list(taken))
        order = np.lexsort((entries, ledgers))
        ledgers, entries = ledgers[order], entries[order]
        self.changes.taken.setdefault(cid, []).append((ledgers, entries))
        floor = cursor.mark_delete
        above = (ledgers > floor[0]) | ((ledgers == floor[0]) & (entries > floor[1]))
        ledgers, entries = ledgers[above], entries[above]
        if ledgers.size == 0:
            return
        if not all_mine or self._replays_any(ledgers, entries):
            self._replay_all(consumer, positions_of(ledgers.tolist(), entries.tolist()), now, reason)
            return
        counts = self._tracker_counts(ledgers, entries) + 1
        block = BulkReplay(ledgers, entries, counts, cid, reason, now)
        self._bulk.append(block)
        self.changes.bulk.append(block)

    def _take_all_pending(self, consumer: Consumer) -> tuple[dict[Position, PendingAck], bool]:
        """``_remove_pending`` of every pending ack of ``consumer`` at once (a redeliver-all):
        the same state, without a Python call per entry (the caller records the changes). Its
        unacked count is 0 afterwards, so it is unblocked whatever the limit. Also returns
        whether ``holder`` named ``consumer`` for every one of them (it does, unless the
        consumers' pending acks overlap, which no sequence of events produces)."""
        taken = consumer.pending
        consumer.pending = {}
        cid = consumer.consumer_id
        holder = self.holder
        # the entries it holds (``holder`` names it) leave ``holder``: one C loop pops them all,
        # then any that named someone else go back (none, unless pending acks overlap)
        named = list(map(holder.pop, taken, repeat(None)))
        all_mine = named.count(cid) == len(named)
        if not all_mine:
            holder.update(
                (pos, owner) for pos, owner in zip(taken, named, strict=True) if owner not in (cid, None)
            )
        self._timers_changed()  # its ack-timeout timers went with the pending acks
        consumer.unacked_messages = 0
        consumer.blocked = False
        return taken, all_mine

    def _replays_any(self, ledgers: np.ndarray, entries: np.ndarray) -> bool:
        """Whether any of these positions is in the replay set (``_redeliveries``; the blocks in
        ``_bulk`` hold none of a consumer's pending acks, see ``__init__``)."""
        rows = self._redeliveries
        if not rows or ledgers.size == 0:
            return False
        row_ledgers, row_entries = position_columns(list(rows))
        universe = np.unique(np.concatenate((row_ledgers, ledgers)))
        queued = packed_keys(row_ledgers, row_entries, universe)
        return bool(np.isin(packed_keys(ledgers, entries, universe), queued).any())

    def _tracker_counts(self, ledgers: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """``tracker.get(pos, 0)`` of each position, as an int64 column: a sorted search when the
        tracker is the smaller side, else a dictionary lookup per position."""
        tracker = self._tracker
        if not tracker or ledgers.size == 0:
            return np.zeros(ledgers.size, dtype=np.int64)
        if len(tracker) > ledgers.size:
            positions = positions_of(ledgers.tolist(), entries.tolist())
            counts = np.fromiter(map(tracker.get, positions, repeat(0)), dtype=np.int64, count=ledgers.size)
            return counts
        known_ledgers, known_entries = position_columns(list(tracker))
        known_counts = np.fromiter(tracker.values(), dtype=np.int64, count=len(tracker))
        universe = np.unique(np.concatenate((known_ledgers, ledgers)))
        known = packed_keys(known_ledgers, known_entries, universe)
        order = np.argsort(known)
        known, known_counts = known[order], known_counts[order]
        wanted = packed_keys(ledgers, entries, universe)
        at = np.minimum(np.searchsorted(known, wanted), known.size - 1)
        return np.where(known[at] == wanted, known_counts[at], 0)

    def _replay_all(self, consumer: Consumer, positions: list[Position], due: int, reason: str) -> None:
        """``redeliverUnacknowledgedMessages(consumer, positions)``: replay set + tracker +1.

        ``addMessageToReplay`` takes only positions after mark-delete (``checkIfMessageIsUnacked``;
        the caller passes only those, in order, each once) and, in 4.0, reports success even for
        a position already queued, so the count grows again. A redeliver-all can hand back a
        million positions: each dictionary is read and written by one C loop over all of them
        (``map``, ``dict.update``, in the order given, as one loop per position would).
        """
        tracker, rows, changed = self.tracker, self.redeliveries, self.changes.redeliveries
        cid = consumer.consumer_id
        counts = [n + 1 for n in map(tracker.get, positions, repeat(0))]
        tracker.update(zip(positions, counts, strict=True))
        if rows.keys().isdisjoint(positions):
            # none queued yet (the usual case): every row is requested now
            new = list(
                map(Redelivery, repeat(cid), repeat(reason), repeat(due), repeat(due), counts, repeat(False))
            )
        else:
            new = [
                Redelivery(cid, reason, previous.requested_at, due, count, previous.dead_letter)
                if previous is not None and previous.reason == reason
                else Redelivery(cid, reason, due, due, count, False)
                for previous, count in zip(map(rows.get, positions), counts, strict=True)
            ]
        rows.update(zip(positions, new, strict=True))
        changed.update(zip(positions, new, strict=True))

    def forget_deleted(self, mark_delete: Position) -> None:
        """After a ledger trim moved mark-delete past unacked entries: drop their replays.

        ``advanceCursorsIfNecessary`` does not tell the dispatcher, but its next replay read
        (``asyncReplayEntries``) skips positions the cursor counts as deleted and removes them
        from ``redeliveryMessages``: nothing at or before mark-delete is redelivered again.
        Their redelivery-tracker counts can no longer be observed (a deleted entry is never
        dispatched), so they go too. Pending acks stay, as in ``Consumer.pendingAcks``: the
        consumer holds those messages until it acks them (an ack below mark-delete still
        removes the pending ack) or closes (nothing is replayed then). A nack that is still a
        client timer stays scheduled; when it fires, the position is not replayed.
        """
        for pos in [p for p, r in self.redeliveries.items() if not r.scheduled and not p > mark_delete]:
            self._set_redelivery(pos, None)
        for pos in [p for p in self.tracker if not p > mark_delete]:
            del self.tracker[pos]

    # ---- client timers -----------------------------------------------------------------
    def fire_timers(self, cursor: Cursor, clock: int, settings: SubscriptionSettings) -> None:
        """Run every nack and ack-timeout redelivery due at or before ``clock``, oldest first."""
        self._timers_changed()
        if cursor.sub_type not in SHARED_MODES:
            self.nacks.clear()
            return
        due = [(when, 0, cid, pos) for when, cid, pos in self.nacks if when <= clock]
        self.nacks = [nack for nack in self.nacks if nack[0] > clock]
        for consumer in self.consumers.values():
            if consumer.ack_timeout_ms <= 0:
                continue
            for pos, pending in consumer.pending.items():
                if 0 <= pending.ack_timeout_at <= clock:
                    due.append((pending.ack_timeout_at, 1, consumer.consumer_id, pos))
        for when, kind, cid, pos in sorted(due):
            consumer = self.consumers.get(cid)
            scheduled = self.redeliveries.get(pos)
            if consumer is None or pos not in consumer.pending:
                # the redeliver-with-ids names an entry the consumer no longer holds: ignored
                if scheduled is not None and scheduled.scheduled and scheduled.consumer_id == cid:
                    self._set_redelivery(pos, None)
                continue
            pending = consumer.pending[pos]
            dead = _dead_letter(consumer, pending)
            consumer.unacked_messages -= self._remaining(cursor, pos, pending.batch_size, settings)
            self._remove_pending(consumer, pos, settings.max_unacked_messages_per_consumer)
            consumer.blocked = False
            self.changes.consumers.add(cid)
            reason = NACK if kind == 0 else ACK_TIMEOUT
            requested = (
                scheduled.requested_at if scheduled is not None and scheduled.reason == reason else when
            )
            if not pos > cursor.mark_delete:
                self._set_redelivery(pos, None)
                continue
            count = self.tracker.get(pos, 0) + 1
            self.tracker[pos] = count
            self._set_redelivery(pos, Redelivery(cid, reason, requested, when, count, dead))

    # ---- helpers -----------------------------------------------------------------------
    def _consumer(self, consumer_id: int, what: str) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            # ServerCnx: commands for a consumer id unknown on the connection are dropped
            raise UnknownConsumer(f"{what} from consumer {consumer_id}, which is not connected")
        return consumer

    def _remaining(
        self, cursor: Cursor, pos: Position, batch_size: int, settings: SubscriptionSettings
    ) -> int:
        """Messages of an entry not yet acked: batch size minus acked indexes (spec 3.2)."""
        if settings.acknowledgment_at_batch_index_level_enabled:
            partial = cursor.batch_acks.get(pos)
            if partial is not None:
                return unacked_count(partial.unacked)
        return batch_size

    def _remove_pending(self, consumer: Consumer, pos: Position, limit: int) -> None:
        """``Consumer.removePendingAcks`` with its unblock check (``updateBlockedConsumerOnUnackedMsgs``):
        unblocked at ``unacked_messages <= max / 2`` or with limits off.

        Callers subtract the entry's count first. In Pulsar 4.0.7 ``individualAckNormal`` runs the
        check twice, inside ``removePendingAcks`` before it subtracts and again after; the count
        only goes down, so the check after the subtraction is the one that decides. Checking only
        before it unblocks one ack late, and a real broker's dispatches to the consumer it has
        already unblocked can land in that gap (``tests/pulsar`` scenario ``unacked_limit``)."""
        removed = consumer.pending.pop(pos)
        if removed.ack_timeout_at >= 0:
            self._timer_removed(removed.ack_timeout_at)
        cid = consumer.consumer_id
        if self.holder.get(pos) == cid:
            del self.holder[pos]
        if (consumer.blocked and consumer.unacked_messages <= limit // 2) or limit <= 0:
            consumer.blocked = False
        # Changes.pending_changed, written out: every ack of a held entry comes here
        changes = self.changes
        changed = changes.pending.get(cid)
        if changed is None:
            changed = changes.pending[cid] = set()
        changed.add(pos)
        changes.consumers.add(cid)

    def _set_redelivery(self, pos: Position, row: Redelivery | None) -> None:
        if row is None:
            self.redeliveries.pop(pos, None)
        else:
            self.redeliveries[pos] = row
        self.changes.redeliveries[pos] = row

    def _drop_nacks_of(self, consumer_id: int) -> None:
        for _, cid, pos in self.nacks:
            row = self.redeliveries.get(pos)
            if cid == consumer_id and row is not None and row.scheduled and row.consumer_id == cid:
                self._set_redelivery(pos, None)
        self.nacks = [n for n in self.nacks if n[1] != consumer_id]
        self._timers_changed()

    def _drop_nacks_at(self, pos: Position) -> None:
        # every whole-entry ack asks, and most find none: the look is a C-level scan
        if pos in map(_NACKED_POSITION, self.nacks):
            self.nacks = [n for n in self.nacks if n[2] != pos]
            self._timers_changed()

    # ---- encoding ----------------------------------------------------------------------
    def encode(self) -> bytes:
        """Exact, versioned: a JSON head (names, settings) and int64 columns for the bulk.

        Every batch encodes the subscriptions it changed (``udfs.apply.emit_cursor``), so the
        redeliver-alls still held as columns (``_bulk``) are encoded as columns too: reading
        ``tracker`` and ``redeliveries`` here would fold a million replays into the dictionaries,
        the Python objects ``BulkReplay`` exists to avoid. The tables hold the rows, in the order,
        that materializing first would give, and the state is left as it was (blocks included).
        """
        consumers = list(self.consumers.values())
        redeliveries, reasons = self._redelivery_table()
        head = {
            "active": self.active,
            "switch_until": self.switch_until,
            "next_order": self.next_order,
            "consumers": [
                [
                    c.consumer_id,
                    c.name,
                    c.priority_level,
                    c.order,
                    c.subscribed_at,
                    c.ack_timeout_ms,
                    c.negative_ack_delay_ms,
                    c.max_redeliver_count,
                    c.unacked_messages,
                    c.blocked,
                    c.implicit,
                ]
                for c in consumers
            ],
            "reasons": reasons,
        }
        if not self.dispatcher:  # only then: a state with one encodes as before the field existed
            head["dispatcher"] = False
        nacks = [(d, c, p[0], p[1]) for d, c, p in self.nacks]
        tables = (
            _pending_table(consumers),
            self._tracker_table(),
            redeliveries,
            np.asarray(nacks, dtype=np.int64).reshape(len(nacks), 4),
        )
        blob = json.dumps(head, separators=(",", ":")).encode()
        parts = [frame(_MAGIC, _VERSION), struct.pack("<I", len(blob)), blob]
        for table in tables:
            parts.append(struct.pack("<I", len(table)))
            parts.append(table.astype("<i8", copy=False).tobytes())
        return b"".join(parts)

    def _tracker_table(self) -> np.ndarray:
        """``tracker`` as (ledger, entry, count) rows, without materializing ``_bulk``: the
        dictionary's entries, then each block's counts written over them in turn, as
        ``_materialize``'s ``update`` does (a position already counted keeps its row and takes
        the new count; a new one is added at the end, in the block's order)."""
        tracker, blocks = self._tracker, self._bulk
        n = len(tracker)
        if not (n or blocks):
            return np.empty((0, 3), dtype=np.int64)
        table = _int64_rows(map(tuple.__add__, tracker, zip(tracker.values())), n, 3)
        if not blocks:
            return table
        ledgers = np.concatenate([table[:, 0], *(b.ledgers for b in blocks)])
        entries = np.concatenate([table[:, 1], *(b.entries for b in blocks)])
        counts = np.concatenate([table[:, 2], *(b.counts for b in blocks)])
        kept = _last_writes(ledgers, entries)
        if kept is not None:  # the usual case: some were counted before
            ledgers, entries, counts = ledgers[kept], entries[kept], counts[kept]
        return np.column_stack((ledgers, entries, counts))

    def _redelivery_table(self) -> tuple[np.ndarray, list[str]]:
        """``redeliveries`` as rows of 8 int64 columns (ledger, entry, consumer id, requested,
        due, count, dead letter, scheduled) and the reason of each row, without materializing
        ``_bulk``: the dictionary's rows, then each block's (``BulkReplay.rows``) written over
        them in turn, as ``_materialize``'s ``update`` does."""
        replays, blocks = self._redeliveries, self._bulk
        n = len(replays)
        if not (n or blocks):
            return np.empty((0, 8), dtype=np.int64), []
        rows = list(replays.values())
        table = _int64_rows(map(tuple.__add__, replays, map(_REDELIVERY_FIELDS, rows)), n, 8)
        reasons = list(map(attrgetter("reason"), rows))
        if not blocks:
            return table, reasons
        sizes = [len(b) for b in blocks]
        ledgers = np.concatenate([table[:, 0], *(b.ledgers for b in blocks)])
        entries = np.concatenate([table[:, 1], *(b.entries for b in blocks)])
        written = np.empty((sum(sizes), 6), dtype=np.int64)
        written[:, 0] = np.repeat(np.asarray([b.consumer_id for b in blocks], dtype=np.int64), sizes)
        due = np.repeat(np.asarray([b.due for b in blocks], dtype=np.int64), sizes)
        written[:, 1] = written[:, 2] = due  # requested and due at once
        written[:, 3] = np.concatenate([b.counts for b in blocks])
        written[:, 4:] = 0  # not dead-lettered, not a scheduled timer
        values = np.concatenate((table[:, 2:], written))
        for block in blocks:
            reasons.extend(repeat(block.reason, len(block)))
        kept = _last_writes(ledgers, entries)
        if kept is not None:  # not while ``__init__``'s rule holds: blocks hold no replayed position
            ledgers, entries, values = ledgers[kept], entries[kept], values[kept]
            reasons = np.asarray(reasons, dtype=object)[kept].tolist()
        return np.column_stack((ledgers, entries, values)), reasons

    @classmethod
    def decode(cls, data: bytes | None) -> Subscription:
        sub = cls()
        if not data:
            return sub
        reader = StateReader(data, _MAGIC, _VERSION, "subscription state")
        head_json = reader.raw(reader.u32())
        tables = []
        for width in (8, 3, 8, 4):
            n = reader.u32()
            tables.append(reader.int64s(n * width).reshape(n, width))
        reader.end()
        try:
            sub._read_head_and_rows(json.loads(head_json), *tables)
        except (KeyError, TypeError, ValueError) as exc:  # a damaged head, or rows that contradict it
            raise reader.corrupt(f"a damaged field ({exc!r})") from exc
        return sub

    def _read_head_and_rows(
        self,
        head: dict[str, Any],
        pending: np.ndarray,
        tracker: np.ndarray,
        redeliveries: np.ndarray,
        nacks: np.ndarray,
    ) -> None:
        """``decode``'s second half: the JSON head and the four row tables into this state.

        The tables are read a column at a time into the dictionaries (``dict.update`` of zipped
        columns, the same entries in the same order as an assignment per row): after a
        redeliver-all of a million pending acks, a row at a time was seconds of Python."""
        sub = self
        sub.active = head["active"]
        sub.dispatcher = bool(head.get("dispatcher", True))
        sub.switch_until = head["switch_until"]
        sub.next_order = head["next_order"]
        # a state written before ``implicit`` existed has ten fields per consumer
        for cid, name, priority_level, order, at, timeout, delay, max_r, unacked, blocked, *rest in head[
            "consumers"
        ]:
            sub.consumers[cid] = Consumer(
                cid,
                name,
                priority_level,
                order,
                at,
                timeout,
                delay,
                max_r,
                unacked,
                blocked,
                implicit=bool(rest and rest[0]),
            )
        # pending acks: encoded consumer by consumer, each run of one consumer id at once
        cids, ledgers, entries, *fields = pending.T.tolist()
        positions = positions_of(ledgers, entries)
        acks = list(map(PendingAck, *fields))
        held = zip(positions, acks, strict=True)
        for cid, run in groupby(cids):
            sub.consumers[cid].pending.update(islice(held, len(list(run))))
        sub.holder.update(zip(positions, cids, strict=True))
        ledgers, entries, counts = tracker.T.tolist()
        sub._tracker = dict(zip(positions_of(ledgers, entries), counts, strict=True))
        reasons = list(head["reasons"])
        if len(reasons) != len(redeliveries):
            raise ValueError(f"{len(reasons)} reasons for {len(redeliveries)} redeliveries")
        ledgers, entries, cids, requested, due, counts, dead, scheduled = redeliveries.T.tolist()
        rows = map(Redelivery, cids, reasons, requested, due, counts, map(bool, dead), map(bool, scheduled))
        sub._redeliveries = dict(zip(positions_of(ledgers, entries), rows, strict=True))
        sub.nacks = [(d, c, (ledger, entry)) for d, c, ledger, entry in nacks.tolist()]


def _dead_letter(consumer: Consumer, pending: PendingAck) -> bool:
    """Client spec 9.2: a message delivered with ``redelivery_count >= maxRedeliverCount`` goes
    to the dead-letter topic on its next redelivery request instead of coming back."""
    limit = consumer.max_redeliver_count
    return limit > 0 and pending.redelivery_count >= limit


# the encoded int64 columns of a ``PendingAck`` and of a ``Redelivery`` after the position
_PENDING_FIELDS = attrgetter(
    "batch_size", "sticky_key_hash", "dispatched_at", "redelivery_count", "ack_timeout_at"
)
_REDELIVERY_FIELDS = attrgetter(
    "consumer_id", "requested_at", "due_at", "redelivery_count", "dead_letter", "scheduled"
)


def _int64_rows(rows: Iterable[tuple[int, ...]], n: int, width: int) -> np.ndarray:
    """``n`` tuples of ``width`` ints (bools as 0/1) as an (n, width) int64 table: one flat
    ``fromiter``, where ``np.asarray`` of the list of tuples takes twice as long for a million."""
    return np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=n * width).reshape(n, width)


def _pending_table(consumers: list[Consumer]) -> np.ndarray:
    """Every pending ack as (consumer id, ledger, entry, batch size, sticky key hash, dispatched,
    count, ack timeout) rows, consumer by consumer, each in its dictionary's order."""
    holding = [c for c in consumers if c.pending]
    n = sum(len(c.pending) for c in holding)
    table = np.empty((n, 8), dtype=np.int64)
    if n:
        acks = (map(tuple.__add__, c.pending, map(_PENDING_FIELDS, c.pending.values())) for c in holding)
        table[:, 1:] = _int64_rows(chain.from_iterable(acks), n, 7)
        start = 0
        for consumer in holding:
            end = start + len(consumer.pending)
            table[start:end, 0] = consumer.consumer_id
            start = end
    return table


def _last_writes(ledgers: np.ndarray, entries: np.ndarray) -> np.ndarray | None:
    """The rows a dictionary keyed by position ends up with when written with these keys in this
    order (filled, then ``update``d by each ``BulkReplay``): in its iteration order, which keeps a
    key where it was first written, the index of each key's last write (the value it holds).
    None when no key is written twice: then the dictionary is the writes, in order.

    Positions are sorted stably as one packed int64 each (sorted runs, as the blocks are, make
    that a merge), or as two columns when an entry id is beyond ``packed_keys``' range."""
    n = ledgers.size
    if n < 2:
        return None
    if entries.min() >= -1 and entries.max() < 2**32 - 1:
        keys = packed_keys(ledgers, entries, np.unique(ledgers))
        order = np.argsort(keys, kind="stable")  # the writes of one position in write order
        keys = keys[order]
        differs = keys[1:] != keys[:-1]
    else:
        order = np.lexsort((entries, ledgers))
        ledgers, entries = ledgers[order], entries[order]
        differs = (ledgers[1:] != ledgers[:-1]) | (entries[1:] != entries[:-1])
    if differs.all():
        return None
    first = np.concatenate(([True], differs))
    last = np.concatenate((differs, [True]))
    last_of = np.full(n, -1, dtype=np.intp)  # at each position's first write: its last write
    last_of[order[first]] = order[last]
    return last_of[last_of >= 0]
