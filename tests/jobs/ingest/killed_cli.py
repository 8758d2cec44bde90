"""``ackstate`` as a subprocess that ``kill -9``s itself after one phase of one batch.

Run as ``python killed_cli.py <ackstate arguments>`` with ``KILL_AT_ENV`` (``ACKSTATE_KILL_AT``)
naming ``<batch id>:<phase>``: every ``BatchWriter`` the command makes gets an ``on_phase`` that
exits the process abruptly there (``os._exit(137)``, no cleanup, like ``kill -9``). Without the
variable the command runs as ``ackstate`` does. The hook lives here, not in the job.
``run_killed`` starts such a process from a test.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jobs.cli import main
from jobs.ingest import query as ingest

KILL_AT_ENV = "ACKSTATE_KILL_AT"


def run_killed(argv: Sequence[str], kill_at: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``ackstate <argv>`` in a process of its own that kills itself after ``kill_at``
    (``<batch id>:<phase>``); its exit status, standard output and error."""
    env = {**os.environ, KILL_AT_ENV: kill_at}
    cmd = [sys.executable, str(Path(__file__)), *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _kill_at(point: str) -> Any:
    def on_phase(batch_id: int, phase: str) -> None:
        if f"{batch_id}:{phase}" == point:
            logging.getLogger("ackstate.tests").warning("killing the process after %s", point)
            os._exit(137)

    return on_phase


if __name__ == "__main__":
    point = os.environ.get(KILL_AT_ENV)
    if point:
        make = ingest.BatchWriter

        class KilledBatchWriter(make):  # type: ignore[misc, valid-type]
            def __init__(self, options: Any, **kwargs: Any) -> None:
                super().__init__(options, on_phase=_kill_at(point), **kwargs)

        ingest.BatchWriter = KilledBatchWriter  # type: ignore[misc]
    sys.exit(main(sys.argv[1:]))
