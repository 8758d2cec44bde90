"""Producer dedup through the streaming ingest, on real Spark and Delta.

A stream of SEND, PUBLISH and SEND_FAILED events over two micro-batches (one file each), on a
persistent topic with deduplication on and a non-persistent topic with a small in-flight limit:
``producers`` and ``send_receipts`` must equal what the engine decides over the whole stream at
once, receipts answered by a later batch included; malformed sends are rejected with their
reason; a crash between the producer writes and a restart leaves the same tables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from engine import EngineSettings, EventBatch, PartitionState, position_text
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform.tables import read_table
from tests.jobs.warehouse import assert_same_tables, crash_at

TOPIC = "persistent://public/default/ingest-dedup"
NP_TOPIC = "non-persistent://public/default/ingest-dedup"
SETTINGS = EngineSettings(
    broker_deduplication_enabled=True, max_concurrent_non_persistent_message_per_connection=1
)

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def _stream() -> list[list[dict[str, Any]]]:
    """Two micro-batches of events (as written to two files)."""
    persistent: list[dict[str, Any]] = []

    def send(producer: str, sequence_id: int, **fields: Any) -> None:
        persistent.append({"type": "SEND", "producer_name": producer, "sequence_id": sequence_id, **fields})

    def publish(producer: str, sequence_id: int, entry: int, **fields: Any) -> None:
        persistent.append(
            {
                "type": "PUBLISH",
                "ledger_id": 20,
                "entry_id": entry,
                "producer_name": producer,
                "sequence_id": sequence_id,
                **fields,
            }
        )

    send("a", 0)
    publish("a", 0, 0)
    send("a", 1, highest_sequence_id=4, num_messages=4)  # answered in batch 2
    send("b", 0)  # fails in batch 2
    send("a", 0)  # Dup
    send("a", 2)  # Unknown: inside the pushed batch
    cut_1 = len(persistent)
    publish("a", 1, 1, highest_sequence_id=4)
    send("a", 3)  # Dup now
    send("c", 7, chunk_id=0, num_chunks_from_msg=2)
    send("c", 7, chunk_id=1, num_chunks_from_msg=2)
    publish("c", 7, 2)
    publish("c", 7, 3)
    persistent.append({"type": "SEND_FAILED"})
    send("b", 0)  # NotDup again: b had nothing persisted
    send("c", 7, chunk_id=1, num_chunks_from_msg=2)  # Dup
    batches = [persistent[:cut_1], persistent[cut_1:]]
    non_persistent = [
        [
            {
                "type": "SEND",
                "producer_name": "np",
                "sequence_id": k,
                "connection_id": 1,
                "completed_at": 10_000_000,
                "num_messages": 3,
            }
            for k in range(3)  # limit 1: two in flight, the third dropped
        ],
        [{"type": "SEND", "producer_name": "np", "sequence_id": 3, "connection_id": 2}],
    ]
    out: list[list[dict[str, Any]]] = [[], []]
    seq = {TOPIC: 0, NP_TOPIC: 0}
    for b in range(2):
        for topic, events in ((TOPIC, batches[b]), (NP_TOPIC, non_persistent[b])):
            for event in events:
                seq[topic] += 1
                out[b].append(
                    {
                        "event_id": f"{topic[:3]}-{seq[topic]}",
                        "seq": seq[topic],
                        "event_time": 1_000 * seq[topic],
                        "topic": topic,
                        "partition": -1,
                        **event,
                    }
                )
    # malformed sends: rejected with a reason, the rest of the batch applies
    out[1].append(
        {"event_id": "bad-1", "seq": 900, "event_time": 5, "topic": TOPIC, "type": "SEND", "sequence_id": 1}
    )
    out[1].append(
        {
            "event_id": "bad-2",
            "seq": 901,
            "event_time": 5,
            "topic": TOPIC,
            "type": "SEND",
            "producer_name": "a",
            "sequence_id": -3,
        }
    )
    return out


def _write(source: Path, batches: list[list[dict[str, Any]]]) -> None:
    """One file per micro-batch; the file source takes them oldest first (modification time)."""
    source.mkdir(parents=True, exist_ok=True)
    for i, batch in enumerate(batches):
        path = source / f"events-{i:03d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def _options(base: Path) -> IngestOptions:
    return IngestOptions(
        source=str(base / "source"), warehouse=base / "warehouse", max_files_per_trigger=1, settings=SETTINGS
    )


def _tables(spark, warehouse: Path) -> dict[str, list[tuple]]:
    receipts = read_table(spark, warehouse, "send_receipts").select(
        "event_id",
        "seq",
        "producer_name",
        "sequence_id",
        "highest_sequence_id",
        "dedup_status",
        "receipt",
        "receipt_ledger_id",
        "receipt_entry_id",
        "error",
        "dropped",
    )
    producers = read_table(spark, warehouse, "producers").select(
        "topic", "producer_name", "highest_sequence_pushed", "highest_sequence_persisted", "msg_drop_count"
    )
    return {
        "receipts": sorted(map(tuple, receipts.collect())),
        "producers": sorted(map(tuple, producers.collect())),
    }


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("dedup")
    _write(base / "source", _stream())
    query = start_ingest(spark, _options(base))
    query.awaitTermination()
    assert query.exception() is None
    return base, _tables(spark, base / "warehouse")


def _engine_expectation() -> dict[str, list[tuple]]:
    events = [e for batch in _stream() for e in batch if not e["event_id"].startswith("bad")]
    receipts, producers = [], []
    for topic in (TOPIC, NP_TOPIC):
        state = PartitionState(topic, -1)
        mine = [e for e in events if e["topic"] == topic]
        result = state.apply(EventBatch.from_records(mine), SETTINGS)
        ids = {e["seq"]: e["event_id"] for e in mine}
        for r in result.sends.receipts:
            position = r.position
            receipts.append(
                (
                    ids[r.seq],
                    r.seq,
                    r.producer_name,
                    r.sequence_id,
                    r.highest_sequence_id,
                    r.status,
                    None if position is None else position_text(position),
                    None if position is None else position[0],
                    None if position is None else position[1],
                    r.error,
                    r.dropped,
                )
            )
        for name, p in state.producers.by_name.items():
            producers.append((topic, name, p.pushed, p.persisted, p.msg_drop_count))
    return {"receipts": sorted(receipts), "producers": sorted(producers)}


def test_tables_equal_the_engine_over_the_whole_stream(clean):
    _, tables = clean
    expected = _engine_expectation()
    assert tables == expected
    by_id = {r[0]: r for r in tables["receipts"]}
    assert by_id["per-3"][5:7] == ("NotDup", "20:1")  # answered by a PUBLISH of the next batch
    assert by_id["per-4"][5:] == ("NotDup", None, None, None, "PersistenceError", False)  # SEND_FAILED
    assert by_id["per-5"][5:7] == ("Dup", "-1:-1")
    assert by_id["per-6"][5:] == ("Unknown", None, None, None, "PersistenceError", False)
    assert [by_id[f"non-{k}"][5:7] + by_id[f"non-{k}"][10:] for k in (1, 2, 3, 4)] == [
        ("NotDup", "0:0", False),
        ("NotDup", "0:0", False),
        ("NotDup", "-1:-1", True),
        ("NotDup", "0:0", False),
    ]
    assert ("non-persistent://public/default/ingest-dedup", "np", None, None, 3) in tables["producers"]


def test_malformed_sends_are_rejected_with_their_reason(spark, clean):
    base, _ = clean
    rows = read_table(spark, base / "warehouse", "rejected_events").where("event_id LIKE 'bad-%'").collect()
    reasons = {r["event_id"]: (r["reason"], r["detail"]) for r in rows}
    assert reasons["bad-1"] == ("missing_field", "SEND needs producer_name")
    assert reasons["bad-2"][0] == "invalid_value" and "sequence_id -3 < 0" in reasons["bad-2"][1]


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_crash_between_the_producer_writes_then_restart_equals_a_clean_run(spark, clean, tmp_path):
    _, expected = clean
    _write(tmp_path / "source", _stream())
    options = _options(tmp_path)
    query = start_ingest(spark, options, BatchWriter(options, on_phase=crash_at("1:write send_receipts")))
    with pytest.raises(StreamingQueryException, match="simulated crash"):
        query.awaitTermination()
    query = start_ingest(spark, options)
    query.awaitTermination()
    assert query.exception() is None
    assert_same_tables(_tables(spark, tmp_path / "warehouse"), expected)
