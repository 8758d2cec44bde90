"""``ackstate`` as a subprocess that ``kill -9``s itself after one phase of one batch.

Run as ``python killed_cli.py <ackstate arguments>`` with ``KILL_AT_ENV`` (``ACKSTATE_KILL_AT``)
naming ``<batch id>:<phase>``: every ``BatchWriter`` the command makes gets an ``on_phase`` that
exits the process abruptly there (``os._exit(137)``, no cleanup, like ``kill -9``). Without the
variable the command runs as ``ackstate`` does. The hook lives here, not in the job.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from jobs.cli import main
from jobs.ingest import query as ingest

KILL_AT_ENV = "ACKSTATE_KILL_AT"


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
