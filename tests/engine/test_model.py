"""Property test: the engine against a naive set-of-positions model of spec 2.3-2.7.

The model keeps every published entry in a list and the acked ones in a set; it knows nothing
of bitmaps, runs or ledgers arithmetic. Random publishes, individual acks (some beyond the last
entry), cumulative acks and batch-index acks are fed to both, one event at a time to the model
and in random micro-batches to ``PartitionState.apply`` (the vectorised path), and mark-delete,
ranges, batch state and backlog are compared at every batch boundary.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import EngineSettings, EventBatch, PartitionState, Position, position_text
from engine.ackset import mask_to_words, next_set_bit, words_to_mask


@dataclass
class Model:
    """Sequential reference: everything at or below ``md`` is acked; ``acked`` holds the rest."""

    enabled: bool
    published: list[Position] = field(default_factory=list)
    md: Position | None = None
    acked: set[Position] = field(default_factory=set)
    batch: dict[Position, tuple[int, int]] = field(default_factory=dict)  # pos -> (size, unacked)

    @property
    def lac(self) -> Position:
        return self.published[-1] if self.published else (-1, -1)

    def subscribe(self) -> None:
        self.md = (self.published[0][0], -1) if self.published else (-1, -1)

    def prev(self, pos: Position) -> Position:
        if pos[1] > 0:
            return (pos[0], pos[1] - 1)
        earlier = [p for p in self.published if p[0] < pos[0]]
        return earlier[-1] if earlier else (pos[0], -1)

    def _walk(self) -> None:
        assert self.md is not None
        for p in self.published:
            if p <= self.md:
                continue
            if p not in self.acked:
                break
            self.md = p
        self.acked = {p for p in self.acked if p > self.md}
        self.batch = {p: v for p, v in self.batch.items() if p > self.md}

    def ack(self, ids: list[tuple[Position, int | None, int]]) -> None:
        assert self.md is not None
        for pos, mask, size in ids:
            if pos > self.lac:
                break
            if pos <= self.md or pos in self.acked or mask is None:
                self.batch.pop(pos, None)
                if pos > self.md:
                    self.acked.add(pos)
            elif self.enabled:
                merged = mask if pos not in self.batch else self.batch[pos][1] & mask
                if merged == 0:
                    self.batch.pop(pos, None)
                    self.acked.add(pos)
                else:
                    self.batch[pos] = (size, merged)
        self._walk()

    def ack_cumulative(self, pos: Position, mask: int | None, size: int) -> None:
        assert self.md is not None
        new = pos
        if mask is not None:
            new = self.prev(pos)
            if self.enabled:
                cur = self.batch.get(pos)
                if cur is None or next_set_bit(mask) > next_set_bit(cur[1]):
                    self.batch[pos] = (size, mask)
                self.batch = {p: v for p, v in self.batch.items() if p >= new}
        if new > self.lac or new < self.md:
            # refused; batch state is only ever kept above mark-delete (engine invariant)
            self.batch = {p: v for p, v in self.batch.items() if p > self.md}
            return
        self.md = new
        self._walk()

    def backlog(self) -> int:
        assert self.md is not None
        return sum(1 for p in self.published if p > self.md and p not in self.acked)

    def ranges(self) -> str:
        runs: list[str] = []
        for p in sorted(self.acked):
            prev = (p[0], p[1] - 1)
            if runs and prev in self.acked:
                runs[-1] = runs[-1].rsplit("..", 1)[0] + f"..{position_text(p)}]"
            else:
                runs.append(f"({position_text(prev)}..{position_text(p)}]")
        return "[" + ",".join(runs) + "]"


BATCH_SIZE = 6  # every entry is a batch of 6 messages, so any entry can take a batch-index ack


@st.composite
def scenarios(draw):
    """A random event history of one partition and one Exclusive subscription."""
    events: list[dict] = []
    ledger, entry = 10, -1
    for _ in range(draw(st.integers(2, 6))):  # publish a few entries before subscribing
        entry += 1
        events.append({"type": "PUBLISH", "ledger_id": ledger, "entry_id": entry})
    events.append(
        {"type": "SUBSCRIBE", "subscription": "s", "sub_type": "Exclusive", "initial_position": "Earliest"}
    )
    positions = [(10, e) for e in range(entry + 1)]
    for _ in range(draw(st.integers(1, 40))):
        op = draw(st.sampled_from(["publish", "roll", "ack", "ack", "ack", "cumulative", "batch"]))
        if op in ("publish", "roll"):
            if op == "roll":
                ledger += draw(st.integers(1, 2))  # ledger ids may skip (never-used ledgers)
                entry = -1
            entry += 1
            positions.append((ledger, entry))
            events.append({"type": "PUBLISH", "ledger_id": ledger, "entry_id": entry})
            continue
        beyond = [(ledger, entry + 1), (ledger + 1, 0)]
        pick = st.sampled_from(positions + beyond)
        if op == "ack":
            ids = [
                {"ledger_id": p[0], "entry_id": p[1]} for p in draw(st.lists(pick, min_size=1, max_size=4))
            ]
            events.append({"type": "ACK", "subscription": "s", "ack_type": "Individual", "message_ids": ids})
        else:
            pos = draw(pick)
            mid = {"ledger_id": pos[0], "entry_id": pos[1]}
            if op == "batch" or draw(st.booleans()):
                mask = draw(st.integers(0, (1 << BATCH_SIZE) - 1))
                mid |= {"batch_size": BATCH_SIZE, "ack_set": mask_to_words(mask) or [0]}
            kind = "Cumulative" if op == "cumulative" else "Individual"
            events.append({"type": "ACK", "subscription": "s", "ack_type": kind, "message_ids": [mid]})
    for seq, event in enumerate(events, 1):
        event["seq"] = seq
        event["event_time"] = seq
    cuts = sorted(draw(st.sets(st.integers(1, len(events) - 1), max_size=6)))
    return events, cuts


def _drive_model(model: Model, event: dict) -> None:
    if event["type"] == "PUBLISH":
        model.published.append((event["ledger_id"], event["entry_id"]))
    elif event["type"] == "SUBSCRIBE":
        model.subscribe()
    else:
        ids = [
            (
                (m["ledger_id"], m["entry_id"]),
                words_to_mask(m["ack_set"]) if "ack_set" in m else None,
                m.get("batch_size", 1),
            )
            for m in event["message_ids"]
        ]
        if event["ack_type"] == "Cumulative":
            model.ack_cumulative(*ids[0])
        else:
            model.ack(ids)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.booleans())
def test_engine_matches_the_naive_model_at_every_batch_boundary(scenario, enabled):
    events, cuts = scenario
    model = Model(enabled=enabled)
    state = PartitionState("persistent://t/ns/x", -1)
    cfg = EngineSettings(acknowledgment_at_batch_index_level_enabled=enabled)
    bounds = [0, *cuts, len(events)]
    for lo, hi in itertools.pairwise(bounds):
        for event in events[lo:hi]:
            _drive_model(model, event)
        state.apply(EventBatch.from_records(events[lo:hi]), cfg)
        cursor = state.cursors.get("s")
        if model.md is None:
            assert cursor is None
            continue
        assert cursor is not None
        assert cursor.mark_delete == model.md
        assert str(cursor.acked) == model.ranges()
        assert {p: (b.batch_size, b.unacked) for p, b in cursor.batch_acks.items()} == model.batch
        assert cursor.backlog(state.ledgers) == model.backlog()


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_micro_batch_boundaries_do_not_change_the_result(scenario):
    """Applying the history in one batch or in many gives the same encoded state."""
    events, cuts = scenario
    cfg = EngineSettings(acknowledgment_at_batch_index_level_enabled=True)
    whole = PartitionState("t", -1)
    whole.apply(EventBatch.from_records(events), cfg)
    pieces = PartitionState("t", -1)
    bounds = [0, *cuts, len(events)]
    for lo, hi in itertools.pairwise(bounds):
        pieces.apply(EventBatch.from_records(events[lo:hi]), cfg)
    assert whole.cursors["s"].encode() == pieces.cursors["s"].encode()
    assert whole.ledgers == pieces.ledgers
