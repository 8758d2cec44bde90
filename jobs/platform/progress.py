"""Progress of the streaming ingest: a ``StreamingQueryListener`` that logs each micro-batch.

Spark's progress event knows the batch id, input rows and rows/s; how many records were
rejected or stale (``stale_seq``: a replayed ``seq``) is known only inside the batch, so the
batch writer records those figures here (driver memory, keyed by batch id) and the listener
joins them when Spark reports.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

log = logging.getLogger("ackstate.ingest")


@dataclass(frozen=True)
class BatchFigures:
    """What one micro-batch did; the same figures go to the `ingest_batches` table."""

    batch_id: int
    input_rows: int
    applied_rows: int
    rejected_rows: int
    stale_rows: int
    duplicate_rows: int
    partitions_touched: int
    cursors_touched: int
    duration_ms: int

    @property
    def rows_per_second(self) -> float:
        return self.input_rows * 1000.0 / self.duration_ms if self.duration_ms else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rows_per_second": self.rows_per_second}


_FIGURES: dict[int, BatchFigures] = {}
_LOCK = threading.Lock()
_REPORTED = threading.Condition(_LOCK)
_TERMINATED: set[str] = set()  # ids of the queries whose end the listener has logged


def record(figures: BatchFigures) -> None:
    with _LOCK:
        _FIGURES[figures.batch_id] = figures
        for old in [b for b in _FIGURES if b < figures.batch_id - 100]:
            del _FIGURES[old]


def figures_for(batch_id: int) -> BatchFigures | None:
    with _LOCK:
        return _FIGURES.get(batch_id)


class IngestProgressListener(StreamingQueryListener):
    """Logs one line per micro-batch: batch id, rows in, rows/s, rejected, stale."""

    def onQueryStarted(self, event: Any) -> None:
        log.info("ingest query %s started (run %s)", event.name or event.id, event.runId)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        figures = figures_for(progress.batchId)
        if figures is None:
            if progress.numInputRows:
                log.info("batch %d: %d rows in", progress.batchId, progress.numInputRows)
            return
        log.info(
            "batch %d: %d rows in, %.0f rows/s, %d applied, %d rejected (%d stale, %d duplicate), "
            "%d partitions, %d cursors changed",
            figures.batch_id,
            figures.input_rows,
            figures.rows_per_second,
            figures.applied_rows,
            figures.rejected_rows,
            figures.stale_rows,
            figures.duplicate_rows,
            figures.partitions_touched,
            figures.cursors_touched,
        )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("ingest query %s failed: %s", event.id, event.exception)
        else:
            log.info("ingest query %s stopped", event.id)
        with _REPORTED:
            _TERMINATED.add(str(event.id))
            _REPORTED.notify_all()


def wait_until_reported(query_id: str, timeout: float = 30.0) -> bool:
    """Wait until the listener has logged the end of query ``query_id`` (false: not in time).

    Spark delivers listener events from a queue of its own, after the query has returned from
    ``awaitTermination``: a process that exits then (``ackstate ingest --trigger
    available-now``) would lose the last batches' progress lines, and Spark would log the
    callbacks it could no longer make as stack traces. Events reach a listener in order, so
    once the end is logged, every progress line of the query is too.
    """
    with _REPORTED:
        return _REPORTED.wait_for(lambda: query_id in _TERMINATED, timeout)
