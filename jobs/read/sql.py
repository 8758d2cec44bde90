"""``ackstate sql``: Spark SQL over the warehouse, every table registered under its own name.

``ackstate sql "SELECT ... FROM cursors ..."`` runs one query; without a query, statements are
read from stdin (``;``-separated), or typed at an ``ackstate>`` prompt when stdin is a terminal.
Each table of ``schemas.tables.TABLES`` is a temporary view named like the table (``cursors``,
``ack_ranges``, ``rejected_events``, ...), read from its Delta path, optionally time-travelled
with ``--as-of`` (a version, or better a timestamp: versions are numbered per table). Only the
tables a statement names are loaded, so a query over one table starts as fast as ``stats``.

Output: ``--format table`` (aligned text, binary values shown as their size), ``json`` (one
JSON object per row, as Spark writes JSON: timestamps in ISO 8601 UTC, binary as base64) or
``csv`` (a header line, then RFC 4180 rows; binary as base64).
"""

from __future__ import annotations

import argparse
import csv
import io
import logging
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

from jobs.platform import locations
from jobs.platform.errors import SqlError
from jobs.platform.tables import table_path
from schemas.tables import TABLES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("ackstate.sql")

FORMATS = ("table", "json", "csv")
_PROMPT, _CONTINUE = "ackstate> ", "      -> "


class Warehouse:
    """The warehouse tables as temporary views of one Spark session, registered on demand."""

    def __init__(self, spark: SparkSession, warehouse: str, as_of: str | None = None) -> None:
        self.spark, self.warehouse, self.as_of = spark, locations.resolve(warehouse), as_of
        self.registered: set[str] = set()
        self._missing: set[str] = set()

    def register(self, names: Iterable[str]) -> list[str]:
        """Register these tables (those not registered yet) as views; return the ones registered."""
        from delta.tables import DeltaTable

        from jobs.read.stats import as_of_errors, read_as_of  # the time-travel reading `stats` uses

        done = []
        for name in names:
            if name in self.registered or name in self._missing:
                continue
            if not DeltaTable.isDeltaTable(self.spark, table_path(self.warehouse, name)):
                self._missing.add(name)
                continue
            with as_of_errors((name,), self.as_of):
                read_as_of(self.spark, self.warehouse, name, self.as_of).createOrReplaceTempView(name)
            self.registered.add(name)
            done.append(name)
        if not self.registered and self._missing >= set(TABLES):
            raise SqlError(
                f"warehouse {self.warehouse} has no ackstate tables: run `ackstate init` and "
                "`ackstate ingest` with this --warehouse first"
            )
        return done

    def run(self, statement: str) -> DataFrame:
        """Register what ``statement`` names (everything if it names no table), then run it."""
        from pyspark.errors import PySparkException

        named = tables_named(statement)
        self.register(named or TABLES)
        try:
            return self.spark.sql(statement)
        except PySparkException as exc:
            message = str(exc).strip()
            raise SqlError(message.splitlines()[0] if message else type(exc).__name__) from exc


def tables_named(statement: str) -> list[str]:
    """The warehouse tables a statement mentions as words (so ``cursors`` but not ``my_cursors``)."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _strip_literals(statement).lower()))
    return [name for name in TABLES if name in words]


def split_statements(text: str) -> list[str]:
    """Split a script on ``;`` outside quotes and comments; drop empty statements."""
    statements, current = [], []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is not None:
            current.append(ch)
            if ch == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
            current.append(ch)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif ch == ";":
            statements.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    statements.append("".join(current))
    return [s.strip() for s in statements if s.strip()]


def _strip_literals(statement: str) -> str:
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|--[^\n]*", " ", statement)


# ---- output ---------------------------------------------------------------------------------
def display_frame(df: DataFrame, fmt: str) -> DataFrame:
    """Every column as a string Spark formats (session time zone UTC), for table and csv output:
    binary as ``<N bytes>`` (table) or base64 (csv), nested values as JSON."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    columns = []
    for field in df.schema.fields:
        col = F.col(f"`{field.name}`")
        if isinstance(field.dataType, T.BinaryType):
            col = (
                F.concat(F.lit("<"), F.length(col).cast("string"), F.lit(" bytes>"))
                if fmt == "table"
                else F.regexp_replace(F.base64(col), r"[\r\n]", "")  # base64() wraps at 76 columns
            )
        elif isinstance(field.dataType, (T.ArrayType, T.MapType, T.StructType)):
            col = F.to_json(col)
        else:
            col = col.cast("string")
        columns.append(col.alias(field.name))
    return df.select(*columns)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[str | None]], more: bool = False) -> str:
    """Aligned columns with a header rule; NULL for nulls; numbers right-aligned."""
    cells = [[("NULL" if v is None else v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]
    numeric = [
        bool(rows) and all(r[i] is None or re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", r[i]) for r in rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str], header: bool = False) -> str:
        parts = [
            v.rjust(w) if numeric[i] and not header else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return " | ".join(parts).rstrip()

    out = [line(columns, header=True), "-+-".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    count = f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', more not shown' if more else ''})"
    out.append(count)
    return "\n".join(out)


def write_result(df: DataFrame, fmt: str, out: TextIO, limit: int = 1000) -> int:
    """Print a result in ``fmt``; return the number of rows written."""
    if fmt == "json":
        n = 0
        for line in df.toJSON().toLocalIterator():
            out.write(line + "\n")
            n += 1
        return n
    shown = display_frame(df, fmt)
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(df.columns)
        n = 0
        for row in shown.toLocalIterator():
            writer.writerow(["" if v is None else v for v in row])
            n += 1
        return n
    rows = [tuple(r) for r in shown.limit(limit + 1).collect()]
    more = len(rows) > limit
    rows = rows[:limit]
    out.write(format_table(df.columns, rows, more) + "\n")
    return len(rows)


# ---- command line ---------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    """``ackstate sql``."""
    from jobs.platform.session import get_spark

    # PySpark also logs every failed query's context as a JSON line; ackstate prints the error
    # itself, once
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    fmt = getattr(args, "format", None) or "table"
    limit = int(getattr(args, "limit", None) or 1000)
    spark = get_spark(args.config)
    warehouse = Warehouse(spark, args.warehouse, getattr(args, "as_of", None))
    query = getattr(args, "query", None)
    if query is not None:
        for statement in split_statements(query):
            write_result(warehouse.run(statement), fmt, sys.stdout, limit)
        return 0
    if sys.stdin.isatty():
        return _shell(warehouse, fmt, limit)
    statements = split_statements(sys.stdin.read())
    for i, statement in enumerate(statements):
        if i and fmt == "table":
            sys.stdout.write("\n")
        write_result(warehouse.run(statement), fmt, sys.stdout, limit)
    return 0


def _shell(warehouse: Warehouse, fmt: str, limit: int) -> int:
    """A small interactive shell: statements end with ``;``; ``quit`` or end of input leaves."""
    registered = warehouse.register(TABLES)
    print(f"ackstate sql on {warehouse.warehouse}: tables {', '.join(sorted(registered))}")
    print("end each statement with ';', leave with 'quit' or Ctrl-D")
    for statement in _read_statements():
        try:
            write_result(warehouse.run(statement), fmt, sys.stdout, limit)
        except SqlError as exc:
            print(f"error: {exc}", file=sys.stderr)
    return 0


def _read_statements() -> Iterator[str]:
    buffer = io.StringIO()
    while True:
        try:
            line = input(_CONTINUE if buffer.tell() else _PROMPT)
        except EOFError:
            print()
            return
        if not buffer.tell() and line.strip().lower().rstrip(";") in ("quit", "exit", "\\q"):
            return
        buffer.write(line + "\n")
        text = buffer.getvalue()
        if text.rstrip().endswith(";"):
            yield from split_statements(text)
            buffer = io.StringIO()


if __name__ == "__main__":  # spark-submit jobs/read/sql.py "SELECT ..." --warehouse ...
    from jobs.cli import main

    sys.exit(main(["sql", *sys.argv[1:]]))
