"""Retrying a Delta commit that lost a race with a concurrent writer.

Delta commits optimistically: a transaction that read files another commit has since removed
or rewritten (a MERGE while OPTIMIZE compacted the same table, two MERGEs into one table) fails
with one of Delta's concurrent-modification errors instead of committing. ackstate's writers are
idempotent (the ingest's MERGEs carry ``txnAppId``/``txnVersion`` and a deterministic source;
compaction's operations are safe to repeat) and a commit that lost wrote nothing (an append's
neither), so such a failure is retried from the start of the operation, with exponential
back-off and jitter, a bounded number of times.

Only Delta's conflict errors are retried; anything else is a real failure and propagates.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("ackstate.retry")

T = TypeVar("T")

DEFAULT_ATTEMPTS = 8
_CONFLICT_PREFIXES = (
    "[DELTA_CONCURRENT",  # ConcurrentAppend, ConcurrentDeleteRead/Delete, ConcurrentTransaction, ...
    "[DELTA_METADATA_CHANGED",
)


def is_conflict(exc: BaseException) -> bool:
    """True for Delta's concurrent-modification family (``io.delta.exceptions.*``).

    Checked by type where ``delta.exceptions`` converted the JVM error, else by its error
    class: a conflict raised inside a ``foreachBatch`` function or through Spark Connect may
    arrive as a plain captured exception.
    """
    try:
        from delta import exceptions as delta_errors
    except ImportError:  # pragma: no cover - delta-spark is a dependency
        delta_errors = None
    if delta_errors is not None and isinstance(
        exc,
        (
            delta_errors.DeltaConcurrentModificationException,
            delta_errors.ConcurrentWriteException,
            delta_errors.MetadataChangedException,
            delta_errors.ConcurrentAppendException,
            delta_errors.ConcurrentDeleteReadException,
            delta_errors.ConcurrentDeleteDeleteException,
            delta_errors.ConcurrentTransactionException,
        ),
    ):
        return True
    text = str(exc).lstrip()
    return text.startswith(_CONFLICT_PREFIXES) or "io.delta.exceptions.Concurrent" in text


def retry_on_conflict(
    action: Callable[[], T],
    *,
    what: str,
    attempts: int = DEFAULT_ATTEMPTS,
    base_delay: float = 0.5,
    max_delay: float = 15.0,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Run ``action``; when it fails with a Delta conflict, wait and run it again.

    ``attempts`` counts every run (so ``attempts - 1`` retries). The wait doubles from
    ``base_delay`` up to ``max_delay``, with full jitter so that two writers that collided do
    not collide again in step. ``on_retry`` is told of every conflict before the wait.
    """
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            if on_retry is not None:
                on_retry(exc)
            delay = random.uniform(0, min(max_delay, base_delay * 2 ** (attempt - 1)))
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning(
                "%s: commit conflict (attempt %d of %d), retrying in %.1f s: %s",
                what,
                attempt,
                attempts,
                delay,
                first_line[:300],
            )
            time.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
