"""Property test: with deduplication on, no sequence id is ever persisted twice.

A small world is simulated around the engine: producers send batches of consecutive sequence
ids, the managed ledger persists the accepted sends first in, first out (PUBLISH) or fails every
pending one (SEND_FAILED), and producers go back and resend. Only the engine decides what is
appended: a send reaches the ledger's queue only if the engine answered ``NotDup``. Events are
applied in random micro-batches, and the producers' state sometimes goes through its binary
encoding between them, as it does between the ingest job's batches.

* Producers that resend *arbitrary* prefixes (go back to any earlier sequence id, at any time):
  the persisted ranges of a producer never overlap.
* Producers that behave like Pulsar's client (after a failure or an ``Unknown``, resend every
  batch still without a success receipt, in order and as it was built, ``ProducerImpl.
  resendMessages``): besides, the lowest id of every ``Dup`` send was persisted, so a success
  receipt ``-1:-1`` never hides a lost message. (Re-batched resends can lose messages in Pulsar:
  a batch whose lowest id was persisted is a ``Dup`` whole.)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import EngineSettings, EventBatch, PartitionState, Producers
from engine.dedup import DUP, NOT_DUP

TOPIC = "persistent://public/default/property"
PRODUCERS = ("p1", "p2")


@dataclass
class Client:
    """One producer: the next id it sends, and its batches still without a success receipt."""

    cursor: int = 0
    pending: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class World:
    careful: bool
    state: PartitionState = field(default_factory=lambda: PartitionState(TOPIC, -1))
    seq: int = 0
    entry: int = 0
    buffer: list[dict[str, Any]] = field(default_factory=list)
    queue: deque[tuple[str, int, int]] = field(default_factory=deque)  # accepted, not yet persisted
    persisted: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: {p: [] for p in PRODUCERS})
    clients: dict[str, Client] = field(default_factory=lambda: {p: Client() for p in PRODUCERS})
    sends: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # seq -> (producer, lo, hi)
    answered: int = 0

    def emit(self, event: dict[str, Any]) -> None:
        self.seq += 1
        self.buffer.append({"seq": self.seq, "event_time": self.seq, **event})

    def send(self, producer: str, size: int) -> None:
        client = self.clients[producer]
        lo, hi = client.cursor, client.cursor + size - 1
        client.pending.append((lo, hi))
        client.cursor = hi + 1
        self._send(producer, lo, hi)

    def _send(self, producer: str, lo: int, hi: int) -> None:
        self.emit({"type": "SEND", "producer_name": producer, "sequence_id": lo, "highest_sequence_id": hi})
        self.sends[self.seq] = (producer, lo, hi)

    def resend_pending(self, producer: str) -> None:
        """ProducerImpl.resendMessages: every batch without a receipt, in order, as built."""
        self.flush(roundtrip=False)
        for lo, hi in self.clients[producer].pending:
            self._send(producer, lo, hi)

    def publish(self) -> None:
        self.flush(roundtrip=False)  # the head of the queue is known only after the engine answered
        if not self.queue:
            return
        producer, lo, hi = self.queue.popleft()
        self.persisted[producer].append((lo, hi))
        self.emit(
            {
                "type": "PUBLISH",
                "ledger_id": 10,
                "entry_id": self.entry,
                "producer_name": producer,
                "sequence_id": lo,
                "highest_sequence_id": hi,
            }
        )
        self.entry += 1

    def fail(self) -> None:
        self.flush(roundtrip=False)
        self.emit({"type": "SEND_FAILED"})
        self.flush(roundtrip=False)
        if self.careful:  # the producers are disconnected; they reconnect and resend
            for producer in self.clients:
                self.resend_pending(producer)

    def flush(self, roundtrip: bool) -> None:
        if not self.buffer:
            return
        if roundtrip:  # the state as the next micro-batch reads it back from topic_partitions
            self.state.producers = Producers.decode(self.state.producers.encode())
        result = self.state.apply(
            EventBatch.from_records(self.buffer), EngineSettings(broker_deduplication_enabled=True)
        )
        assert not result.rejects
        decided = {r.seq: r for r in result.sends.receipts}
        for event in self.buffer:
            if event["type"] == "SEND_FAILED":
                self.queue.clear()
            if event["type"] != "SEND":
                continue
            receipt = decided[event["seq"]]
            producer, lo, hi = self.sends[event["seq"]]
            assert receipt.status in (NOT_DUP, DUP) or receipt.error == "PersistenceError"
            if receipt.status == NOT_DUP:
                self.queue.append((producer, lo, hi))
            if receipt.status == DUP:
                assert receipt.position == (-1, -1)
                if self.careful:
                    assert any(a <= lo <= b for a, b in self.persisted[producer]), (producer, lo)
        for receipt in result.sends.receipts:
            if receipt.position is not None:  # a success: the client forgets that batch
                producer, lo, hi = self.sends[receipt.seq]
                pending = self.clients[producer].pending
                if (lo, hi) in pending:
                    pending.remove((lo, hi))
        self.buffer.clear()


@settings(max_examples=150, deadline=None)
@given(st.data(), st.booleans())
def test_no_sequence_id_is_persisted_twice(data: st.DataObject, careful: bool) -> None:
    world = World(careful)
    for _ in range(data.draw(st.integers(10, 80), label="steps")):
        action = data.draw(
            st.sampled_from(["send", "send", "send", "publish", "publish", "fail", "rewind", "flush"])
        )
        producer = data.draw(st.sampled_from(PRODUCERS))
        client = world.clients[producer]
        if action == "send":
            world.send(producer, data.draw(st.integers(1, 4), label="batch size"))
        elif action == "publish":
            world.publish()
        elif action == "fail":
            world.fail()
        elif action == "rewind":
            if careful:
                world.resend_pending(producer)
            else:
                client.cursor = data.draw(st.integers(0, client.cursor), label="resend from")
        else:
            world.flush(roundtrip=data.draw(st.booleans(), label="through the encoding"))
    world.flush(roundtrip=True)
    for producer, ranges in world.persisted.items():
        ids = [k for lo, hi in ranges for k in range(lo, hi + 1)]
        assert len(ids) == len(set(ids)), (producer, ranges)
        assert ranges == sorted(ranges)  # and in the order they were sent
