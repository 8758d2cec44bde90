"""The rows a MERGE leaves, computed with Arrow in the driver: a batch's rewrite without a Spark
job over the table's files.

Why: a batch that runs in one partition (``[ingest] single_partition_rows``) rewrites each
table it changes from a few files and a few dozen source rows (``jobs.platform.rewrite``). Done
by Spark, each rewrite built the plan of ``rewrite.merged`` (about 70 py4j calls, Catalyst's
analysis and optimizer: 0.2 s), ran one job that read the files, joined and collected (0.2-0.25
s), and the seven rewrites of a batch ran four side by side on two cores (README, "Benchmarks").
Here the files are read with ``pyarrow.parquet``, the source rows collected once, and the join
and the clauses computed with Arrow kernels: the same rows, the same semantics as
``rewrite.merged`` (and Delta's MERGE), in milliseconds. A large batch whose changes to a table
are few enough (``rewrite.DRIVER_SOURCE_ROWS``) is merged here too.

Only what this module can compute exactly is taken: a match on key columns, and clause
conditions in the small SQL subset ``condition`` reads (column references of ``s`` and ``t``,
string, integer and boolean literals, comparisons, ``NOT``, ``AND``, ``OR``, parentheses).
Anything else (``Unsupported``, raised before a row is written) is left to Spark, which runs the condition as
written. SQL's three-valued logic is kept: a comparison with a null is null, and a clause whose
condition is null does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


class Clause(Protocol):
    """One MERGE clause as ``jobs.platform.rewrite.Clause`` holds it (named here by its shape,
    so that this module needs nothing of the writer's)."""

    kind: str
    condition: str | None
    columns: tuple[str, ...] | None


_DELETE, _KEEP, _INSERT, _FIRST_UPDATE = 0, 1, 2, 3
"""Action codes of a joined row; update clause ``i`` is ``_FIRST_UPDATE + i``."""

_TOKEN = re.compile(
    r"\s*(?:(?P<ref>[st]\.(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*))"
    r"|(?P<string>'[^'\\]*')"
    r"|(?P<number>-?\d+)(?![\w.])"
    r"|(?P<op><>|!=|>=|<=|=|<|>)"
    r"|(?P<paren>[()])"
    r"|(?P<word>[A-Za-z_]+))"
)
_COMPARISONS = {"=": "equal", "<>": "not_equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
                ">": "greater", ">=": "greater_equal"}  # fmt: skip


class Unsupported(ValueError):
    """A condition or a table this module does not compute: the write goes to Spark."""


Columns = Callable[[str, str], "pa.Array"]
"""A column of the joined rows by side (``s`` or ``t``) and name, null where that side has no row."""


def condition(sql: str) -> Callable[[Columns], pa.Array]:
    """The SQL condition ``sql`` as a function of the joined rows' columns giving a boolean
    array with SQL's nulls; raises ``Unsupported`` for anything outside the subset in the module
    docstring."""
    tokens = _tokens(sql)
    position = 0

    def peek() -> tuple[str, str] | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> tuple[str, str]:
        nonlocal position
        if position >= len(tokens):
            raise Unsupported(f"condition ends early: {sql!r}")
        position += 1
        return tokens[position - 1]

    def is_word(token: tuple[str, str] | None, word: str) -> bool:
        return token is not None and token[0] == "word" and token[1].upper() == word

    def joined(word: str, function: str, term: Callable[[], Callable[[Columns], pa.Array]]) -> Any:
        """``term`` (``word`` ``term``)*, the terms combined by Arrow's ``function``."""
        terms = [term()]
        while is_word(peek(), word):
            take()
            terms.append(term())
        return _fold(function, terms)

    def disjunction() -> Callable[[Columns], pa.Array]:
        return joined("OR", "or_kleene", conjunction)

    def conjunction() -> Callable[[Columns], pa.Array]:
        return joined("AND", "and_kleene", negation)

    def negation() -> Callable[[Columns], pa.Array]:
        if is_word(peek(), "NOT"):
            take()
            inner = negation()
            return lambda columns: _pc().invert(inner(columns))
        return comparison()

    def comparison() -> Callable[[Columns], pa.Array]:
        left = operand()
        token = peek()
        if token is None or token[0] != "op":
            if left[0] != "ref":
                raise Unsupported(f"a literal is not a condition: {sql!r}")
            return left[1]
        take()
        right = operand()
        return _compare(_COMPARISONS[token[1]], left, right, sql)

    def operand() -> tuple[str, Any]:
        kind, text = take()
        if kind == "paren" and text == "(":
            inner = disjunction()
            if take() != ("paren", ")"):
                raise Unsupported(f"unbalanced parentheses: {sql!r}")
            return "ref", inner
        if kind == "ref":
            side, name = text[0], text[2:].strip("`")
            return "ref", lambda columns: columns(side, name)
        if kind == "string":
            return "string", text[1:-1]
        if kind == "number":
            return "number", int(text)
        if kind == "word" and text.upper() in ("TRUE", "FALSE"):
            return "boolean", text.upper() == "TRUE"
        raise Unsupported(f"{text!r} in {sql!r}")

    parsed = disjunction()
    if position != len(tokens):
        raise Unsupported(f"unexpected {tokens[position][1]!r} in {sql!r}")
    return parsed


def _tokens(sql: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while at < len(sql.rstrip()):
        match = _TOKEN.match(sql, at)
        if match is None or match.end() == at:
            raise Unsupported(f"cannot read {sql[at:]!r}")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        at = match.end()
    return tokens


def _pc() -> Any:
    import pyarrow.compute as pc

    return pc


def _fold(function: str, terms: list[Callable[[Columns], pa.Array]]) -> Callable[[Columns], pa.Array]:
    if len(terms) == 1:
        return terms[0]

    def evaluate(columns: Columns) -> pa.Array:
        result = terms[0](columns)
        for term in terms[1:]:
            result = getattr(_pc(), function)(result, term(columns))
        return result

    return evaluate


def _compare(
    function: str, left: tuple[str, Any], right: tuple[str, Any], sql: str
) -> Callable[[Columns], pa.Array]:
    """A comparison of a column with a column or a literal; the literal's kind must be the
    column's (no implicit cast, where Spark's rules would decide)."""
    import pyarrow as pa

    if left[0] != "ref" and right[0] != "ref":
        raise Unsupported(f"a comparison of two literals: {sql!r}")
    kinds = {"string": pa.types.is_string, "number": pa.types.is_integer, "boolean": pa.types.is_boolean}

    def value(side: tuple[str, Any], columns: Columns, other: pa.Array | None) -> Any:
        if side[0] == "ref":
            return side[1](columns)
        assert other is not None
        if not kinds[side[0]](other.type):
            raise Unsupported(f"{side[1]!r} compared with a column of {other.type}: {sql!r}")
        return pa.scalar(side[1], other.type)

    def evaluate(columns: Columns) -> pa.Array:
        if left[0] == "ref":
            a = value(left, columns, None)
            b = value(right, columns, a)
        else:
            b = value(right, columns, None)
            a = value(left, columns, b)
        if left[0] == right[0] == "ref" and a.type != b.type:
            raise Unsupported(f"columns of {a.type} and {b.type} compared: {sql!r}")
        return getattr(_pc(), function)(a, b)

    return evaluate


def merged_rows(
    target: pa.Table,
    source: pa.Table,
    keys: Sequence[str],
    clauses: Sequence[Clause],
    schema: StructType,
    given: Sequence[str],
) -> pa.Table:
    """The rows a MERGE of ``source`` (``s``) into ``target`` (``t``, the table's rows in its
    Arrow types, ``table_arrow_schema``) matched on ``keys`` leaves, in the table's Arrow
    types: ``rewrite.merged``'s semantics, clause for clause. ``given``: the table columns
    ``source`` has (an insert sets the others null). Raises ``Unsupported`` for a condition
    outside the subset (module docstring); nothing has been written then."""
    import numpy as np
    import pyarrow as pa

    from jobs.platform.data_files import table_arrow_schema

    arrow = table_arrow_schema(schema)
    given_set = set(given)
    conditions = [None if c.condition is None else condition(c.condition) for c in clauses]
    # the keys are among the source's table columns: cast with them to the table's types
    source = _cast_columns(source, {name: arrow.field(name).type for name in given})
    left = target.select(list(keys)).append_column(
        "__t", pa.array(np.arange(target.num_rows, dtype=np.int64))
    )
    right = source.select(list(keys)).append_column(
        "__s", pa.array(np.arange(source.num_rows, dtype=np.int64))
    )
    joined = left.join(right, list(keys), join_type="full outer", coalesce_keys=True)
    t_index, s_index = joined.column("__t").combine_chunks(), joined.column("__s").combine_chunks()
    in_t, in_s = (
        t_index.is_valid().to_numpy(zero_copy_only=False),
        s_index.is_valid().to_numpy(zero_copy_only=False),
    )

    taken: dict[tuple[str, str], pa.Array] = {}  # a column several conditions read, taken once

    def columns(side: str, name: str) -> pa.Array:
        if (side, name) not in taken:
            table, index = (source, s_index) if side == "s" else (target, t_index)
            if name not in table.column_names:
                raise Unsupported(f"{side}.{name} is not a column here")
            taken[side, name] = table.column(name).combine_chunks().take(index)
        return taken[side, name]

    action = np.full(joined.num_rows, -1, dtype=np.int16)
    updates: list[tuple[int, set[str]]] = []
    for clause, evaluate in zip(clauses, conditions, strict=True):
        holds = np.ones(joined.num_rows, dtype=bool)
        if evaluate is not None:
            holds = _holds(evaluate, columns, clause.condition)
        if clause.kind == "delete":
            where, code = in_t & in_s & holds, _DELETE
        elif clause.kind == "update":
            code = _FIRST_UPDATE + len(updates)
            updates.append((code, given_set if clause.columns is None else set(clause.columns)))
            where = in_t & in_s & holds
        elif clause.kind == "insert":
            where, code = ~in_t & in_s & holds, _INSERT
        elif clause.kind == "delete_unmatched":
            where, code = in_t & ~in_s & holds, _DELETE
        else:
            raise ValueError(f"unknown MERGE clause {clause.kind!r}")
        action[(action == -1) & where] = code
    action[(action == -1) & in_t] = _KEEP
    kept = action > _DELETE  # the rest are deleted, or source rows no insert takes
    action = action[kept]
    t_kept = t_index.filter(pa.array(kept)).fill_null(0).to_numpy(zero_copy_only=False)
    s_kept = s_index.filter(pa.array(kept)).fill_null(0).to_numpy(zero_copy_only=False)

    out = []
    for field in arrow:
        from_source = action == _INSERT
        for code, updated in updates:
            if field.name in updated:
                from_source |= action == code
        before = target.column(field.name).combine_chunks()
        if field.name in given_set:  # the source's value, taken after the target's
            values = pa.concat_arrays([before, source.column(field.name).combine_chunks()])
            index = np.where(from_source, target.num_rows + s_kept, t_kept)
        else:  # no source value: null, one slot after the target's
            values = pa.concat_arrays([before, pa.nulls(1, field.type)])
            index = np.where(from_source, target.num_rows, t_kept)
        out.append(values.take(pa.array(index, pa.int64())))
    return pa.Table.from_arrays(out, schema=arrow)


def _holds(evaluate: Callable[[Columns], pa.Array], columns: Columns, sql: str | None) -> Any:
    """Where a condition holds (true, not false nor null), as a numpy array; a condition that
    is not boolean, or that Arrow cannot compute, is ``Unsupported``."""
    import pyarrow as pa

    try:
        result = evaluate(columns)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as failed:
        raise Unsupported(f"{sql!r}: {failed}") from failed
    if not pa.types.is_boolean(result.type):
        raise Unsupported(f"{sql!r} is not a boolean condition")
    return result.fill_null(False).to_numpy(zero_copy_only=False)


def _cast_columns(table: pa.Table, types: dict[str, pa.DataType]) -> pa.Table:
    """``table`` with each column named in ``types`` cast to that type (exact casts only: a
    value that does not fit raises, as Spark's ANSI cast does)."""
    for name, kind in types.items():
        i = table.schema.get_field_index(name)
        if i >= 0 and table.schema.field(i).type != kind:
            table = table.set_column(i, name, table.column(name).cast(kind))
    return table


def read_files(paths: Sequence[str], schema: StructType) -> pa.Table:
    """The rows of a table's Parquet ``paths`` in the table's Arrow types
    (``table_arrow_schema``): a column a file lacks (added to the table after it was written)
    reads null, as Spark reads it with the table's schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.platform.data_files import table_arrow_schema

    arrow = table_arrow_schema(schema)
    tables = []
    for path in paths:
        read = pq.read_table(path)
        present = set(read.column_names)
        columns = [
            read.column(f.name).cast(f.type) if f.name in present else pa.nulls(read.num_rows, f.type)
            for f in arrow
        ]
        tables.append(pa.Table.from_arrays(columns, schema=arrow))
    if not tables:
        return arrow.empty_table()
    return pa.concat_tables(tables)
