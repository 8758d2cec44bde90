"""Consumers, pending acks and redelivery: the edge cases of pulsar-broker.md sections 3-5.

Each test feeds contract-shaped events to ``PartitionState.apply`` (the path ingest uses) and
reads the engine's state; the rule each one pins is named in its docstring.
"""

from __future__ import annotations

import copy
import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Cursor, EngineSettings, EventBatch, PartitionState, Position
from engine.codec import frame
from engine.subscription import (
    ACK_TIMEOUT,
    CONSUMER_CLOSED,
    NACK,
    REDELIVER,
    BulkReplay,
    Changes,
    Consumer,
    Subscription,
    SubscriptionSettings,
)

TOPIC = "persistent://t/ns/subs"


class Stream:
    """Builds events with increasing seq and event time (1 s apart unless told)."""

    def __init__(self, settings: EngineSettings | None = None, partition: int = -1) -> None:
        self.state = PartitionState(TOPIC, partition)
        self.settings = settings or EngineSettings()
        self.seq = 0
        self.time = 1_000_000
        self.rejects: list[str] = []

    def apply(self, *events: dict[str, Any]) -> PartitionState:
        records = []
        for event in events:
            self.seq += 1
            self.time = event.pop("at", self.time + 1000)
            records.append({"seq": self.seq, "event_time": self.time, **event})
        result = self.state.apply(EventBatch.from_records(records), self.settings)
        self.rejects.extend(r.reason for r in result.rejects)
        return self.state

    # event builders
    def publish(self, ledger: int, *entries: int, batch_size: int = 1) -> PartitionState:
        return self.apply(
            *(
                {"type": "PUBLISH", "ledger_id": ledger, "entry_id": e, "batch_size": batch_size}
                for e in entries
            )
        )

    @staticmethod
    def subscribe(cid: int, sub_type: str = "Shared", sub: str = "s", **extra: Any) -> dict[str, Any]:
        return {
            "type": "SUBSCRIBE",
            "subscription": sub,
            "consumer_id": cid,
            "consumer_name": extra.pop("name", f"c{cid}"),
            "sub_type": sub_type,
            "initial_position": "Earliest",
            **extra,
        }

    @staticmethod
    def dispatch(cid: int, ledger: int, entry: int, batch_size: int = 1, sub: str = "s") -> dict[str, Any]:
        return {
            "type": "DISPATCH",
            "subscription": sub,
            "consumer_id": cid,
            "ledger_id": ledger,
            "entry_id": entry,
            "batch_size": batch_size,
        }

    @staticmethod
    def ack(cid: int, *ids: Any, cumulative: bool = False, sub: str = "s") -> dict[str, Any]:
        return {
            "type": "ACK",
            "subscription": sub,
            "consumer_id": cid,
            "ack_type": "Cumulative" if cumulative else "Individual",
            "message_ids": [i if isinstance(i, dict) else {"ledger_id": i[0], "entry_id": i[1]} for i in ids],
        }

    @staticmethod
    def ids(kind: str, cid: int, *positions: tuple[int, int], sub: str = "s", **extra: Any) -> dict[str, Any]:
        return {
            "type": kind,
            "subscription": sub,
            "consumer_id": cid,
            "message_ids": [{"ledger_id": lid, "entry_id": eid} for lid, eid in positions],
            **extra,
        }

    @staticmethod
    def close(cid: int, sub: str = "s") -> dict[str, Any]:
        return {"type": "CLOSE_CONSUMER", "subscription": sub, "consumer_id": cid}

    # views
    def sub(self, name: str = "s"):
        return self.state.subscriptions[name]

    def unacked_messages(self, cid: int, name: str = "s") -> int:
        return self.sub(name).consumers[cid].unacked_messages

    def pending(self, cid: int, name: str = "s") -> dict[Position, int]:
        return {p: a.redelivery_count for p, a in self.sub(name).consumers[cid].pending.items()}


def shared_with_two(entries: int = 4, **settings: Any) -> Stream:
    s = Stream(EngineSettings(**settings))
    s.publish(10, *range(entries))
    s.apply(s.subscribe(1), s.subscribe(2))
    return s


# ---- section 3: acks and pending acks -----------------------------------------------------
def test_ack_from_another_consumer_removes_the_owners_pending_ack():
    """3 edge 1: owner lookup across consumers; the owner's unacked count drops."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0), s.dispatch(1, 10, 1))
    s.apply(s.ack(2, (10, 0)))
    assert s.pending(1) == {(10, 1): 0}
    assert (s.unacked_messages(1), s.unacked_messages(2)) == (1, 0)
    assert s.state.cursors["s"].mark_delete == (10, 0)


def test_ack_of_an_entry_nobody_holds_moves_the_cursor_only():
    """3 edge 2: no pending ack anywhere: cursor updated, no unacked counter changes."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 1))
    s.apply(s.ack(2, (10, 0)))
    assert s.state.cursors["s"].mark_delete == (10, 0)
    assert (s.unacked_messages(1), s.unacked_messages(2)) == (1, 0)


def test_cumulative_ack_on_shared_is_ignored_and_recorded():
    """3 edge 3: "Received cumulative ack on shared subscription, ignoring"."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0), s.ack(1, (10, 0), cumulative=True))
    assert s.rejects == ["cumulative_ack_not_allowed"]
    assert s.state.cursors["s"].mark_delete == (10, -1)
    assert s.unacked_messages(1) == 1


def test_batch_index_ack_lowers_unacked_but_keeps_the_pending_ack():
    """3 edge 4 and 5: an ack_set ack never removes the pending ack; counts are in messages."""
    s = shared_with_two(acknowledgment_at_batch_index_level_enabled=True)
    s.apply(s.dispatch(1, 10, 0, batch_size=5))
    assert s.unacked_messages(1) == 5
    # indexes 0 and 1 acked: bits set = still unacked -> 0b11100
    s.apply(s.ack(1, {"ledger_id": 10, "entry_id": 0, "batch_size": 5, "ack_set": [0b11100]}))
    assert s.unacked_messages(1) == 3
    assert (10, 0) in s.sub().consumers[1].pending
    s.apply(s.ack(1, (10, 0)))  # the client's final plain ack: the 3 remaining messages
    assert s.unacked_messages(1) == 0
    assert s.sub().consumers[1].pending == {}


def test_batch_index_ack_with_the_feature_off_changes_no_count():
    """Spec 8: batch-index ack with the feature disabled is a no-op for Shared."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0, batch_size=5))
    s.apply(s.ack(1, {"ledger_id": 10, "entry_id": 0, "batch_size": 5, "ack_set": [0b11100]}))
    assert s.unacked_messages(1) == 5


def test_blocked_at_the_limit_and_unblocked_at_half_after_the_subtraction():
    """3.4: block at unacked_messages >= max; unblock when the ack leaves unacked_messages <= max/2.

    Pulsar 4.0.7 ``Consumer.individualAckNormal`` subtracts the ack's count and then calls
    ``updateBlockedConsumerOnUnackedMsgs`` again, after the check inside ``removePendingAcks``:
    the count after the ack decides (the spec's "before subtracting" is one ack late)."""
    s = shared_with_two(entries=8, max_unacked_messages_per_consumer=4)
    s.apply(*(s.dispatch(1, 10, e) for e in range(4)))
    assert s.sub().consumers[1].blocked
    s.apply(s.ack(1, (10, 0)))  # 3 > 2 after subtracting: still blocked
    assert s.sub().consumers[1].blocked and s.unacked_messages(1) == 3
    s.apply(s.ack(1, (10, 1)))  # 2 <= 2 after subtracting: unblocked
    assert not s.sub().consumers[1].blocked and s.unacked_messages(1) == 2


def test_an_ack_that_unblocks_lets_dispatches_count_from_the_lower_figure():
    """The broker unblocks on the ack that takes the consumer to half the limit and dispatches
    at once; those dispatches must not keep it blocked (the race a real broker showed)."""
    s = shared_with_two(entries=8, max_unacked_messages_per_consumer=4)
    s.apply(*(s.dispatch(1, 10, e) for e in range(4)))
    s.apply(s.ack(1, (10, 0)), s.ack(1, (10, 1)))
    s.apply(s.dispatch(1, 10, 4), s.ack(1, (10, 2)))  # 3 unacked, then 2: never back at 4
    assert not s.sub().consumers[1].blocked and s.unacked_messages(1) == 2


def test_acks_of_an_unknown_consumer_are_dropped():
    """ServerCnx drops commands of a consumer id it does not know: no cursor change."""
    s = shared_with_two()
    s.apply(s.ack(9, (10, 0)))
    assert s.rejects == ["unknown_consumer"]
    assert s.state.cursors["s"].mark_delete == (10, -1)


# ---- section 4: redelivery ------------------------------------------------------------------
def test_redeliver_with_ids_takes_only_the_callers_pending_acks():
    """4 edge 2: ids held by another consumer are ignored; tracker +1 for the taken ones."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0), s.dispatch(2, 10, 1))
    s.apply(s.ids("REDELIVER", 1, (10, 0), (10, 1)))
    assert s.pending(1) == {}
    assert s.pending(2) == {(10, 1): 0}
    row = s.sub().redeliveries[(10, 0)]
    assert (row.reason, row.redelivery_count) == (REDELIVER, 1)
    assert (10, 1) not in s.sub().redeliveries
    s.apply(s.dispatch(2, 10, 0))
    assert s.pending(2) == {(10, 1): 0, (10, 0): 1}
    assert (10, 0) not in s.sub().redeliveries  # delivered again


def test_redeliver_all_resets_unacked_and_counts_grow():
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0), s.dispatch(1, 10, 1))
    s.apply(s.ids("REDELIVER", 1))
    assert s.unacked_messages(1) == 0
    s.apply(s.dispatch(2, 10, 0), s.ids("REDELIVER", 2), s.dispatch(1, 10, 0))
    assert s.pending(1) == {(10, 0): 2}


def test_redelivery_count_grows_even_when_already_queued():
    """4.3 (4.0's addMessageToReplay returns true for any position after mark-delete)."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0), s.ids("REDELIVER", 1))
    s.apply(s.dispatch(1, 10, 0), s.ids("REDELIVER", 1))
    assert s.sub().redeliveries[(10, 0)].redelivery_count == 2


def test_consumer_close_replays_without_a_bump_and_the_last_one_clears_counts():
    """4 edge 3: disconnect does not bump counts; the last consumer leaving wipes them."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0), s.ids("REDELIVER", 1), s.dispatch(1, 10, 0), s.dispatch(1, 10, 1))
    s.apply(s.close(1))
    assert s.sub().redeliveries[(10, 0)].reason == CONSUMER_CLOSED
    assert s.sub().redeliveries[(10, 0)].redelivery_count == 1
    assert s.sub().redeliveries[(10, 1)].redelivery_count == 0
    assert s.sub().unacked_messages() == 0
    s.apply(s.close(2))
    assert s.sub().redeliveries == {} and s.sub().tracker == {}
    s.apply(s.subscribe(3), s.dispatch(3, 10, 0))
    assert s.pending(3) == {(10, 0): 0}


def test_replay_only_after_mark_delete():
    """4 edge 4: positions at or before mark-delete never enter the replay set."""
    s = shared_with_two()
    s.apply(s.dispatch(1, 10, 0), s.dispatch(2, 10, 0))  # sent elsewhere: moves to c2
    assert s.pending(1) == {} and s.pending(2) == {(10, 0): 0}


def test_exclusive_admits_one_consumer():
    s = Stream()
    s.publish(10, 0)
    s.apply(s.subscribe(1, "Exclusive"), s.subscribe(2, "Exclusive"))
    assert s.rejects == ["exclusive_consumer_busy"]
    assert s.sub().active_name() == "c1"


def test_redeliver_on_failover_only_from_the_active_consumer_and_not_during_a_switch():
    """4 edge 1 and 5, 5 edge 5-6: ids mean all; inactive and mid-switch requests are ignored."""
    s = Stream(partition=0)
    s.publish(10, 0, 1)
    s.apply(s.subscribe(1, "Failover", name="a"), s.subscribe(2, "Failover", name="b"))
    # partition 0 % 2 -> "a"; the switch to the first active consumer is 1 s out
    assert s.sub().active_name() == "a"
    s.apply(s.ids("REDELIVER", 1, (10, 0)))  # 1 s after the subscribe: the switch has happened
    s.apply(s.ids("REDELIVER", 2, (10, 0)))
    assert s.rejects == ["redeliver_not_active_consumer"]
    s.apply(s.close(1))
    s.apply({**s.ids("REDELIVER", 2), "at": s.time + 10})
    assert s.rejects[-1] == "redeliver_during_failover_switch"
    s.apply(s.ack(1 + 1, (10, 0)))  # acks from any consumer count
    assert s.state.cursors["s"].mark_delete == (10, 0)


def test_failover_changes_record_the_delay_as_effective_at():
    s = Stream(partition=1)
    s.publish(10, 0)
    s.apply(s.subscribe(1, "Failover", name="a"))
    s.apply({**s.subscribe(2, "Failover", name="b"), "at": s.time + 500})  # 1 % 2 -> "b"
    changes = s.sub().changes.active
    assert [(c.previous, c.new) for c in changes] == [(None, (1, "a")), ((1, "a"), (2, "b"))]
    assert changes[0].effective_at == changes[0].event_time + 1000
    # a switch already pending keeps its original timer
    assert changes[1].effective_at == changes[0].effective_at


def test_subscription_type_cannot_change_while_consumers_are_connected():
    s = shared_with_two()
    s.apply(s.subscribe(3, "Failover"))
    assert s.rejects == ["subscription_type_mismatch"]
    s.apply(s.close(1), s.close(2), s.subscribe(3, "Failover"))
    assert s.state.cursors["s"].sub_type == "Failover"


def test_closing_an_unknown_consumer_is_refused():
    s = shared_with_two()
    s.apply(s.close(7))
    assert s.rejects == ["consumer_not_connected"]


# ---- client timers: nack delay, ack timeout, dead letter -------------------------------------
def test_nack_redelivers_after_the_delay_on_the_partition_clock():
    s = shared_with_two()
    s.apply(s.subscribe(3, negative_ack_delay_ms=3000))
    s.apply(s.dispatch(3, 10, 0), s.ids("NACK", 3, (10, 0)))
    nacked_at = s.time
    assert s.sub().redeliveries[(10, 0)].scheduled
    s.publish(10, 5)  # 1 s later: not due
    assert s.pending(3) == {(10, 0): 0}
    s.apply({"type": "PUBLISH", "ledger_id": 10, "entry_id": 6, "at": nacked_at + 3000})
    assert s.pending(3) == {}
    row = s.sub().redeliveries[(10, 0)]
    assert (row.reason, row.due_at, row.redelivery_count, row.scheduled) == (NACK, nacked_at + 3000, 1, False)


def test_nack_delay_has_a_100_ms_floor():
    s = shared_with_two()
    s.apply(s.subscribe(3, negative_ack_delay_ms=0), s.dispatch(3, 10, 0), s.ids("NACK", 3, (10, 0)))
    assert s.sub().redeliveries[(10, 0)].due_at == s.time + 100


def test_ack_timeout_redelivers_unacked_entries():
    s = shared_with_two()
    s.apply(s.subscribe(3, ack_timeout_ms=5000), s.dispatch(3, 10, 0), s.dispatch(3, 10, 1))
    dispatched = s.time
    s.apply(s.ack(3, (10, 1)))
    s.apply({"type": "PUBLISH", "ledger_id": 10, "entry_id": 9, "at": dispatched + 5000})
    assert s.pending(3) == {}
    row = s.sub().redeliveries[(10, 0)]
    assert (row.reason, row.redelivery_count) == (ACK_TIMEOUT, 1)


def test_dead_letter_once_delivered_with_the_max_count():
    """Client 9.2: delivered with r >= maxRedeliverCount -> the next redelivery goes to the DLQ."""
    s = shared_with_two()
    s.apply(s.subscribe(3, max_redeliver_count=2))
    for _ in range(2):
        s.apply(s.dispatch(3, 10, 0), s.ids("REDELIVER", 3, (10, 0)))
    s.apply(s.dispatch(3, 10, 0))
    assert s.pending(3) == {(10, 0): 2}
    s.apply({**s.ids("NACK", 3, (10, 0)), "negative_ack_delay_ms": 100})
    assert s.sub().redeliveries[(10, 0)].dead_letter


def test_subscription_state_round_trips_exactly():
    s = shared_with_two()
    s.apply(s.subscribe(3, ack_timeout_ms=5000, max_redeliver_count=3), s.dispatch(3, 10, 0))
    s.apply(s.dispatch(1, 10, 1), s.ids("NACK", 1, (10, 1)), s.dispatch(2, 10, 2), s.ids("REDELIVER", 2))
    from engine.subscription import Subscription

    sub = s.sub()
    again = Subscription.decode(sub.encode())
    assert again.encode() == sub.encode()
    assert again.consumers == sub.consumers
    assert again.redeliveries == sub.redeliveries
    assert again.nacks == sub.nacks and again.tracker == sub.tracker


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover"])
def test_single_active_types_keep_no_pending_acks(sub_type):
    s = Stream()
    s.publish(10, 0, 1)
    s.apply(s.subscribe(1, sub_type), s.dispatch(1, 10, 0), s.ids("NACK", 1, (10, 0)))
    assert s.sub().consumers[1].pending == {} and s.unacked_messages(1) == 0
    assert s.sub().redeliveries == {}


@pytest.mark.parametrize("initial", ["Latest", "Earliest"])
def test_cursor_opened_before_any_entry_sits_before_the_first_ledger(initial: str):
    """ManagedLedgerImpl.asyncOpenCursor on the empty ledger the topic opened: mark-delete is
    ``(currentLedger, -1)``. Seen on a real 4.0.7 broker (tests/pulsar): a Shared subscription made
    before the first publish shows ``markDeletePosition`` ``14:-1`` once entries land in ledger 14."""
    s = Stream()
    s.apply(s.subscribe(1, initial_position=initial), s.subscribe(2, sub="later", initial_position=initial))
    assert s.state.cursors["s"].mark_delete == (-1, -1)
    s.publish(14, 0, 1)
    assert s.state.cursors["s"].mark_delete == (14, -1)
    assert s.state.cursors["later"].mark_delete == (14, -1)
    assert s.state.cursors["s"].backlog(s.state.ledgers) == 2


def test_batch_index_ack_without_batch_size_takes_it_from_the_pending_ack():
    """Consumer.getBatchSize: a message id without ``batch_size`` (the Python client sends none)
    is measured by the pending ack's batch size. Real broker (tests/pulsar): a 5-message entry,
    indices 0 and 2 acked, leaves 3 unacked on the consumer."""
    s = Stream(EngineSettings(acknowledgment_at_batch_index_level_enabled=True))
    s.publish(10, 0, batch_size=5)
    s.apply(s.subscribe(1), s.dispatch(1, 10, 0, batch_size=5))
    s.apply(s.ack(1, {"ledger_id": 10, "entry_id": 0, "ack_set": [0b11011]}))
    s.apply(s.ack(1, {"ledger_id": 10, "entry_id": 0, "ack_set": [0b11110]}))
    assert s.rejects == []
    assert s.unacked_messages(1) == 3
    partial = s.state.cursors["s"].batch_acks[(10, 0)]
    assert (partial.batch_size, partial.acked_count) == (5, 2)


def test_non_persistent_topic_keeps_no_acknowledgement_state():
    """NonPersistentTopic.publishMessage reports every message at 0:0; NonPersistentSubscription
    acks and redeliveries are no-ops; Consumer.addAndGetUnAckedMsgs counts only on persistent
    topics. A real 4.0.7 broker (tests/pulsar) shows msgBacklog 0 and unackedMessages 0 after 10
    messages dispatched to a Shared consumer that acked 5."""
    s = Stream()
    s.state = PartitionState("non-persistent://t/ns/np", -1)
    s.apply(s.subscribe(1))
    for _ in range(3):
        s.publish(0, 0)
        s.apply(s.dispatch(1, 0, 0))
    s.apply(s.ack(1, (0, 0)), s.ids("REDELIVER", 1))
    assert s.rejects == []
    assert s.unacked_messages(1) == 0
    assert s.pending(1) == {}
    assert s.state.cursors["s"].backlog(s.state.ledgers) == 0


def test_two_ids_of_one_batch_in_one_command_each_count_against_the_cursor_before_it():
    """Consumer.individualAckNormal measures each id's ``ack_set`` against ``getCursorAckSet``,
    which the command updates only after its loop. The Python client sends, for indices 0 and 2
    of a 5-message entry, one CommandAck with two ids that both carry ``0b11010``; a real 4.0.7
    broker then lowers unackedMessages by 4, not 2 (tests/pulsar, batch_index_acks)."""
    s = Stream(EngineSettings(acknowledgment_at_batch_index_level_enabled=True))
    s.publish(10, 0, batch_size=5)
    s.apply(s.subscribe(1), s.dispatch(1, 10, 0, batch_size=5))
    same = {"ledger_id": 10, "entry_id": 0, "ack_set": [0b11010]}
    s.apply(s.ack(1, same, dict(same)))
    assert s.unacked_messages(1) == 1
    assert s.state.cursors["s"].batch_acks[(10, 0)].acked_count == 2  # the cursor ANDs: exact


def test_the_same_ids_in_two_commands_count_once():
    s = Stream(EngineSettings(acknowledgment_at_batch_index_level_enabled=True))
    s.publish(10, 0, batch_size=5)
    s.apply(s.subscribe(1), s.dispatch(1, 10, 0, batch_size=5))
    same = {"ledger_id": 10, "entry_id": 0, "ack_set": [0b11010]}
    s.apply(s.ack(1, same), s.ack(1, dict(same)))
    assert s.unacked_messages(1) == 3


def test_ids_after_one_beyond_the_last_entry_still_release_their_pending_acks():
    """Consumer.individualAckNormal removes the pending ack of every id of the command, then
    calls ManagedCursorImpl.asyncDelete, which stops at the first position beyond the last entry
    ("Invalid mark deleted position"): the cursor keeps only the ids before it."""
    s = Stream()
    s.publish(10, 0, 1, 2)
    s.apply(s.subscribe(1), *(s.dispatch(1, 10, e) for e in (0, 1, 2)))
    s.apply(s.ack(1, (10, 0), (10, 9), (10, 1)))
    assert s.rejects == ["ack_beyond_last_published"]
    assert s.pending(1) == {(10, 2): 0}
    assert s.unacked_messages(1) == 1
    assert s.state.cursors["s"].mark_delete == (10, 0)
    assert not s.state.cursors["s"].is_deleted((10, 1))


def test_exclusive_dispatch_of_an_acked_entry_is_a_fact_not_a_refusal():
    """PersistentDispatcherSingleActiveConsumer sends entries it read before an ack landed: a
    real 4.0.7 broker dispatched 24:0 after the consumer acked it and asked for redelivery. An
    Exclusive subscription holds no pending ack, so nothing changes and nothing is refused."""
    s = Stream()
    s.publish(24, 0, 1)
    s.apply(s.subscribe(1, "Exclusive"), s.dispatch(1, 24, 0), s.ack(1, (24, 0)), s.dispatch(1, 24, 0))
    assert s.rejects == []
    assert s.state.cursors["s"].mark_delete == (24, 0)


def test_shared_dispatch_of_an_acked_entry_counts_like_any_dispatch():
    """Consumer.sendMessages adds the pending ack and the unacked messages of whatever the
    dispatcher sends, also an entry acked while it was being read (real 4.0.7 broker: a Shared
    consumer's unackedMessages 6 after 6 dispatches, one of them of the entry it had just acked)."""
    s = Stream()
    s.publish(24, 0, 1)
    s.apply(s.subscribe(1), s.dispatch(1, 24, 0), s.dispatch(1, 24, 1), s.ack(1, (24, 0)))
    s.apply(s.dispatch(1, 24, 0))
    assert s.rejects == []
    assert s.unacked_messages(1) == 2


# ---- implicit consumers (a stream that starts after its consumers subscribed) ---------------
def _closed_after_subscribing(sub_type: str, implicit: bool) -> Stream:
    """A subscription whose one consumer left: the state knows the cursor, no consumer."""
    s = Stream(EngineSettings(implicit_consumers=implicit))
    s.publish(10, *range(4))
    s.apply(s.subscribe(1, sub_type), s.close(1))
    return s


@pytest.mark.parametrize("command", ["DISPATCH", "ACK", "NACK", "REDELIVER"])
def test_without_implicit_consumers_every_command_of_an_unknown_consumer_is_refused(command):
    s = _closed_after_subscribing("Shared", implicit=False)
    event = {
        "DISPATCH": s.dispatch(7, 10, 0),
        "ACK": s.ack(7, (10, 0)),
        "NACK": s.ids("NACK", 7, (10, 0)),
        "REDELIVER": s.ids("REDELIVER", 7),
    }[command]
    s.apply(event)
    assert s.rejects == ["unknown_consumer"]
    assert 7 not in s.sub().consumers


@pytest.mark.parametrize("command", ["DISPATCH", "ACK", "NACK", "REDELIVER"])
def test_implicit_consumers_attach_the_consumer_of_any_command(command):
    s = _closed_after_subscribing("Shared", implicit=True)
    event = {
        "DISPATCH": s.dispatch(7, 10, 0),
        "ACK": s.ack(7, (10, 0)),
        "NACK": s.ids("NACK", 7, (10, 0)),
        "REDELIVER": s.ids("REDELIVER", 7),
    }[command]
    s.apply(event)
    assert s.rejects == []
    consumer = s.sub().consumers[7]
    assert (consumer.name, consumer.priority_level, consumer.implicit) == ("7", 0, True)
    assert (consumer.ack_timeout_ms, consumer.max_redeliver_count) == (0, 0)
    assert consumer.negative_ack_delay_ms == 60_000


def test_an_implicit_consumer_is_then_served_like_a_subscribed_one():
    s = _closed_after_subscribing("Shared", implicit=True)
    s.apply(s.dispatch(7, 10, 0), s.dispatch(7, 10, 1), s.dispatch(8, 10, 2))
    assert (s.unacked_messages(7), s.unacked_messages(8)) == (2, 1)
    s.apply(s.ack(7, (10, 0), (10, 1)), s.ack(8, (10, 2)))
    assert (s.unacked_messages(7), s.unacked_messages(8)) == (0, 0)
    assert s.state.cursors["s"].mark_delete == (10, 2)
    s.apply(s.close(7))  # and it leaves like one
    assert 7 not in s.sub().consumers


def test_a_long_run_of_acks_attaches_each_unknown_consumer_once_in_order():
    """The vectorised path for runs of individual acks attaches too (first command first)."""
    s = _closed_after_subscribing("Shared", implicit=True)
    s.apply(*[s.ack(9 if e % 2 else 8, (10, e)) for e in range(4)] * 3)
    assert s.rejects == []
    assert [c.consumer_id for c in sorted(s.sub().consumers.values(), key=lambda c: c.order)] == [8, 9]
    assert s.state.cursors["s"].mark_delete == (10, 3)


def test_implicit_consumers_do_not_create_a_subscription():
    """Only a known cursor says where the subscription is: an unknown one is still refused."""
    s = Stream(EngineSettings(implicit_consumers=True))
    s.publish(10, 0)
    s.apply(s.ack(7, (10, 0), sub="never"))
    assert s.rejects == ["unknown_subscription"]


def test_an_implicit_consumer_is_not_attached_where_the_broker_would_refuse_it():
    """A second consumer on an Exclusive subscription: ConsumerBusy, so the command is refused."""
    s = Stream(EngineSettings(implicit_consumers=True))
    s.publish(10, 0)
    s.apply(s.subscribe(1, "Exclusive"))
    s.apply(s.ack(7, (10, 0), cumulative=True))
    assert s.rejects == ["unknown_consumer"]
    assert list(s.sub().consumers) == [1]


def test_an_implicit_failover_consumer_becomes_active():
    s = _closed_after_subscribing("Failover", implicit=True)
    s.apply(s.ack(7, (10, 1), cumulative=True))
    assert s.sub().active == 7
    assert s.state.cursors["s"].mark_delete == (10, 1)


def test_the_implicit_mark_survives_encoding():
    from engine.subscription import Subscription

    s = _closed_after_subscribing("Shared", implicit=True)
    s.apply(s.subscribe(1), s.dispatch(7, 10, 0))
    again = Subscription.decode(s.sub().encode())
    assert (again.consumers[7].implicit, again.consumers[1].implicit) == (True, False)


def _shared_subscription(
    ops: list[tuple[str, int, int]],
) -> tuple[Cursor, Subscription, SubscriptionSettings]:
    """Three Shared consumers after ``ops``: dispatches (an entry sent to another consumer moves
    its pending ack), nacks (scheduled replays) and redeliveries with ids (tracker counts)."""
    settings = SubscriptionSettings(max_unacked_messages_per_consumer=4)
    cursor = Cursor("Shared", (5, 1))
    sub = Subscription()
    for cid in (1, 2, 3):
        sub.subscribe(
            cursor, Consumer(cid, f"c{cid}", 0, 0, 0, max_redeliver_count=2), "Shared", cid, settings
        )
    _apply_ops(cursor, sub, settings, ops, start=1_000)
    return cursor, sub, settings


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["DISPATCH", "DISPATCH", "NACK", "REDELIVER"]),
        st.sampled_from([1, 2, 3]),
        st.integers(0, 17),
    ),
    max_size=60,
)


def _apply_ops(
    cursor: Cursor,
    sub: Subscription,
    settings: SubscriptionSettings,
    ops: list[tuple[str, int, int]],
    start: int = 5_000,
) -> None:
    """``ops`` on entries of ledgers 5-7, one ms apart from ``start``."""
    for now, (kind, cid, entry) in enumerate(ops, start=start):
        pos = (5 + entry // 6, entry % 6)
        if kind == "DISPATCH":
            sub.dispatch(cursor, cid, pos, 1 + entry % 3, 0, now, settings)
        elif kind == "NACK":
            sub.nack(cursor, cid, [pos], now)
        elif kind == "ACK":
            sub.ack(cursor, cid, pos, None, 1, {}, settings)
        else:
            sub.redeliver(cursor, cid, [pos], now, REDELIVER, settings)


@settings(max_examples=200, deadline=None)
@given(
    _OPS,
    st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=4),
    st.lists(
        st.tuples(
            st.sampled_from(["DISPATCH", "ACK", "NACK", "REDELIVER"]),
            st.sampled_from([1, 2, 3]),
            st.integers(0, 17),
        ),
        max_size=6,
    ),
)
def test_redeliver_all_is_redeliver_with_every_pending_id(ops, cids, after):
    """The bulk path of a redeliver-all (``_take_all_pending``, the replays held as columns in a
    ``BulkReplay`` until something reads them) leaves the state and the batch's changes that
    naming every pending id does: right after the redeliver-alls (several in a row, as columns),
    and after later events that read the replay set position by position."""
    cursor, bulk, settings = _shared_subscription(ops)
    _, one_by_one, _ = _shared_subscription(ops)
    for now, cid in enumerate(cids, start=9_000):
        ids = list(one_by_one.consumers[cid].pending)
        bulk.redeliver(cursor, cid, None, now, REDELIVER, settings)
        one_by_one.redeliver(cursor, cid, ids, now, REDELIVER, settings)
    # as columns, before anything materializes them
    assert bulk.changes.all_redeliveries() == dict(one_by_one.changes.redeliveries)
    assert bulk.changes.pending_pairs() == one_by_one.changes.pending_pairs()
    assert bulk.holder == one_by_one.holder
    assert bulk.holds_anything() == one_by_one.holds_anything()
    assert bulk.is_empty() == one_by_one.is_empty()
    _apply_ops(cursor, bulk, settings, after)
    _apply_ops(cursor, one_by_one, settings, after)
    assert bulk.encode() == one_by_one.encode()  # encode leaves any blocks as columns
    assert bulk.redeliveries == one_by_one.redeliveries  # reading them by position materializes
    assert bulk.holder == one_by_one.holder
    assert bulk.changes.all_redeliveries() == dict(one_by_one.changes.redeliveries)
    assert list(bulk.changes.redeliveries.items()) == list(one_by_one.changes.redeliveries.items())
    assert bulk.changes.pending_pairs() == one_by_one.changes.pending_pairs()
    assert bulk.changes.consumers == one_by_one.changes.consumers
    assert bulk.next_due() == one_by_one.next_due()


def test_redeliver_all_of_overlapping_pending_acks_takes_the_eager_path():
    """A state in which two consumers hold the same entry (no event sequence makes one; a
    hand-made or corrupt state could): ``holder`` names the other consumer, which keeps it there,
    and the replays are written one by one, as a redeliver naming every id does."""
    settings_ = SubscriptionSettings(max_unacked_messages_per_consumer=0)
    cursor = Cursor("Shared", (5, -1))
    subs = []
    for _ in range(2):
        sub = Subscription()
        for cid in (1, 2):
            sub.subscribe(cursor, Consumer(cid, f"c{cid}", 0, 0, 0), "Shared", cid, settings_)
        sub.dispatch(cursor, 1, (5, 0), 1, 0, 10, settings_)
        sub.dispatch(cursor, 2, (5, 1), 1, 0, 11, settings_)
        sub.consumers[2].pending[(5, 0)] = sub.consumers[1].pending[(5, 0)]
        subs.append(sub)
    bulk, one_by_one = subs
    bulk.redeliver(cursor, 2, None, 20, REDELIVER, settings_)
    one_by_one.redeliver(cursor, 2, list(one_by_one.consumers[2].pending), 20, REDELIVER, settings_)
    assert not bulk._bulk  # written one by one
    assert bulk.holder == one_by_one.holder == {(5, 0): 1}
    # (the unacked counts differ, as before: a redeliver-all zeroes it, ids subtract each entry)
    assert bulk.redeliveries == one_by_one.redeliveries and bulk.tracker == one_by_one.tracker
    assert bulk.changes.all_redeliveries() == one_by_one.changes.all_redeliveries()


def _encode_by_position(sub: Subscription) -> bytes:
    """``Subscription.encode`` as it was before it read ``BulkReplay`` columns: the
    redeliver-alls materialized into the dictionaries (reading ``tracker`` and
    ``redeliveries``), then a Python tuple per row. Run on a copy: materializing changes it."""
    sub = copy.deepcopy(sub)
    consumers = list(sub.consumers.values())
    head = {
        "active": sub.active,
        "switch_until": sub.switch_until,
        "next_order": sub.next_order,
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
        "reasons": [r.reason for r in sub.redeliveries.values()],
    }
    pending = [
        (
            c.consumer_id,
            p[0],
            p[1],
            a.batch_size,
            a.sticky_key_hash,
            a.dispatched_at,
            a.redelivery_count,
            a.ack_timeout_at,
        )
        for c in consumers
        for p, a in c.pending.items()
    ]
    tracker = [(p[0], p[1], n) for p, n in sub.tracker.items()]
    redeliveries = [
        (
            p[0],
            p[1],
            r.consumer_id,
            r.requested_at,
            r.due_at,
            r.redelivery_count,
            int(r.dead_letter),
            int(r.scheduled),
        )
        for p, r in sub.redeliveries.items()
    ]
    nacks = [(d, c, p[0], p[1]) for d, c, p in sub.nacks]
    blob = json.dumps(head, separators=(",", ":")).encode()
    parts = [frame(b"AKS", 1), struct.pack("<I", len(blob)), blob]
    for rows, width in ((pending, 8), (tracker, 3), (redeliveries, 8), (nacks, 4)):
        array = np.asarray(rows, dtype=np.int64).reshape(len(rows), width)
        parts.append(struct.pack("<I", len(rows)))
        parts.append(array.astype("<i8").tobytes())
    return b"".join(parts)


def _materialized(sub: Subscription) -> tuple[Any, ...]:
    """What materializing a copy of ``sub`` leaves: the dictionaries and the batch's changes."""
    sub = copy.deepcopy(sub)
    return (
        list(sub.tracker.items()),
        list(sub.redeliveries.items()),
        list(sub.changes.redeliveries.items()),
        sub.changes.bulk,
    )


def _restored(sub: Subscription) -> str:
    """What ``decode`` restores of (a materialized copy of) ``sub``, as a ``repr``: the entries
    of every dictionary in their order, with their types (``Position`` keys, bool flags); the
    ``holder`` index is rebuilt from the pending acks, consumer by consumer, so only its content."""
    sub = copy.deepcopy(sub)
    fields = (sub.consumers, sorted(sub.holder.items()), sub.tracker, sub.redeliveries, sub.nacks)
    return repr((*fields, sub.active, sub.switch_until, sub.next_order))


def _assert_encode_reads_the_columns(sub: Subscription) -> bytes:
    """``encode`` gives the bytes of materialize-then-encode, and leaves the state as it was:
    the same blocks as columns, which materialize afterwards as they would have before."""
    blocks, pending_blocks = list(sub._bulk), list(sub.changes.bulk)
    expected, materialized = _encode_by_position(sub), _materialized(sub)
    encoded = sub.encode()
    assert encoded == expected
    assert len(sub._bulk) == len(blocks) and all(a is b for a, b in zip(sub._bulk, blocks, strict=True))
    assert all(a is b for a, b in zip(sub.changes.bulk, pending_blocks, strict=True))
    assert len(sub.changes.bulk) == len(pending_blocks)
    assert _materialized(sub) == materialized
    decoded = Subscription.decode(encoded)
    assert _restored(decoded) == _restored(sub)
    assert decoded.encode() == encoded
    return encoded


_TIMED_OP = st.tuples(
    st.sampled_from(["DISPATCH", "DISPATCH", "ACK", "NACK", "REDELIVER", "REDELIVER_ALL", "TIMERS", "CLOSE"]),
    st.sampled_from([1, 2, 3]),
    st.integers(0, 8),  # few positions: a redeliver-all often takes back ones counted before
)
# rounds of a few ops, each ended by a consumer's redeliver-all (an empty round: two in a row)
_TIMED_OPS = st.lists(st.tuples(st.lists(_TIMED_OP, max_size=8), st.sampled_from([1, 2, 3])), max_size=8).map(
    lambda rounds: [op for ops, cid in rounds for op in (*ops, ("REDELIVER_ALL", cid, 0))]
)


@settings(max_examples=200, deadline=None)
@given(_TIMED_OPS)
def test_encode_of_redeliver_alls_as_columns_is_the_encode_of_the_materialized_state(ops):
    """``encode`` builds the tracker and replay tables (and the head's reasons) from the
    dictionaries and the ``BulkReplay`` columns without materializing them: after any sequence of
    dispatches, acks, nacks, redeliveries with ids and redeliver-alls (several blocks in a row,
    over positions counted before), fired nack and ack-timeout timers, and consumers closing and
    coming back, its bytes are those of materializing first, and the state is left unchanged."""
    settings_ = SubscriptionSettings(max_unacked_messages_per_consumer=3)
    cursor = Cursor("Shared", (5, 1))
    sub = Subscription()

    def consumer(cid: int, now: int) -> Consumer:
        # consumer 3's ack timeout fires with the timers, like everyone's 100 ms nack delay
        return Consumer(
            cid,
            f"c{cid}",
            0,
            0,
            now,
            ack_timeout_ms=150 if cid == 3 else 0,
            negative_ack_delay_ms=100,
            max_redeliver_count=2,
        )

    for cid in (1, 2, 3):
        sub.subscribe(cursor, consumer(cid, 0), "Shared", cid, settings_)
    now = 1_000
    for seq, (kind, cid, entry) in enumerate(ops, start=10):
        now += 1
        if kind == "CLOSE":
            if cid in sub.consumers:
                sub.close(cursor, cid, seq, now, settings_)
            else:
                sub.subscribe(cursor, consumer(cid, now), "Shared", seq, settings_)
        elif cid not in sub.consumers:
            continue
        elif kind == "TIMERS":
            now += 120
            sub.fire_timers(cursor, now, settings_)
        elif kind == "REDELIVER_ALL":
            sub.redeliver(cursor, cid, None, now, REDELIVER, settings_)
        else:
            _apply_ops(cursor, sub, settings_, [(kind, cid, entry)], start=now)
        _assert_encode_reads_the_columns(sub)
    if sub._bulk:
        sub.changes = Changes()  # a new batch: the blocks are no longer this batch's changes
        _assert_encode_reads_the_columns(sub)


@settings(max_examples=200, deadline=None)
@given(
    _OPS,
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(0, 17), st.integers(1, 4)), max_size=12),
            st.sampled_from([1, 2, 3]),
            st.sampled_from([REDELIVER, NACK]),
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
def test_encode_folds_blocks_over_rows_the_dictionaries_already_hold(ops, blocks, far):
    """Hand-made blocks (no event sequence makes them) whose positions are already in the replay
    set, the tracker or an earlier block, and entry ids beyond ``packed_keys``' range: ``encode``
    still gives the rows and the order ``_materialize``'s ``dict.update`` calls would, a position
    written again keeping its first place with its last value and reason."""
    _, sub, _ = _shared_subscription(ops)
    for picks, cid, reason, pending in blocks:
        counts = dict(sorted(((5 + e // 6, e % 6), n) for e, n in picks))  # each once
        if far:
            counts[(7, 2**40)] = 1
        block = BulkReplay(
            np.asarray([p[0] for p in counts], dtype=np.int64),
            np.asarray([p[1] for p in counts], dtype=np.int64),
            np.asarray(list(counts.values()), dtype=np.int64),
            cid,
            reason,
            7_000,
        )
        sub._bulk.append(block)
        if pending:
            sub.changes.bulk.append(block)
    _assert_encode_reads_the_columns(sub)
