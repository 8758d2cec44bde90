"""Producer deduplication and the non-persistent send limit (spec 7), on the engine alone.

V29 and V30 are Pulsar's ``MessageDuplicationTest`` vectors (spec 9.2); the other tests pin the
edge cases spec 7 lists, each named after the behaviour. Events go through
``PartitionState.apply`` as the ingest job applies them, except where V29 calls
``isDuplicate`` directly.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine import EngineSettings, EventBatch, PartitionState, Producers
from engine.dedup import (
    DUP,
    NOT_DUP,
    PERSISTENCE_ERROR,
    UNKNOWN,
    Producer,
    Receipt,
    is_duplicate,
)
from engine.errors import CorruptState

TOPIC = "persistent://public/default/dedup"
NP_TOPIC = "non-persistent://public/default/dedup"
ON = EngineSettings(broker_deduplication_enabled=True)
OFF = EngineSettings()


class Partition:
    """One topic partition fed event by event (or in batches), with the receipts kept by seq."""

    def __init__(self, topic: str = TOPIC, settings: EngineSettings = ON) -> None:
        self.state = PartitionState(topic, -1)
        self.settings = settings
        self.seq = 0
        self.receipts: dict[int, Receipt] = {}
        self.rejects: list[Any] = []

    def apply(self, *events: dict[str, Any]) -> list[int]:
        """Apply events as one micro-batch; return their seqs."""
        records = []
        for event in events:
            self.seq += 1
            records.append({"seq": self.seq, "event_time": 1_000 * self.seq, **event})
        result = self.state.apply(EventBatch.from_records(records), self.settings)
        self.rejects.extend(result.rejects)
        for receipt in result.sends.receipts:
            if receipt.row >= 0:
                self.receipts[receipt.seq] = receipt
            else:  # the late answer to a SEND of an earlier batch: the ingest MERGE by seq
                earlier = self.receipts[receipt.seq]
                earlier.position, earlier.error = receipt.position, receipt.error
        return [r["seq"] for r in records]

    def send(self, producer: str, sequence_id: int, highest: int | None = None, **fields: Any) -> Receipt:
        (seq,) = self.apply(
            {
                "type": "SEND",
                "producer_name": producer,
                "sequence_id": sequence_id,
                **({"highest_sequence_id": highest} if highest is not None else {}),
                **fields,
            }
        )
        return self.receipts[seq]

    def publish(self, producer: str, sequence_id: int, entry: int, highest: int | None = None) -> None:
        event = {"type": "PUBLISH", "ledger_id": 10, "entry_id": entry}
        event |= {"producer_name": producer, "sequence_id": sequence_id}
        if highest is not None:
            event["highest_sequence_id"] = highest
        self.apply(event)

    def send_failed(self) -> None:
        self.apply({"type": "SEND_FAILED"})

    def pushed(self, producer: str) -> int | None:
        p = self.state.producers.by_name.get(producer)
        return None if p is None else p.pushed

    def persisted(self, producer: str) -> int | None:
        p = self.state.producers.by_name.get(producer)
        return None if p is None else p.persisted


# ---- Pulsar's vectors -------------------------------------------------------------------------
def test_v29_is_duplicate_called_directly():
    """MessageDuplicationTest.testIsDuplicate: isDuplicate(producer, seq[, highest])."""
    p1, p2 = Producer(), Producer()
    assert (is_duplicate(p1, 0, 0), p1.pushed) == (NOT_DUP, 0)
    assert (is_duplicate(p2, 1, 1), p2.pushed) == (NOT_DUP, 1)
    assert (is_duplicate(p1, 1, 1), p1.pushed) == (NOT_DUP, 1)
    assert (is_duplicate(p1, 5, 5), p1.pushed) == (NOT_DUP, 5)
    assert (is_duplicate(p1, 0, 0), p1.pushed, p1.persisted) == (UNKNOWN, 5, None)
    p1.persisted = 0
    assert (is_duplicate(p1, 0, 0), p1.pushed) == (DUP, 5)
    p1.pushed = p1.persisted = 0
    assert (is_duplicate(p1, 1, 5), p1.pushed) == (NOT_DUP, 5)  # the highest is stored
    assert (is_duplicate(p1, 4, 8), p1.pushed) == (UNKNOWN, 5)  # 4 <= 5, 4 > 0: judged whole


def test_v29_through_events():
    """V29 as events: 'set persisted' is a PUBLISH, 'set pushed = persisted' a SEND_FAILED."""
    t = Partition()
    assert t.send("p1", 0).status == NOT_DUP and t.pushed("p1") == 0
    assert t.send("p2", 1).status == NOT_DUP and t.pushed("p2") == 1
    assert t.send("p1", 1).status == NOT_DUP and t.pushed("p1") == 1
    assert t.send("p1", 5).status == NOT_DUP and t.pushed("p1") == 5
    unknown = t.send("p1", 0)
    assert (unknown.status, unknown.error, unknown.position) == (UNKNOWN, PERSISTENCE_ERROR, None)
    assert (t.pushed("p1"), t.persisted("p1")) == (5, None)
    t.publish("p1", 0, entry=0)
    dup = t.send("p1", 0)
    assert (dup.status, dup.position, dup.error) == (DUP, (-1, -1), None)
    assert (t.pushed("p1"), t.persisted("p1")) == (5, 0)
    t.send_failed()
    assert (t.pushed("p1"), t.persisted("p1")) == (0, 0)
    assert t.pushed("p2") is None  # resetHighestSequenceIdPushed: p2 had nothing persisted
    batch = t.send("p1", 1, highest=5, num_messages=5)
    assert (batch.status, batch.highest_sequence_id, t.pushed("p1")) == (NOT_DUP, 5, 5)
    partly_new = t.send("p1", 4, highest=8, num_messages=5)
    assert (partly_new.status, t.pushed("p1")) == (UNKNOWN, 5)


def test_v30_is_duplicate_with_failure():
    """MessageDuplicationTest.testIsDuplicateWithFailure, through publishMessage/addComplete."""
    t = Partition()
    for entry, (producer, seq) in enumerate([("p1", 0), ("p2", 1), ("p1", 1), ("p1", 5)]):
        assert t.send(producer, seq).status == NOT_DUP
        t.publish(producer, seq, entry)
    assert (t.pushed("p1"), t.persisted("p1"), t.pushed("p2"), t.persisted("p2")) == (5, 5, 1, 1)
    dup = t.send("p1", 0)
    assert (dup.status, dup.position) == (DUP, (-1, -1))
    in_flight = t.send("p1", 6)
    assert (in_flight.status, in_flight.position, t.pushed("p1"), t.persisted("p1")) == (NOT_DUP, None, 6, 5)
    again = t.send("p1", 6)
    assert (again.status, again.error) == (UNKNOWN, PERSISTENCE_ERROR)
    t.publish("p1", 6, entry=4)
    assert in_flight.position == (10, 4) and t.persisted("p1") == 6
    failing = t.send("p1", 7)
    t.send_failed()
    assert (failing.status, failing.position, failing.error) == (NOT_DUP, None, PERSISTENCE_ERROR)
    assert (t.pushed("p1"), t.persisted("p1"), t.pushed("p2"), t.persisted("p2")) == (6, 6, 1, 1)
    retry = t.send("p1", 6)
    assert (retry.status, retry.position) == (DUP, (-1, -1))
    last = t.send("p1", 8)
    t.publish("p1", 8, entry=5)
    assert (last.status, last.position, t.pushed("p1"), t.persisted("p1")) == (NOT_DUP, (10, 5), 8, 8)


# ---- spec 7 edge cases ------------------------------------------------------------------------
def test_unknown_stays_unknown_until_the_send_persists():
    """Edge case 3: without a failure, pushed is never reset, so a resend of an in-flight id is
    Unknown every time, until its PUBLISH makes it a Dup."""
    t = Partition()
    t.send("p", 0)
    assert [t.send("p", 0).status for _ in range(3)] == [UNKNOWN] * 3
    t.publish("p", 0, entry=0)
    assert t.send("p", 0).status == DUP


def test_a_batch_is_checked_by_its_lowest_and_recorded_by_its_highest_id():
    t = Partition()
    t.send("p", 10, highest=14)
    assert t.pushed("p") == 14
    assert t.send("p", 12).status == UNKNOWN  # inside the batch, not persisted yet
    assert t.send("p", 15).status == NOT_DUP
    t.publish("p", 10, entry=0, highest=14)
    assert t.persisted("p") == 14
    assert t.send("p", 13, highest=20).status == DUP  # lowest id persisted: a Dup, whole


def test_highest_below_lowest_is_ignored():
    """ServerCnx.handleSend takes the single-id path when highest < lowest: max() of both."""
    t = Partition()
    receipt = t.send("p", 7, highest=3)
    assert (receipt.status, receipt.highest_sequence_id, t.pushed("p")) == (NOT_DUP, 7, 7)


def test_only_the_last_chunk_is_deduplicated():
    t = Partition()
    chunks = [t.send("p", 3, chunk_id=k, num_chunks_from_msg=3).status for k in range(2)]
    assert chunks == [NOT_DUP, NOT_DUP] and t.pushed("p") is None
    for entry in range(2):
        t.publish("p", 3, entry)
    assert t.persisted("p") is None  # a chunk but the last records nothing (IS_LAST_CHUNK false)
    assert t.send("p", 3, chunk_id=2, num_chunks_from_msg=3).status == NOT_DUP
    assert t.pushed("p") == 3
    t.publish("p", 3, entry=2)
    assert t.persisted("p") == 3
    assert t.send("p", 3, chunk_id=0, num_chunks_from_msg=3).status == NOT_DUP  # never checked
    assert t.send("p", 3, chunk_id=2, num_chunks_from_msg=3).status == DUP


def test_markers_are_never_deduplicated_nor_recorded():
    t = Partition()
    t.send("p", 5)
    t.publish("p", 5, entry=0)
    marker = t.send("p", 2, marker=True)
    assert marker.status == NOT_DUP and (t.pushed("p"), t.persisted("p")) == (5, 5)
    t.publish("p", 2, entry=1)
    assert t.persisted("p") == 5  # recordMessagePersisted skips markers


def test_dedup_disabled_every_send_is_not_dup_and_nothing_is_recorded():
    t = Partition(settings=OFF)
    first = t.send("p", 0)
    t.publish("p", 0, entry=0)
    repeats = [t.send("p", 0) for _ in range(2)]
    assert [r.status for r in (first, *repeats)] == [NOT_DUP] * 3
    assert first.position == (10, 0)
    assert all(r.position is None and r.error is None for r in repeats)  # waiting for a PUBLISH
    assert (t.pushed("p"), t.persisted("p")) == (None, None)


def test_switching_deduplication_either_way_starts_from_empty_maps():
    t = Partition()
    t.send("p", 4)
    t.publish("p", 4, entry=0)
    t.settings = OFF
    t.apply({"type": "PUBLISH", "ledger_id": 10, "entry_id": 1, "producer_name": "q", "sequence_id": 0})
    assert (t.pushed("p"), t.persisted("p")) == (None, None)
    t.settings = ON
    assert t.send("p", 4).status == NOT_DUP  # a fresh pulsar.dedup cursor knows nothing


def test_a_receipt_is_filled_when_its_publish_comes_in_a_later_batch():
    t = Partition()
    send = t.send("p", 0)
    assert send.position is None
    t.apply({"type": "PUBLISH", "ledger_id": 12, "entry_id": 7, "producer_name": "p", "sequence_id": 0})
    assert send.position == (12, 7)
    assert not t.state.producers.has_pending


def test_a_publish_fills_the_oldest_waiting_send_of_that_sequence_id():
    t = Partition(settings=OFF)
    a, b = t.send("p", 0), t.send("p", 0)
    t.publish("p", 0, entry=0)
    assert (a.position, b.position) == ((10, 0), None)
    t.publish("p", 0, entry=1)
    assert b.position == (10, 1)


def test_a_refused_publish_fills_no_receipt():
    t = Partition()
    t.publish("p", 0, entry=5)
    send = t.send("p", 1)
    t.publish("p", 1, entry=5)  # not after the last entry: publish_out_of_order
    assert send.position is None and t.persisted("p") == 0
    assert [r.reason for r in t.rejects] == ["publish_out_of_order"]


def test_a_publish_without_a_send_keeps_pushed_at_least_persisted():
    """A stream that starts after the SEND: the PUBLISH records persisted, and pushed with it."""
    t = Partition()
    t.publish("p", 3, entry=0, highest=6)
    assert (t.pushed("p"), t.persisted("p")) == (6, 6)
    assert t.send("p", 5).status == DUP


def test_send_failed_fails_every_waiting_send_of_every_producer():
    t = Partition()
    a, b = t.send("p", 0), t.send("q", 0)
    t.send_failed()
    assert [(r.status, r.error) for r in (a, b)] == [(NOT_DUP, PERSISTENCE_ERROR)] * 2
    assert t.send("p", 0).status == NOT_DUP  # nothing persisted: the retry is new


def test_per_topic_and_namespace_policies_override_the_broker_setting():
    def enabled(policies: dict[str, bool], broker: bool, topic: str) -> bool:
        return EngineSettings(
            broker_deduplication_enabled=broker, deduplication=policies
        ).deduplication_enabled(topic)

    policies = {"public/default": True, "persistent://public/default/off": False}
    assert enabled(policies, False, "persistent://public/default/on")
    assert not enabled(policies, False, "persistent://public/default/off")
    assert not enabled(policies, True, "persistent://public/default/off")
    assert enabled({}, True, "persistent://public/other/x")
    assert not enabled({"public/default": True}, True, "non-persistent://public/default/x")
    settings = EngineSettings.from_config({"deduplication": {"persistent://public/default/dedup": True}})
    t = Partition(settings=settings)
    t.send("p", 0)
    assert t.send("p", 0).status == UNKNOWN


# ---- non-persistent topics --------------------------------------------------------------------
def _np(limit: int) -> Partition:
    return Partition(NP_TOPIC, EngineSettings(max_concurrent_non_persistent_message_per_connection=limit))


def test_non_persistent_sends_beyond_the_limit_are_dropped_with_a_success_receipt():
    """ServerCnx.handleSend: pending > limit drops; strictly greater, so limit + 1 are in flight."""
    t = _np(limit=2)
    receipts = [t.send("p", k, connection_id=1, completed_at=1_000_000, num_messages=2) for k in range(5)]
    assert [r.dropped for r in receipts] == [False, False, False, True, True]
    assert [r.position for r in receipts] == [(0, 0)] * 3 + [(-1, -1)] * 2
    assert {r.status for r in receipts} == {NOT_DUP}
    assert t.state.producers.by_name["p"].msg_drop_count == 4  # messages, not sends


def test_completed_sends_leave_the_window_on_the_event_time_clock():
    t = _np(limit=0)
    first = t.send("p", 0, connection_id=1, completed_at=2_500)  # seq 1 at t=1000
    second = t.send("p", 1, connection_id=1, completed_at=10_000)  # t=2000: 1 in flight > 0
    third = t.send("p", 2, connection_id=1)  # t=3000: the first completed at 2500
    assert (first.dropped, second.dropped, third.dropped) == (False, True, False)


def test_the_limit_is_per_connection():
    t = _np(limit=0)
    a = t.send("p", 0, connection_id=1, completed_at=9_000)
    b = t.send("q", 0, connection_id=2, completed_at=9_000)
    c = t.send("p", 1, connection_id=1, completed_at=9_000)
    assert (a.dropped, b.dropped, c.dropped) == (False, False, True)


def test_sends_without_completion_time_never_fill_the_window():
    t = _np(limit=0)
    assert not any(t.send("p", k).dropped for k in range(5))


def test_non_persistent_topics_are_never_deduplicated():
    t = Partition(NP_TOPIC, ON)
    assert [t.send("p", 0).status for _ in range(3)] == [NOT_DUP] * 3
    assert t.pushed("p") is None


def test_send_failed_on_a_non_persistent_topic_is_refused():
    t = Partition(NP_TOPIC)
    t.send_failed()
    assert [r.reason for r in t.rejects] == ["invalid_value"]


# ---- state --------------------------------------------------------------------------------------
def test_micro_batch_boundaries_change_no_decision():
    events = [
        {"type": "SEND", "producer_name": "p", "sequence_id": 0},
        {"type": "SEND", "producer_name": "p", "sequence_id": 0},
        {"type": "PUBLISH", "ledger_id": 10, "entry_id": 0, "producer_name": "p", "sequence_id": 0},
        {"type": "SEND", "producer_name": "p", "sequence_id": 0},
        {"type": "SEND", "producer_name": "p", "sequence_id": 1},
        {"type": "SEND_FAILED"},
        {"type": "SEND", "producer_name": "p", "sequence_id": 1},
    ]
    whole = Partition()
    whole.apply(*events)
    split = Partition()
    for event in events:
        split.state = PartitionState(
            TOPIC,
            -1,
            split.state.ledgers,
            last_seq=split.state.last_seq,
            last_event_time=split.state.last_event_time,
            producers=Producers.decode(split.state.producers.encode()),
        )
        split.apply(event)
    assert _answers(whole) == _answers(split)
    assert whole.state.producers == split.state.producers


def _answers(t: Partition) -> dict[int, tuple]:
    return {seq: (r.status, r.position, r.error, r.dropped) for seq, r in t.receipts.items()}


def test_encoding_round_trips_and_refuses_damage():
    t = _np(limit=5)
    t.send("p", 0, connection_id=3, completed_at=50_000)
    t.state.producers.by_name["q"] = Producer(4, 2, 7, 9)
    t.state.producers.dedup_enabled = True
    data = t.state.producers.encode()
    assert data is not None and Producers.decode(data) == t.state.producers
    assert Producers().encode() is None and Producers.decode(None) == Producers()
    with pytest.raises(CorruptState):
        Producers.decode(data[:-3])
    with pytest.raises(CorruptState):
        Producers.decode(b"XXX" + data[3:])
    with pytest.raises(CorruptState):
        Producers.decode(data + b"\0")
