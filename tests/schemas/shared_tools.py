"""Access to ../shared (beside the repository): the scenario runner and the scenario files.

The runner's own validator is the reference for what a valid event looks like, so tests load
it from its file rather than copy its rules. A missing ../shared is a failure with a clear
message, never a silent skip.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
RUNNER = SHARED / "tools" / "run_scenarios.py"
SCENARIOS = SHARED / "scenarios"
_MODULE_NAME = "ackstate_shared_run_scenarios"


def load_runner() -> ModuleType:
    """The scenario runner module (``shared/tools/run_scenarios.py``), imported once."""
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    if not RUNNER.is_file():
        raise AssertionError(
            f"the scenario runner is missing: expected {RUNNER} (../shared must sit beside the repository)"
        )
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module  # dataclasses need the module registered while it loads
    spec.loader.exec_module(module)
    return module


def load_scenario(name: str) -> dict[str, Any]:
    """One scenario file of ``shared/scenarios`` by name (without ``.json``)."""
    path = SCENARIOS / f"{name}.json"
    if not path.is_file():
        raise AssertionError(f"scenario file missing: {path}")
    return json.loads(path.read_text(encoding="utf-8"))


def runner_errors(event: dict[str, Any]) -> list[str]:
    """What the runner's validator says about one complete event record (empty = valid).

    The runner validates scenario events, where topic and event_id are filled in by the runner
    and a partition is an override of a partitioned scenario; a complete record is adapted to
    that form first.
    """
    runner = load_runner()
    ev = {k: v for k, v in event.items() if k not in runner.RUNNER_ONLY}
    partitioned = isinstance(ev.get("partition"), int) and ev["partition"] >= 0
    if ev.get("partition") == -1:
        del ev["partition"]
    errors: list[str] = []
    runner._validate_event(ev, "event", partitioned, errors)
    return errors
