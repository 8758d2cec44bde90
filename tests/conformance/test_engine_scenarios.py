"""The shared conformance scenarios, applied straight to the engine (no Spark, milliseconds).

Only what the engine models is compared here: the cursor fields of ``internal_stats`` and
``msgBacklog``. The full comparison, with every table and stats field, runs the same files
through the ``ackstate`` command line (tests/conformance/test_cli_scenarios.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import EngineSettings, EventBatch, PartitionState

SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.json"))


def _checks_cursors(path: Path) -> bool:
    text = path.read_text()
    return '"internal_stats"' in text or '"msgBacklog"' in text


CURSOR_FILES = [p for p in FILES if _checks_cursors(p)]


def test_the_shared_scenarios_are_present():
    assert FILES, f"no scenario files under {SCENARIOS}: ../shared must sit beside the repository"


def _events(scenario: dict, after: int, partition: int) -> list[dict]:
    out = []
    for i, event in enumerate(scenario["events"][:after], 1):
        if event.get("invalid"):
            continue  # validation rejects these before the engine (tests/spark/test_validate.py)
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
                "markDeletePosition": str(cursor.mark_delete),
                "individuallyDeletedMessages": cursor.individually_deleted_messages,
                "totalNonContiguousDeletedMessagesRange": cursor.non_contiguous_deleted_ranges,
            }
            assert {k: actual[k] for k in expected} == expected, f"after {cp['after']}, {sub}"
            checked += 1
        for sub, expected in cp.get("stats", {}).get("subscriptions", {}).items():
            if "msgBacklog" in expected:
                backlog = state.cursors[sub].backlog(state.ledgers)
                assert backlog == expected["msgBacklog"], f"after {cp['after']}, {sub}"
                checked += 1
    assert checked
