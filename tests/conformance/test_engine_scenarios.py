"""The shared conformance scenarios, applied straight to the engine (no Spark, milliseconds).

Compared here: the cursor fields of ``internal_stats``, the subscription fields of ``stats``
(``msgBacklog``, ``type``, ``unackedMessages``, ``activeConsumerName``, ``consumers``) and the
``pending_acks`` rows, computed from the engine's state. The full comparison, through the tables,
runs the same files through the ``ackstate`` command line (tests/conformance/test_cli_scenarios.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import EngineSettings, EventBatch, PartitionState, position_text

SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.json"))


def _checks_cursors(path: Path) -> bool:
    text = path.read_text()
    return '"internal_stats"' in text or '"stats"' in text or '"pending_acks"' in text


CURSOR_FILES = [p for p in FILES if _checks_cursors(p)]


def test_the_shared_scenarios_are_present():
    assert FILES, f"no scenario files under {SCENARIOS}: ../shared must sit beside the repository"


def _events(scenario: dict, after: int, partition: int) -> list[dict]:
    out = []
    for i, event in enumerate(scenario["events"][:after], 1):
        if event.get("invalid"):
            continue  # validation rejects these before the engine (tests/jobs/ingest/test_validate.py)
        record = {"seq": i, "event_time": 1_000_000 + 1000 * (i - 1), **event}
        if record.get("partition", scenario["partition"]) == partition:
            out.append(record)
    return out


@pytest.mark.parametrize("path", CURSOR_FILES, ids=[p.stem for p in CURSOR_FILES])
def test_scenario_cursors(path: Path):
    scenario = json.loads(path.read_text())
    settings = EngineSettings.from_config(scenario.get("config", {}))
    checked = 0
    for cp in scenario["checkpoints"]:
        partition = cp.get("partition", scenario["partition"])
        state = PartitionState(scenario["topic"], partition)
        state.apply(EventBatch.from_records(_events(scenario, cp["after"], partition)), settings)
        for sub, expected in cp.get("internal_stats", {}).get("cursors", {}).items():
            cursor = state.cursors[sub]
            actual = {
                "markDeletePosition": position_text(cursor.mark_delete),
                "individuallyDeletedMessages": cursor.individually_deleted_messages,
                "totalNonContiguousDeletedMessagesRange": cursor.non_contiguous_deleted_ranges,
            }
            assert {k: actual[k] for k in expected} == expected, f"after {cp['after']}, {sub}"
            checked += 1
        for sub, expected in cp.get("stats", {}).get("subscriptions", {}).items():
            actual = _subscription_stats(state, sub)
            for key, value in expected.items():
                if key == "consumers":
                    assert _pair_up(actual["consumers"], value), f"after {cp['after']}, {sub}: {actual}"
                else:
                    assert actual.get(key) == value, f"after {cp['after']}, {sub}.{key}: {actual}"
                checked += 1
        pending = cp.get("tables", {}).get("pending_acks")
        if pending is not None:
            rows = _pending_rows(state)
            expected_rows = pending["rows"] if isinstance(pending, dict) else pending
            if isinstance(pending, dict) and pending.get("exact"):
                assert len(rows) == len(expected_rows), f"after {cp['after']}: {rows}"
            assert _pair_up(rows, expected_rows), f"after {cp['after']}: {rows}"
            checked += 1
    assert checked


def _subscription_stats(state: PartitionState, name: str) -> dict:
    """The `stats` fields of a subscription, as the engine's state gives them."""
    cursor = state.cursors[name]
    sub = state.subscriptions.get(name)
    consumers = list(sub.consumers.values()) if sub else []
    out = {
        "msgBacklog": cursor.backlog(state.ledgers),
        "type": cursor.sub_type,
        "unackedMessages": sub.unacked_messages() if sub else 0,
        "consumers": [{"consumerName": c.name, "unackedMessages": c.unacked_messages} for c in consumers],
    }
    if sub is not None and sub.active_name() is not None and cursor.sub_type in ("Exclusive", "Failover"):
        out["activeConsumerName"] = sub.active_name()
    return out


def _pending_rows(state: PartitionState) -> list[dict]:
    return [
        {"consumer_id": c.consumer_id, "position": position_text(pos), "redelivery_count": p.redelivery_count}
        for sub in state.subscriptions.values()
        for c in sub.consumers.values()
        for pos, p in c.pending.items()
    ]


def _pair_up(actual: list[dict], expected: list[dict]) -> bool:
    """Every expected item is a subset of its own actual item (order ignored)."""
    if len(actual) != len(expected):
        return False
    left = list(actual)
    for want in expected:
        for k, have in enumerate(left):
            if all(have.get(key) == value for key, value in want.items()):
                del left[k]
                break
        else:
            return False
    return True


def _checks_producers(path: Path) -> bool:
    text = path.read_text()
    return '"send_receipts"' in text or '"producers"' in text


PRODUCER_FILES = [p for p in FILES if _checks_producers(p)]


def _rows(spec: list | dict) -> tuple[list[dict], bool]:
    return (spec, False) if isinstance(spec, list) else (spec["rows"], bool(spec.get("exact")))


@pytest.mark.parametrize("path", PRODUCER_FILES, ids=[p.stem for p in PRODUCER_FILES])
def test_scenario_producers(path: Path):
    """The ``send_receipts`` and ``producers`` rows a scenario expects, from the engine's
    receipts (by the SEND's seq, which is the event's position in the file) and producers."""
    scenario = json.loads(path.read_text())
    settings = EngineSettings.from_config(scenario.get("config", {}))
    checked = 0
    for cp in scenario["checkpoints"]:
        tables = cp.get("tables", {})
        if not {"send_receipts", "producers"} & set(tables):
            continue
        partition = cp.get("partition", scenario["partition"])
        state = PartitionState(scenario["topic"], partition)
        result = state.apply(EventBatch.from_records(_events(scenario, cp["after"], partition)), settings)
        receipts = {
            r.seq: {
                "producer_name": r.producer_name,
                "sequence_id": r.sequence_id,
                "highest_sequence_id": r.highest_sequence_id,
                "dedup_status": r.status,
                "receipt": None if r.position is None else position_text(r.position),
                "error": r.error,
            }
            for r in result.sends.receipts
        }
        producers = {
            name: {
                "producer_name": name,
                "highest_sequence_pushed": p.pushed,
                "highest_sequence_persisted": p.persisted,
            }
            for name, p in state.producers.by_name.items()
        }
        expected, exact = _rows(tables.get("send_receipts", []))
        for row in expected:
            actual = receipts[row["@event"]]
            assert {k: actual[k] for k in row if k != "@event"} == {
                k: v for k, v in row.items() if k != "@event"
            }
            checked += 1
        if exact:
            assert len(receipts) == len(expected), f"after {cp['after']}: receipts"
        expected, exact = _rows(tables.get("producers", []))
        for row in expected:
            actual = producers[row["producer_name"]]
            assert {k: actual[k] for k in row} == row, f"after {cp['after']}"
            checked += 1
        if exact:
            assert len(producers) == len(expected)
    assert checked
