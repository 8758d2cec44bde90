"""A topic partition's starting state, read from what Pulsar's admin API shows of it.

``ackstate bootstrap`` starts ackstate in the middle of a cluster's life: the state the broker
already holds becomes the state the events that follow apply on top of. The admin API shows:

* ``internalStats`` (``ManagedLedgerInternalStats``): the ledgers with their entry counts
  (the ledger being written shows 0 until it closes; ``lastConfirmedEntry`` says how far it
  goes), and each cursor's ``markDeletePosition`` and ``individuallyDeletedMessages``, printed
  as ``OpenLongPairRangeSet`` prints them: open-closed ranges ``[(3:0..3:1],(3:2..3:3]]``;
* ``stats``: each subscription's ``type`` and whether it is durable.

What it does not show, and what ackstate assumes until events say otherwise:

* which consumer holds which dispatched entry: no pending acks (consumers' ``unackedMessages``
  start at 0, and converge as the entries they hold are acked or redelivered);
* consumer ids: no consumer is created (a broker restart, which installing the plugin needs,
  makes every client subscribe again; ``implicit_consumers`` attaches the others);
* the ``ack_set`` of a partly acked batch entry (``CursorStats`` has no batch indexes): the
  entry counts as wholly unacked until its last index is acked;
* producers' sequence ids: dedup state starts empty (the broker answers a resend from its own
  snapshot; ackstate's verdict is ``Unknown`` until the producer sends again).

Only durable subscriptions are taken: a reader's non-durable cursor ends with its reader.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.cursor import SUB_TYPES, Cursor
from engine.errors import SnapshotError
from engine.ledgers import Ledgers
from engine.partition import PartitionState
from engine.position import EARLIEST, Position, parse_position
from engine.subscription import NO_DISPATCHER, TYPE_BEFORE_DISPATCHER, Subscription
from engine.topic import is_persistent

# one open-closed range of OpenLongPairRangeSet.toString: "(L:E..L:E]"
_RANGE = re.compile(r"\((\d+):(-?\d+)\.\.(\d+):(-?\d+)\]")


def parse_ranges(text: str | None) -> list[tuple[Position, Position]]:
    """``individuallyDeletedMessages`` as (open lower, closed upper) pairs, in order."""
    if not text or text == "[]":
        return []
    found = [((int(a), int(b)), (int(c), int(d))) for a, b, c, d in _RANGE.findall(text)]
    if not found or text.count("(") != len(found):
        raise SnapshotError(f"individuallyDeletedMessages {text!r} is not a list of (L:E..L:E] ranges")
    return found


def ledgers_from_internal_stats(internal: Mapping[str, Any]) -> Ledgers:
    """The ledgers that hold entries, each with its last entry id.

    A closed ledger's count is in ``ledgers[].entries``; the one being written to shows 0 there
    (ManagedLedgerImpl.getInternalStats copies ``LedgerInfo``, whose count is set on close), and
    ``lastConfirmedEntry`` gives its last entry. A ledger without entries is left out, as ackstate
    only learns of a ledger from an entry in it.
    """
    lac = _position(internal.get("lastConfirmedEntry"), "lastConfirmedEntry")
    ledgers = Ledgers()
    for info in internal.get("ledgers") or []:
        ledger_id = int(info["ledgerId"])
        last = lac[1] if ledger_id == lac[0] else int(info.get("entries") or 0) - 1
        if last >= 0:
            ledgers.publish((ledger_id, last))
    return ledgers


def partition_from_admin(
    topic: str, partition: int, stats: Mapping[str, Any], internal: Mapping[str, Any] | None
) -> PartitionState:
    """The starting state of one topic partition from its ``stats`` and ``internalStats``.

    ``internal`` is None for a non-persistent topic (it has no managed ledger): its
    subscriptions are kept with their type and no acknowledgement state, as on the broker.
    """
    state = PartitionState(topic, partition)
    persistent = is_persistent(topic)
    if persistent and internal is None:
        raise SnapshotError(f"{topic}: a persistent topic needs its internalStats")
    cursors = (internal or {}).get("cursors") or {}
    if persistent:
        state.ledgers = ledgers_from_internal_stats(internal or {})
    for name, sub in sorted((stats.get("subscriptions") or {}).items()):
        if not sub.get("isDurable", True):
            continue
        # a subscription no consumer has joined since its topic loaded has no dispatcher, and
        # stats show its type as "None" (PersistentSubscription.getTypeString): the first
        # SUBSCRIBE gives it one (Subscription.subscribe replaces the type of a cursor without
        # consumers); until then the cursor holds TYPE_BEFORE_DISPATCHER and the subscription
        # shows "None"
        shown = str(sub.get("type") or NO_DISPATCHER)
        sub_type = TYPE_BEFORE_DISPATCHER if shown == NO_DISPATCHER else shown
        if sub_type not in SUB_TYPES:
            raise SnapshotError(f"{topic} subscription {name!r}: unknown type {sub_type!r}")
        cursor = Cursor(sub_type)
        if persistent:
            if name not in cursors:
                raise SnapshotError(f"{topic} subscription {name!r} has no cursor in internalStats")
            _restore(cursor, cursors[name], state.ledgers)
        state.cursors[name] = cursor
        state.subscriptions[name] = subscription = Subscription()
        subscription.dispatcher = shown != NO_DISPATCHER
    return state


def _restore(cursor: Cursor, stats: Mapping[str, Any], ledgers: Ledgers) -> None:
    cursor.mark_delete = _position(stats.get("markDeletePosition"), "markDeletePosition")
    for lower, upper in parse_ranges(stats.get("individuallyDeletedMessages")):
        for ledger_id, first, last in _entries_between(lower, upper, ledgers):
            cursor.acked.add_entries(ledger_id, np.arange(first, last + 1, dtype=np.int64))


def _entries_between(lower: Position, upper: Position, ledgers: Ledgers) -> list[tuple[int, int, int]]:
    """The entries of the open-closed range ``(lower..upper]`` as (ledger, first, last) runs.

    With Pulsar's default ``unackedRangesOpenCacheSetEnabled`` a range never leaves its ledger;
    a range that does (the other range set) covers the rest of its lower ledger, the ledgers
    between, and the start of its upper ledger.
    """
    if lower[0] == upper[0]:
        return [(lower[0], lower[1] + 1, upper[1])] if upper > lower else []
    runs = []
    for ledger_id, last in ledgers:
        if ledger_id == lower[0] and lower[1] < last:
            runs.append((ledger_id, lower[1] + 1, last))
        elif lower[0] < ledger_id < upper[0]:
            runs.append((ledger_id, 0, last))
    if upper[1] >= 0:
        runs.append((upper[0], 0, upper[1]))
    return runs


def _position(text: Any, what: str) -> Position:
    if text is None:
        return EARLIEST
    try:
        return parse_position(str(text))
    except ValueError as exc:
        raise SnapshotError(f"{what} {text!r} is not L:E") from exc
