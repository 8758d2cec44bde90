"""The spec 7 cases the shared scenario format cannot carry, through the ``ackstate`` command line.

The shared scenarios (v29, v30, dedup-disabled-by-default) run through the runner in
tests/conformance/test_cli_scenarios.py. The cases here need the contract additions (chunks,
markers, connections and completion times) or a ``[deduplication]`` policy in ``--conf``:
``ackstate ingest`` and ``ackstate stats`` run through the CLI's ``main`` with the arguments a
user gives (in this process, so on the tests' Spark session: a JVM per command costs minutes
on a busy 2-core machine), and the tables are read back here.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from jobs.cli import main
from jobs.platform.tables import read_table

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

ON = "persistent://acme/on/orders"  # deduplication on by its namespace's policy
EXCLUDED = "persistent://acme/on/excluded"  # off by its own topic policy
DEFAULT = "persistent://acme/other/orders"  # the broker setting: off
NP = "non-persistent://acme/on/metrics"  # never deduplicated; in-flight limit 1 by --conf

CONF = """
max_concurrent_non_persistent_message_per_connection = 1
[deduplication]
"acme/on" = true
"persistent://acme/on/excluded" = false
"""

# (event id, topic, fields, expected (dedup_status, receipt, error, dropped) or None)
EVENTS: list[tuple[str, str, dict[str, Any], tuple | None]] = [
    ("on-1", ON, {"type": "SEND", "producer_name": "p", "sequence_id": 0}, ("NotDup", "10:0", None, False)),
    (
        "on-2",
        ON,
        {"type": "PUBLISH", "ledger_id": 10, "entry_id": 0, "producer_name": "p", "sequence_id": 0},
        None,
    ),
    ("on-3", ON, {"type": "SEND", "producer_name": "p", "sequence_id": 0}, ("Dup", "-1:-1", None, False)),
    # only the last chunk is checked and recorded; earlier chunks are never duplicates
    (
        "on-4",
        ON,
        {"type": "SEND", "producer_name": "p", "sequence_id": 1, "chunk_id": 0, "num_chunks_from_msg": 2},
        ("NotDup", None, None, False),
    ),
    (
        "on-5",
        ON,
        {"type": "SEND", "producer_name": "p", "sequence_id": 1, "chunk_id": 0, "num_chunks_from_msg": 2},
        ("NotDup", None, None, False),
    ),
    (
        "on-6",
        ON,
        {"type": "SEND", "producer_name": "p", "sequence_id": 1, "chunk_id": 1, "num_chunks_from_msg": 2},
        ("NotDup", None, None, False),
    ),
    (
        "on-7",
        ON,
        {"type": "SEND", "producer_name": "p", "sequence_id": 1, "chunk_id": 1, "num_chunks_from_msg": 2},
        ("Unknown", None, "PersistenceError", False),
    ),
    # a marker is never a duplicate and records nothing
    (
        "on-8",
        ON,
        {"type": "SEND", "producer_name": "p", "sequence_id": 0, "marker": True},
        ("NotDup", None, None, False),
    ),
    (
        "ex-1",
        EXCLUDED,
        {"type": "SEND", "producer_name": "p", "sequence_id": 0},
        ("NotDup", None, None, False),
    ),
    (
        "ex-2",
        EXCLUDED,
        {"type": "SEND", "producer_name": "p", "sequence_id": 0},
        ("NotDup", None, None, False),
    ),
    (
        "df-1",
        DEFAULT,
        {"type": "SEND", "producer_name": "p", "sequence_id": 0},
        ("NotDup", None, None, False),
    ),
    (
        "df-2",
        DEFAULT,
        {"type": "SEND", "producer_name": "p", "sequence_id": 0},
        ("NotDup", None, None, False),
    ),
    # limit 1, strictly greater: two sends of a connection in flight, the third dropped
    *[
        (
            f"np-{k}",
            NP,
            {
                "type": "SEND",
                "producer_name": "m",
                "sequence_id": 0,
                "connection_id": 7,
                "completed_at": 9_000_000,
                "num_messages": 4,
            },
            ("NotDup", "-1:-1" if k == 3 else "0:0", None, k == 3),
        )
        for k in (1, 2, 3)
    ],
    (
        "np-4",
        NP,
        {"type": "SEND", "producer_name": "m", "sequence_id": 1, "connection_id": 8},
        ("NotDup", "0:0", None, False),
    ),
]


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("dedup-cli")
    source, warehouse = base / "source", base / "warehouse"
    source.mkdir()
    seq: dict[str, int] = {}
    lines = []
    for event_id, topic, fields, _ in EVENTS:
        seq[topic] = seq.get(topic, 0) + 1
        record = {
            "event_id": event_id,
            "seq": seq[topic],
            "event_time": 1_000_000 + 1_000 * seq[topic],
            "topic": topic,
            **fields,
        }
        lines.append(json.dumps(record))
    lines.append(
        json.dumps({"event_id": "bad", "seq": 99, "event_time": 1, "topic": NP, "type": "SEND_FAILED"})
    )
    (source / "events.jsonl").write_text("\n".join(lines) + "\n")
    conf = base / "dedup.toml"
    conf.write_text(CONF)
    common = ["--warehouse", str(warehouse), "--conf", str(conf)]
    assert main(["ingest", "--source", str(source), *common]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["stats", *common]) == 0
    return warehouse, json.loads(out.getvalue())


def test_receipts_follow_spec_7(spark, run):
    warehouse, _ = run
    rows = read_table(spark, warehouse, "send_receipts").collect()
    actual = {r["event_id"]: (r["dedup_status"], r["receipt"], r["error"], r["dropped"]) for r in rows}
    expected = {event_id: receipt for event_id, _, _, receipt in EVENTS if receipt is not None}
    assert actual == expected


def test_producers_record_only_what_deduplication_records(spark, run):
    warehouse, _ = run
    rows = read_table(spark, warehouse, "producers").collect()
    actual = {
        (r["topic"], r["producer_name"]): (
            r["highest_sequence_pushed"],
            r["highest_sequence_persisted"],
            r["msg_drop_count"],
        )
        for r in rows
    }
    assert actual == {
        (ON, "p"): (1, 0, 0),  # the last chunk pushed 1; the marker recorded nothing
        (EXCLUDED, "p"): (None, None, 0),
        (DEFAULT, "p"): (None, None, 0),
        (NP, "m"): (None, None, 4),  # the messages of the dropped send
    }


def test_stats_lists_publishers_with_the_drop_count(run):
    _, stats = run
    assert stats[NP]["publishers"] == [{"producerName": "m", "msgDropCount": 4}]
    assert stats[ON]["publishers"] == [{"producerName": "p"}]


def test_send_failed_on_a_non_persistent_topic_is_rejected(spark, run):
    warehouse, _ = run
    rows = read_table(spark, warehouse, "rejected_events").where("event_id = 'bad'").collect()
    assert [(r["reason"], r["detail"]) for r in rows] == [
        ("invalid_value", "SEND_FAILED on a non-persistent topic: nothing is persisted there to fail")
    ]
