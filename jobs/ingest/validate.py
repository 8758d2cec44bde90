"""Split raw input records into valid events and rejected records (step 1 of a micro-batch).

Bad input must never stop the stream and never be lost (CONTRACT.md section 1), so every
input row ends up in exactly one of the two outputs: `valid` (the v1 event columns, contract
defaults applied) or `rejected` (the `rejected_events` columns the caller does not add itself,
with one reason code and a human-readable detail).

Everything is a Spark SQL column expression (no Python UDF): this runs on million-row
micro-batches. The rules themselves are data in `schemas.validation`; this module only turns
them into expressions. Each row gets exactly one reason, the first failing rule in this order:

1. ``malformed_json``: null or blank line, not JSON, not an object, a field whose JSON type
   the v1 schema cannot read (``"seq": "12"``, ``"partition": 3000000000``, ``"seq": true``),
   or no v1 field at all (``{}``).
2. ``missing_field``: one of event_id, seq, event_time, type, topic is absent or null.
3. ``unknown_type``: type is not a v1 event type (case-sensitive).
4. ``missing_field``: a field required for this type is absent or null, or a message id lacks
   ledger_id/entry_id (or is null).
5. ``invalid_value``: enum not allowed, bad topic name (or one with ``-partition-N``),
   partition < -1, negative seq/event_time/sequence ids, batch_size/num_messages < 1, negative
   priority or delays, a message id batch_size < 1, a null ack_set word, an ACK/NACK without
   message ids, a broken relation between producer fields (``FIELD_RELATIONS``).
6. ``negative_position``: ledger_id/entry_id < 0 in the event or in any message id (a
   RESET_CURSOR, MARK_DELETE or CREATE_SUBSCRIPTION may name entry -1, a mark-delete before its
   ledger's first entry).
7. ``batch_index_out_of_range``: a message id's batch_index is not -1 and not in
   ``[0, batch_size)`` (no batch_size: out of range).
8. ``ack_set_too_long``: an ack_set with more words than ``ceil(batch_size / 64)``. An ack_set
   without a batch_size is valid: clients send it so (the broker takes the size from the pending
   ack, and so does the engine).
9. ``duplicate_event_id``: among the rows that passed 1-8, every row of an event_id but the one
   with the lowest seq (ties: the first in input order, by `monotonically_increasing_id`).

How Spark 4.1 ``from_json`` (PERMISSIVE) reads bad input, and what this module does about it:
an unparseable line, a JSON array, scalar or ``null`` gives a struct whose fields are all null
(not a null struct; only an empty string gives null); a well-formed object with a value of the
wrong JSON type (``"seq": "12"``, ``true`` for a number, a number beyond the int range, an
object where an array is expected) silently gives that one field null and keeps the others.
Both would otherwise surface as a misleading ``missing_field``, so the schema is parsed with a
corrupt-record column, which Spark fills in exactly those cases, and any such row is
``malformed_json``; the detail then names the offending fields (found by a second, cheap parse
into ``map<string,string>``, only for those rows).

Known leniency: Spark's JSON reader turns a JSON number or boolean into a string when the
schema asks for a string (``"event_id": 5`` reads as ``"5"``), and ignores text after the
first JSON value of a line; such records are not rejected. Unknown fields are ignored (the
contract only ever adds fields).

Both outputs derive from one plan. A caller that materialises both (the ingest job does)
computes the parse and the rules more than once unless it materialises them:
``classified = classify(raw).localCheckpoint(eager=True)``, ``dups = duplicate_keys(classified)``
(small; checkpoint it), then ``split(mark_duplicates(classified, dups))``. A caller that counts
the rows of each ``event_id_hash`` first (``jobs.ingest.counts.classified_summary`` does, in the
job that names the batch's topic partitions) may skip the duplicates when no hash is carried
twice: two rows of one event_id share its hash, so ``classified`` is then already marked. Rows
in one partition are marked in classify's own job instead:
``mark_duplicates_in_partition(classify(raw.coalesce(1)))``.
A caller that knows it has no rejected row (the ingest job counts the reasons first) takes
`valid_records` alone, and never plans the details.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.platform.columns import built_once, select_named
from schemas import validation as V
from schemas.events import (
    EVENT_DEFAULTS,
    EVENT_FIELD_NAMES,
    EVENT_SCHEMA,
    HIGHEST_SEQUENCE_ID_DEFAULTS_TO,
    MESSAGE_ID_DEFAULTS,
    MESSAGE_ID_FIELD_NAMES,
    MESSAGE_ID_SCHEMA,
)
from schemas.tables import REJECTED_EVENT_COLUMNS

REASON_COLUMN = "reason"
DETAIL_COLUMN = "detail"
RAW_COLUMN = "raw"
# Internal columns; the leading underscore keeps them apart from any event field.
_PARSED = "_parsed"
_CORRUPT = "_corrupt_record"
_ORDER = "_input_order"
INPUT_ORDER_COLUMN = _ORDER
"""Position of a record in the batch's input (``split(..., keep_order=True)`` keeps it): the
tie-break between records of one partition that carry the same ``seq``."""
_RULE = "_rule"
_KEPT_SEQ = "_kept_seq"
"""The seq of the record kept, on a row rejected as its duplicate (for the detail)."""
_DUPLICATE_RULE = 8
"""``_RULE`` of a row rejected as a duplicate: after the seven rules of `_rules`."""

_PARSE_SCHEMA = T.StructType([*EVENT_SCHEMA.fields, T.StructField(_CORRUPT, T.StringType())])
_PARSE_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
_FIELD_TYPES: dict[str, T.DataType] = {f.name: f.dataType for f in EVENT_SCHEMA.fields}


# --------------------------------------------------------------------------- public surface


def parse_and_validate(raw: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Split `raw` (a string column ``value``, one JSON Lines record per row) in two.

    Returns ``(valid, rejected)``: `valid` has exactly the `EVENT_SCHEMA` columns with the
    contract defaults applied; `rejected` has `schemas.tables.REJECTED_EVENT_COLUMNS`
    (event_id, topic, partition, seq, type, subscription, reason, detail, raw), the caller
    adds query_id, batch_id and rejected_at. For a Delta-table source, build ``value`` with
    ``to_json(struct(*))``.
    """
    return split(mark_duplicates(classify(raw)))


def classify(raw: DataFrame) -> DataFrame:
    """Parse `raw.value` and give every row its reason (null = valid).

    The result has the event columns (defaults applied to rows that parsed), ``reason``,
    ``raw`` and internal columns (the failing rule, the input order); feed it to
    `mark_duplicates` and `split`. No shuffle happens here. The detail of a rejection is not
    computed here but by `rejected_records`, for the rejected rows only: its expressions are
    about half of the rules', and a batch with no rejected record need not plan them at all
    (0.2 s of a 1,000-record batch).
    """
    stages = classify_stages()
    parsed = raw.select(*stages.parse)
    return parsed.select(*stages.fields).select(*stages.ruled).select(*stages.result)


@dataclass(frozen=True)
class _Stages:
    """The four projections of `classify`, and the expressions of `rejected_records`."""

    parse: list[Column]
    fields: list[Column]
    ruled: list[Column]
    result: list[Column]
    reparse: Column
    """``raw`` parsed again, as `parse` did (a rejected row's detail may need the parser's view)."""
    detail: Column
    """The detail of a rejected row, by its rule."""


def classify_stages() -> _Stages:
    """`classify`'s column expressions, built once per JVM and reused by every micro-batch
    (``jobs.platform.columns``): building them is thousands of py4j calls, about a second."""
    return built_once("validate.classify", _build_stages)


def _build_stages() -> _Stages:
    parse = [
        F.col("value").alias(RAW_COLUMN),
        F.from_json(F.col("value"), _PARSE_SCHEMA, _PARSE_OPTIONS).alias(_PARSED),
    ]
    malformed, malformed_detail = _malformed_rule()
    # Defaults are applied to every row; a malformed row keeps the partition it parsed.
    fields = [
        F.col(RAW_COLUMN),
        *[_with_default(name).alias(name) for name in EVENT_FIELD_NAMES],
        F.col(f"{_PARSED}.partition").alias("_parsed_partition"),
        malformed.alias("_malformed"),
    ]
    rules = _rules()
    assert len(rules) + 1 == _DUPLICATE_RULE
    first_failing: Column = F.when(F.col("_malformed"), F.lit(0))
    for i, (_, checks) in enumerate(rules, start=1):
        first_failing = first_failing.when(_any([_true(cond) for cond, _ in checks]), F.lit(i))
    # The rule index is made nondeterministic on purpose (spark_partition_id is never < 0):
    # Catalyst then neither pushes filters on `reason` below this projection nor merges the
    # projections above into it, so the rule expression is evaluated once per row. Without
    # that barrier it is inlined into every consumer (`reason` is read by the split and the
    # duplicate window), the generated code outgrows the JIT limits, and constraint
    # propagation grows exponentially with the number of aliased fields (minutes, or OOM).
    barrier = F.spark_partition_id() >= 0
    ruled = [F.col("*"), F.when(barrier, first_failing).alias(_RULE)]
    rule = F.col(_RULE)
    reason: Column = F.when(rule == 0, F.lit(V.MALFORMED_JSON))
    detail: Column = F.when(rule == 0, malformed_detail)
    for i, (code, checks) in enumerate(rules, start=1):
        reason = reason.when(rule == i, F.lit(code))
        detail = detail.when(rule == i, _details(checks))
    detail = detail.when(
        rule == _DUPLICATE_RULE,
        F.format_string(
            "event_id %s is also carried by a record with seq %d in this batch; that one is kept",
            F.col("event_id"),
            F.col(_KEPT_SEQ),
        ),
    )
    partition = F.when(rule == 0, F.col("_parsed_partition")).otherwise(F.col("partition"))
    result = [
        *[F.col(c) if c != "partition" else partition.alias(c) for c in EVENT_FIELD_NAMES],
        reason.alias(REASON_COLUMN),
        rule,
        F.lit(None).cast("long").alias(_KEPT_SEQ),
        F.col(RAW_COLUMN),
        F.monotonically_increasing_id().alias(_ORDER),
    ]
    reparse = F.from_json(F.col(RAW_COLUMN), _PARSE_SCHEMA, _PARSE_OPTIONS).alias(_PARSED)
    return _Stages(parse, fields, ruled, result, reparse, detail.alias(DETAIL_COLUMN))


def event_id_hash() -> Column:
    """A 64-bit hash of ``event_id``: rows that share an event_id share it, so a batch where no
    valid row's hash repeats has no duplicate (a repeat may still be a collision, which
    `duplicate_keys` then tells apart). Counting longs is cheaper than counting the strings."""
    return F.xxhash64(F.col("event_id"))


def duplicate_keys(classified: DataFrame) -> DataFrame:
    """The event_ids that more than one valid row carries, with the row that is kept.

    An aggregate over three small columns (``event_id``, ``seq``, input order), partially
    aggregated before its shuffle: the full rows (raw text, every parsed field) never move.
    Duplicates are rare, so the result is small and ``mark_duplicates`` broadcasts it.
    """
    kept = F.min(F.struct(F.col("seq"), F.col(_ORDER)))
    return (
        classified.where(F.col(REASON_COLUMN).isNull())
        .groupBy("event_id")
        .agg(F.count(F.lit(1)).alias("_copies"), kept.alias("_kept"))
        .where(F.col("_copies") > 1)
        .select(
            F.col("event_id").alias("_dup_event_id"),
            F.col("_kept.seq").alias("_dup_kept_seq"),
            F.col(f"_kept.{_ORDER}").alias("_dup_kept_order"),
        )
    )


def mark_duplicates(classified: DataFrame, duplicates: DataFrame | None = None) -> DataFrame:
    """Reject all but one valid row per event_id with ``duplicate_event_id``.

    The kept row has the lowest seq, then the lowest input order. Only rows that passed every
    other rule take part: a broken copy is rejected for its own reason and does not hide a
    good one. ``duplicates`` is ``duplicate_keys(classified)``, possibly already materialised
    (the ingest job checkpoints it so that both halves of the split reuse it); it is joined
    back by broadcast, so the classified rows are not shuffled here.
    """
    if duplicates is None:
        duplicates = duplicate_keys(classified)
    valid = F.col(REASON_COLUMN).isNull()
    joined = classified.join(
        F.broadcast(duplicates), classified["event_id"] == duplicates["_dup_event_id"], "left"
    )
    is_dup = valid & F.col("_dup_event_id").isNotNull() & (F.col(_ORDER) != F.col("_dup_kept_order"))
    return joined.select(*_marking(is_dup, F.col("_dup_kept_seq")))


def mark_duplicates_in_partition(classified: DataFrame) -> DataFrame:
    """`mark_duplicates` for rows that lie in one partition (a small batch's), in their own job.

    A window over ``event_id`` needs its rows clustered by it, and one partition is: Spark
    sorts the rows where they are, with no shuffle and no second job. `mark_duplicates` finds
    the duplicates in a job of their own (an aggregate and its shuffle), which for a
    1,000-record batch cost more than the marking (0.17 s). Same rows out, same columns.
    """
    return classified.select(*built_once("validate.window_marking", _window_marking))


def _window_marking() -> list[Column]:
    from pyspark.sql import Window

    valid = F.col(REASON_COLUMN).isNull()
    copies = Window.partitionBy(F.col("event_id"), valid).orderBy(F.col("seq"), F.col(_ORDER))
    is_dup = valid & (F.row_number().over(copies) > 1)
    return _marking(is_dup, F.first(F.col("seq")).over(copies))


def _marking(is_dup: Column, kept_seq: Column) -> list[Column]:
    """`classify`'s columns, with ``is_dup`` rows rejected as duplicates of the row kept."""
    return [
        *[F.col(name) for name in EVENT_FIELD_NAMES],
        F.when(is_dup, F.lit(V.DUPLICATE_EVENT_ID)).otherwise(F.col(REASON_COLUMN)).alias(REASON_COLUMN),
        F.when(is_dup, F.lit(_DUPLICATE_RULE)).otherwise(F.col(_RULE)).alias(_RULE),
        F.when(is_dup, kept_seq).alias(_KEPT_SEQ),
        F.col(RAW_COLUMN),
        F.col(_ORDER),
    ]


def split(marked: DataFrame, *, keep_order: bool = False) -> tuple[DataFrame, DataFrame]:
    """`(valid_records, rejected_records)` of the output of `classify` (or `mark_duplicates`)."""
    return valid_records(marked, keep_order=keep_order), rejected_records(marked)


def valid_records(marked: DataFrame, *, keep_order: bool = False) -> DataFrame:
    """The valid rows, with the event columns.

    ``keep_order`` keeps ``INPUT_ORDER_COLUMN``: the ingest job needs it to apply records
    with equal ``seq`` in input order (the first is applied, a replay is stale).
    """
    columns = (*EVENT_FIELD_NAMES, _ORDER) if keep_order else EVENT_FIELD_NAMES
    is_valid = built_once("validate.is_valid", lambda: F.col(REASON_COLUMN).isNull())
    return select_named(marked.where(is_valid), tuple(columns))


def rejected_records(marked: DataFrame) -> DataFrame:
    """The rejected rows, with `REJECTED_EVENT_COLUMNS` and each row's detail."""
    stages = classify_stages()
    columns = [stages.detail if c == DETAIL_COLUMN else F.col(c) for c in REJECTED_EVENT_COLUMNS]
    rejected = marked.where(F.col(REASON_COLUMN).isNotNull())
    return rejected.select("*", stages.reparse).select(*columns)


# --------------------------------------------------------------------------- parsing


def _parsed(name: str) -> Column:
    return F.col(f"{_PARSED}.{name}")


def _with_default(name: str) -> Column:
    """The parsed field with the contract default when absent."""
    col = _parsed(name)
    if name in EVENT_DEFAULTS:
        return F.coalesce(col, F.lit(EVENT_DEFAULTS[name]).cast(_FIELD_TYPES[name]))
    if name == "highest_sequence_id":
        return F.coalesce(col, _parsed(HIGHEST_SEQUENCE_ID_DEFAULTS_TO))
    if name == "message_ids":
        return F.transform(col, _message_id_with_defaults)
    return col


def _message_id_with_defaults(m: Column) -> Column:
    fields = []
    for name in MESSAGE_ID_FIELD_NAMES:
        value = m[name]
        if name in MESSAGE_ID_DEFAULTS:
            data_type = MESSAGE_ID_SCHEMA[name].dataType
            value = F.coalesce(value, F.lit(MESSAGE_ID_DEFAULTS[name]).cast(data_type))
        fields.append(value.alias(name))
    return F.when(m.isNull(), F.lit(None)).otherwise(F.struct(*fields))


def _malformed_rule() -> tuple[Column, Column]:
    """(is malformed, why): the parser could not give every field its v1 type."""
    raw = F.col(RAW_COLUMN)
    corrupt = _parsed(_CORRUPT)
    # "no v1 field" as a conjunction of isnull, never as NOT of a disjunction: Catalyst's
    # BooleanSimplification pushes a NOT through one OR per optimizer pass, so NOT over the
    # ~30 fields kept the optimizer busy for ~30 passes over the whole plan (every batch)
    no_field = _all([_parsed(name).isNull() for name in EVENT_FIELD_NAMES])
    is_malformed = raw.isNull() | F.col(_PARSED).isNull() | corrupt.isNotNull() | no_field
    # Which top-level fields hold a value that did not parse (only computed for bad rows).
    as_text = F.from_json(raw, T.MapType(T.StringType(), T.StringType()))
    wrong_type = F.array_compact(
        F.array(
            *[
                F.when(as_text[name].isNotNull() & _parsed(name).isNull(), F.lit(name))
                for name in EVENT_FIELD_NAMES
            ]
        )
    )
    detail = (
        F.when(raw.isNull(), F.lit("the record is null"))
        .when(F.trim(raw) == "", F.lit("empty line"))
        .when(
            F.col(_PARSED).isNull() | as_text.isNull(),
            F.lit("not a JSON object (unparseable, truncated, an array or a scalar)"),
        )
        .when(
            corrupt.isNotNull() & (F.size(wrong_type) > 0),
            F.concat(
                F.lit("JSON type not readable as the v1 schema type: "),
                F.array_join(wrong_type, ", "),
            ),
        )
        .when(
            corrupt.isNotNull(),
            F.lit("a value inside message_ids has a JSON type the v1 schema cannot read"),
        )
        .otherwise(F.lit("no field of the v1 event schema"))
    )
    return is_malformed, detail


# --------------------------------------------------------------------------- rules
# A rule is (reason code, checks); a check is (failing condition, detail). Conditions may be
# null (SQL three-valued logic); a null never fails a rule.

Check = tuple[Column, Column]


def _rules() -> list[tuple[str, list[Check]]]:
    """The ordered rules after malformed_json (see the module docstring)."""
    return [
        (V.MISSING_FIELD, [_missing_common()]),
        (V.UNKNOWN_TYPE, [_unknown_type()]),
        (V.MISSING_FIELD, _missing_for_type()),
        (V.INVALID_VALUE, _invalid_values()),
        (V.NEGATIVE_POSITION, _negative_positions()),
        (V.BATCH_INDEX_OUT_OF_RANGE, [_batch_index_out_of_range()]),
        (V.ACK_SET_TOO_LONG, [_ack_set_too_long()]),
    ]


def _any(conditions: Sequence[Column]) -> Column:
    result = conditions[0]
    for c in conditions[1:]:
        result = result | c
    return result


def _all(conditions: Sequence[Column]) -> Column:
    result = conditions[0]
    for c in conditions[1:]:
        result = result & c
    return result


def _true(condition: Column) -> Column:
    return F.coalesce(condition, F.lit(False))


def _details(checks: list[Check]) -> Column:
    return F.concat_ws("; ", *[F.when(_true(cond), text) for cond, text in checks])


def _missing_common() -> Check:
    missing = [F.when(F.col(f).isNull(), F.lit(f)) for f in V.COMMON_REQUIRED]
    cond = _any([F.col(f).isNull() for f in V.COMMON_REQUIRED])
    return cond, F.concat(F.lit("missing "), F.concat_ws(", ", *missing))


def _unknown_type() -> Check:
    allowed = ", ".join(V.ENUMS["type"])
    cond = ~F.col("type").isin(*V.ENUMS["type"])
    return cond, F.format_string(f"type '%s' is not one of {allowed}", F.col("type"))


def _types_requiring() -> dict[str, list[str]]:
    by_field: dict[str, list[str]] = {}
    for event_type, fields in V.REQUIRED.items():
        for f in fields:
            by_field.setdefault(f, []).append(event_type)
    return by_field


def _missing_for_type() -> list[Check]:
    checks: list[Check] = []
    by_field = _types_requiring()
    missing = [
        F.when(F.col("type").isin(*types) & F.col(f).isNull(), F.lit(f)) for f, types in by_field.items()
    ]
    cond = _any([F.col("type").isin(*types) & F.col(f).isNull() for f, types in by_field.items()])
    checks.append((cond, F.format_string("%s needs %s", F.col("type"), F.concat_ws(", ", *missing))))

    def lacks_position(m: Column) -> Column:
        return _any([m.isNull()] + [m[f].isNull() for f in V.MESSAGE_ID_REQUIRED])

    required = " and ".join(V.MESSAGE_ID_REQUIRED)
    checks.append(
        _message_id_check(
            lacks_position, lambda m, i: F.format_string(f"message_ids[%d] needs {required}", i)
        )
    )
    return checks


def _invalid_values() -> list[Check]:
    checks: list[Check] = []
    for name, allowed in V.ENUMS.items():
        if name == "type":
            continue
        col = F.col(name)
        cond = col.isNotNull() & ~col.isin(*allowed)
        checks.append((cond, F.format_string(f"{name} '%s' is not one of {', '.join(allowed)}", col)))
    topic = F.col("topic")
    checks.append(
        (
            ~topic.rlike(V.TOPIC_PATTERN),
            F.format_string(
                "topic '%s' is not persistent://tenant/namespace/name or non-persistent://...",
                topic,
            ),
        )
    )
    checks.append(
        (
            topic.rlike(V.PARTITION_SUFFIX_PATTERN),
            F.format_string(
                "topic '%s' carries a -partition-N suffix; give the base name and partition",
                topic,
            ),
        )
    )
    for name, minimum in V.MIN_VALUES.items():
        col = F.col(name)
        checks.append((col < minimum, F.format_string(f"{name} %d < {minimum}", col)))
    for name, minimum in V.MESSAGE_ID_MIN_VALUES.items():
        checks.append(
            _message_id_check(
                lambda m, n=name, lo=minimum: m[n] < lo,
                lambda m, i, n=name, lo=minimum: F.format_string(f"message_ids[%d].{n} %d < {lo}", i, m[n]),
            )
        )
    checks.append(
        _message_id_check(
            lambda m: F.exists(m["ack_set"], lambda w: w.isNull()),
            lambda m, i: F.format_string("message_ids[%d].ack_set has a null word", i),
        )
    )
    for condition, text, columns in V.FIELD_RELATIONS:
        detail = F.format_string(text, *[F.col(c) for c in columns]) if columns else F.lit(text)
        checks.append((F.expr(condition), detail))
    needs_ids = F.col("type").isin(*V.NON_EMPTY_MESSAGE_IDS) & (F.size(F.col("message_ids")) == 0)
    checks.append((needs_ids, F.format_string("%s needs at least one message id", F.col("type"))))
    return checks


def _negative_positions() -> list[Check]:
    checks: list[Check] = []
    # a mark-delete position may sit before its ledger's first entry (entry_id -1)
    before_first = F.col("type").isin(*V.MARK_DELETE_POSITION_TYPES) & (F.col("entry_id") == -1)
    for name in V.POSITION_FIELDS:
        col = F.col(name)
        negative = (col < 0) & ~before_first if name == "entry_id" else col < 0
        checks.append((negative, F.format_string(f"{name} %d < 0", col)))

    def negative(m: Column) -> Column:
        return _any([m[f] < 0 for f in V.POSITION_FIELDS])

    checks.append(
        _message_id_check(
            negative,
            lambda m, i: F.format_string(
                "message_ids[%d] position %d:%d is negative", i, m["ledger_id"], m["entry_id"]
            ),
        )
    )
    return checks


def _batch_index_out_of_range() -> Check:
    def out_of_range(m: Column) -> Column:
        index, size = m["batch_index"], m["batch_size"]
        return (index != -1) & (size.isNull() | (index < 0) | (index >= size))

    return _message_id_check(
        out_of_range,
        lambda m, i: F.format_string(
            "message_ids[%d].batch_index %d outside [0, %s)",
            i,
            m["batch_index"],
            F.coalesce(m["batch_size"].cast("string"), F.lit("no batch_size")),
        ),
    )


def _ack_set_too_long() -> Check:
    bits = V.ACK_SET_WORD_BITS

    def too_long(m: Column) -> Column:
        size = m["batch_size"]
        words = F.floor((size + (bits - 1)) / bits)
        return m["ack_set"].isNotNull() & size.isNotNull() & ((size < 1) | (F.size(m["ack_set"]) > words))

    return _message_id_check(
        too_long,
        lambda m, i: F.format_string(
            "message_ids[%d].ack_set has %d words; batch_size %s needs at most ceil(size/64)",
            i,
            F.size(m["ack_set"]),
            F.coalesce(m["batch_size"].cast("string"), F.lit("(none)")),
        ),
    )


def _message_id_check(
    fails: Callable[[Column], Column], describe: Callable[[Column, Column], Column]
) -> Check:
    """A check over `message_ids`: fails when any element fails; detail names each one."""
    ids = F.col("message_ids")
    cond = F.exists(ids, lambda m: _true(fails(m)))
    per_id = F.transform(ids, lambda m, i: F.when(_true(fails(m)), describe(m, i)))
    return cond, F.array_join(per_id, "; ")
