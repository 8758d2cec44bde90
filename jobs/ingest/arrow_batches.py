"""How the apply job cuts each group into the Arrow batches it sends to the Python worker.

Spark ends a batch at ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows or at
``maxBytesPerBatch`` bytes, whichever comes first. The byte limit is checked after every row
(``BatchedPythonArrowInput.writeSizedBatch``): it asks the Arrow writer for its size, and a
struct column answers by setting the value count of every child vector. On the apply's
``PACKED_EVENTS`` struct that check was 25-30 % of the JVM's samples in the apply stage of a
1M-event batch, and turning it off took a sixth off that stage (README, "Benchmarks").
Spark skips the check only when the byte limit is ``Int.MaxValue``.

So the apply runs with the byte limit off and a row limit small enough that no batch can pass
the byte limit the session had: the limit divided by an upper bound on the largest row either
side sends (``event_row_bytes``, ``state_row_bytes``). A typical batch keeps Spark's 10,000
rows; one with a 10 MB subscription state sends its state rows a few at a time, as Spark's
check would have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MAX_RECORDS: Final = "spark.sql.execution.arrow.maxRecordsPerBatch"
MAX_BYTES: Final = "spark.sql.execution.arrow.maxBytesPerBatch"
UNCHECKED_BYTES: Final = 2**31 - 1
"""Spark's ``Int.MaxValue``: the one byte limit that is not checked row by row."""

EVENT_BYTES_PER_OCTET: Final = 8
"""An Arrow event row holds at most this many bytes per octet of its JSON record: a parsed
value is never longer than its text, except a number, at most 8 bytes for a text of at least one
digit; a list element or a struct field in the text also carries its separator or its name."""
EVENT_ROW_FIXED_BYTES: Final = 2048
"""What an event row may hold beyond its text: the defaults of absent fields, offsets and
validity bits of some 30 fields (a few hundred bytes), with room to spare."""
STATE_COLUMN_FIXED_BYTES: Final = 16
"""A state column's cost beside its text or bytes: its value or offset, and its validity bit."""


def event_row_bytes(longest_record: int) -> int:
    """An upper bound on the Arrow bytes of a batch's event row, from the octets of its longest
    valid record (``jobs.ingest.counts.ClassifiedSummary.longest_record``)."""
    return EVENT_BYTES_PER_OCTET * longest_record + EVENT_ROW_FIXED_BYTES


def state_row_bytes(state: DataFrame) -> int:
    """An upper bound on the Arrow bytes of the largest of ``state``'s rows (``STATE_INPUT``), in
    one Spark job: its strings' and binaries' octets, and ``STATE_COLUMN_FIXED_BYTES`` a column.
    0 for no rows."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    sized = [
        F.coalesce(F.octet_length(F.col(f.name)), F.lit(0))
        for f in state.schema.fields
        if isinstance(f.dataType, T.StringType | T.BinaryType)
    ]
    row = sum(sized, F.lit(STATE_COLUMN_FIXED_BYTES * len(state.schema.fields)))
    longest = state.agg(F.max(row.cast("long")).alias("longest")).first()
    return 0 if longest is None or longest["longest"] is None else int(longest["longest"])


def batch_settings(longest_row: int, max_records: int, max_bytes: int) -> dict[str, str]:
    """The Arrow batch settings for rows of at most ``longest_row`` bytes, under the session's
    ``max_records`` (0 or less: no limit) and ``max_bytes``: the byte limit unchecked and the
    rows a batch may hold within ``max_bytes``, at least one. Nothing to change (``{}``) when
    the session checks no byte limit already."""
    if max_bytes == UNCHECKED_BYTES:
        return {}
    fit = max(1, max_bytes // max(1, longest_row))
    records = fit if max_records <= 0 else min(max_records, fit)
    return {MAX_BYTES: str(UNCHECKED_BYTES), MAX_RECORDS: str(records)}


def apply_settings(spark: SparkSession, longest_row: int) -> dict[str, str]:
    """``batch_settings`` under ``spark``'s own Arrow batch settings, as its ``SQLConf`` reads
    them (Spark's own parsing of a byte size such as ``64m``)."""
    conf = spark._jsparkSession.sessionState().conf()  # type: ignore[attr-defined]
    return batch_settings(longest_row, int(conf.arrowMaxRecordsPerBatch()), int(conf.arrowMaxBytesPerBatch()))
