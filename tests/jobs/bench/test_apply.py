"""``ackstate bench --engine``'s workloads are what they claim to be (figures are not asserted)."""

from __future__ import annotations

from collections import Counter

from engine.events import EVENT_TYPES
from jobs.bench.apply import generated_mix
from jobs.bench.generate import generate_records


def test_the_generated_mix_is_the_generators_stream_split_by_partition() -> None:
    records = list(generate_records(3_000, seed=3))
    batches = generated_mix(3_000, seed=3)
    assert sum(len(batch) for _, _, batch in batches) == len(records)
    assert {(t, p) for t, p, _ in batches} == {(r["topic"], r.get("partition", -1)) for r in records}
    kinds = Counter(r["type"] for r in records)
    assert set(kinds) <= set(EVENT_TYPES)
    assert kinds["DISPATCH"] > kinds["PUBLISH"] > 0 and kinds["ACK"] > 0  # a realistic mix, not acks only
