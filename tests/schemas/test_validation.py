"""Validation rules as data: they match the contract and the scenario runner."""

from __future__ import annotations

import re

from schemas import validation as V
from schemas.events import EVENT_FIELD_NAMES, EVENT_TYPES, MESSAGE_ID_FIELD_NAMES
from tests.schemas.shared_tools import load_runner


def test_every_event_type_has_its_required_fields() -> None:
    assert set(V.REQUIRED) == set(EVENT_TYPES)


# event types added to the contract (README, "Contract additions"): the runner predates them
ADDED_CURSOR_OPERATIONS = {"RESET_CURSOR", "MARK_DELETE", "UNSUBSCRIBE", "CREATE_SUBSCRIPTION"}
ADDED_TOPIC_OPERATIONS = {"LOAD_TOPIC", "DELETE_TOPIC"}
ADDED_EVENT_TYPES = ADDED_CURSOR_OPERATIONS | ADDED_TOPIC_OPERATIONS


def test_required_fields_are_the_scenario_runners() -> None:
    runner = load_runner()
    assert {t: V.REQUIRED[t] for t in runner.REQUIRED} == dict(runner.REQUIRED)
    assert set(V.REQUIRED) - set(runner.REQUIRED) == ADDED_EVENT_TYPES


def test_required_fields_exist_in_the_schema() -> None:
    for fields in (*V.REQUIRED.values(), V.COMMON_REQUIRED):
        assert set(fields) <= set(EVENT_FIELD_NAMES)
    assert set(V.MESSAGE_ID_REQUIRED) <= set(MESSAGE_ID_FIELD_NAMES)
    assert set(V.MIN_VALUES) <= set(EVENT_FIELD_NAMES)
    assert set(V.ENUMS) <= set(EVENT_FIELD_NAMES)


def test_common_required_fields() -> None:
    assert V.COMMON_REQUIRED == ("event_id", "seq", "event_time", "type", "topic")


def test_enums_are_the_runners() -> None:
    runner = load_runner()
    assert set(V.ENUMS["type"]) == runner.EVENT_TYPES | ADDED_EVENT_TYPES
    assert set(V.ENUMS["sub_type"]) == runner.SUB_TYPES
    assert set(V.ENUMS["ack_type"]) == runner.ACK_TYPES
    assert set(V.ENUMS["initial_position"]) == runner.INITIAL_POSITIONS


def test_topic_names_are_the_runners_and_pulsars_v1_names() -> None:
    """Every name the runner accepts, and a v1 name (README, "Contract additions"); nothing else."""
    runner = load_runner()
    names = {
        "persistent://t/ns/x": True,
        "non-persistent://t/ns/x-y.z": True,
        "persistent://p/c/ns/x": False,
        "persistent://t/x": False,
        "persistent://p/c/ns/x/y": False,
        "persistent://t/ns/a b": False,
        "orders": False,
    }
    for name, runner_accepts in names.items():
        assert bool(runner.TOPIC_RE.match(name)) == runner_accepts, name
        v1 = name == "persistent://p/c/ns/x"
        assert bool(re.match(V.TOPIC_PATTERN, name)) == (runner_accepts or v1), name


def test_every_reason_code_is_documented() -> None:
    codes = {
        "malformed_json",
        "unknown_type",
        "missing_field",
        "invalid_value",
        "negative_position",
        "batch_index_out_of_range",
        "ack_set_too_long",
        "duplicate_event_id",
        "stale_seq",
        "ack_beyond_last_published",
        "mark_delete_before_mark_delete",
        "unknown_subscription",
        "cumulative_ack_not_allowed",
        "exclusive_consumer_busy",
        "unknown_consumer",
    }
    assert codes <= set(V.REASONS)
    for code, meaning in V.REASONS.items():
        assert code == code.lower() and " " not in code
        assert meaning.strip() and "\n" not in meaning


def test_validation_order_covers_the_validation_reasons() -> None:
    assert V.VALIDATION_ORDER[0] == V.MALFORMED_JSON
    assert V.VALIDATION_ORDER[-1] == V.DUPLICATE_EVENT_ID
    assert set(V.VALIDATION_ORDER) <= set(V.REASONS)
    assert set(V.ENGINE_REASONS) <= set(V.REASONS)
    assert not set(V.ENGINE_REASONS) & set(V.VALIDATION_ORDER)


def test_engine_refusal_reasons_are_documented() -> None:
    from engine import errors

    refusals = [
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.EngineRefusal) and cls is not errors.EngineRefusal
    ]
    assert refusals
    for cls in refusals:
        assert cls.reason in V.REASONS, f"{cls.__name__}.reason {cls.reason!r} is not in REASONS"
