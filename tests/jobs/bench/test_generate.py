"""The synthetic workload: deterministic, valid per the contract, and shaped like Pulsar's."""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from jobs.bench.generate import (
    MALFORMED_KEY,
    MALFORMED_KINDS,
    RAW_KEY,
    GenerateSummary,
    ack_set_words,
    generate,
    iter_events,
    run,
)
from jobs.platform.errors import AckstateError
from schemas.validation import COMMON_REQUIRED, REQUIRED
from tests.schemas.shared_tools import load_runner, runner_errors

WORKLOAD = {"events": 30_000, "topics": 5, "partitions": 3, "subscriptions_per_topic": 4, "seed": 7}


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    return list(iter_events(**WORKLOAD))


def _lines(summary: GenerateSummary) -> list[str]:
    return [line for path in summary.files for line in path.read_text(encoding="utf-8").splitlines()]


def _position(m: dict[str, Any]) -> tuple[int, int]:
    return m["ledger_id"], m["entry_id"]


# --------------------------------------------------------------------------- determinism, files


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    args = {
        "events": 3000,
        "topics": 3,
        "partitions": 2,
        "subscriptions_per_topic": 3,
        "malformed_rate": 0.02,
    }
    a = generate(tmp_path / "a", seed=11, files=3, **args)
    b = generate(tmp_path / "b", seed=11, files=3, **args)
    c = generate(tmp_path / "c", seed=12, files=3, **args)
    assert [p.read_bytes() for p in a.files] == [p.read_bytes() for p in b.files]
    assert [p.read_bytes() for p in a.files] != [p.read_bytes() for p in c.files]
    assert (a.events, a.malformed, a.partitions, a.subscriptions) == (
        b.events,
        b.malformed,
        b.partitions,
        b.subscriptions,
    )


def test_files_are_consecutive_slices_of_iter_events(tmp_path: Path) -> None:
    """The file writer renders frequent types itself; it must give the bytes of the dicts."""
    settings = {"events": 8000, "topics": 4, "partitions": 2, "subscriptions_per_topic": 3, "seed": 5}
    summary = generate(tmp_path / "out", malformed_rate=0.03, files=4, **settings)
    encode = json.JSONEncoder(separators=(",", ":")).encode
    expected = []
    for rec in iter_events(malformed_rate=0.03, **settings):
        if RAW_KEY in rec:
            expected.append(rec[RAW_KEY])
        else:
            expected.append(encode({k: v for k, v in rec.items() if k != MALFORMED_KEY}))
    assert _lines(summary) == expected
    assert [p.name for p in summary.files] == [f"events-{k:05d}.jsonl" for k in range(4)]
    sizes = [len(p.read_text().splitlines()) for p in summary.files]
    assert sum(sizes) == 8000 and max(sizes) - min(sizes) <= 1
    mtimes = [p.stat().st_mtime for p in summary.files]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == len(mtimes)


def test_summary_counts(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    summary = generate(tmp_path / "out", files=3, **WORKLOAD)
    assert summary.events == len(_lines(summary)) == WORKLOAD["events"]
    assert summary.malformed == 0
    assert summary.topics == WORKLOAD["topics"]
    assert summary.partitions == len({(e["topic"], e["partition"]) for e in events})
    assert summary.subscriptions == len(
        {(e["topic"], e["partition"], e["subscription"]) for e in events if e["type"] == "SUBSCRIBE"}
    )
    d = summary.as_dict()
    assert d["events"] == WORKLOAD["events"] and len(d["files"]) == 3
    json.dumps(d)


def test_refuses_to_mix_with_earlier_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    generate(out, events=100, topics=1, partitions=1, subscriptions_per_topic=1, seed=1, files=2)
    with pytest.raises(AckstateError, match="already holds"):
        generate(out, events=100, topics=1, partitions=1, subscriptions_per_topic=1, seed=1, files=2)
    summary = generate(
        out, events=50, topics=1, partitions=1, subscriptions_per_topic=1, seed=2, files=1, overwrite=True
    )
    assert sorted(p.name for p in out.iterdir()) == ["events-00000.jsonl"]
    assert summary.events == 50


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AckstateError):
        generate(tmp_path / "x", events=10, malformed_rate=1.5)
    with pytest.raises(AckstateError):
        generate(tmp_path / "y", events=10, topics=0)


def test_run_tolerates_missing_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(out=str(tmp_path / "cli"), events=500, seed=3)
    assert run(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["events"] == 500
    assert printed["files"] and all(name.endswith(".jsonl") for name in printed["files"])


# --------------------------------------------------------------------------- validity


def test_every_record_passes_the_scenario_runners_validator(events: list[dict[str, Any]]) -> None:
    problems = [(e["event_id"], errs) for e in events if (errs := runner_errors(e))]
    assert not problems[:5]


def test_topics_and_partitions(events: list[dict[str, Any]]) -> None:
    runner = load_runner()
    partitions: dict[str, set[int]] = defaultdict(set)
    for e in events:
        assert runner.TOPIC_RE.match(e["topic"]) and not re.search(r"-partition-\d+$", e["topic"])
        assert e["topic"].startswith("persistent://")
        partitions[e["topic"]].add(e["partition"])
    shapes = sorted(partitions.values(), key=len)
    assert {-1} in shapes, "no non-partitioned topic"
    assert set(range(WORKLOAD["partitions"])) in shapes, "no partitioned topic"
    for found in shapes:
        assert found == {-1} or found == set(range(WORKLOAD["partitions"]))


def test_seq_and_event_time_strictly_increase_per_partition(events: list[dict[str, Any]]) -> None:
    _assert_seq_increases(events)


def _assert_seq_increases(events: list[dict[str, Any]]) -> None:
    last: dict[tuple[str, int], tuple[int, int]] = {}
    for e in events:
        key = (e["topic"], e["partition"])
        seq, t = last.get(key, (0, 0))
        assert e["seq"] > seq and e["event_time"] > t, e
        last[key] = (e["seq"], e["event_time"])
    assert all(seq >= 1 for seq, _ in last.values())


def test_partitions_interleave(events: list[dict[str, Any]]) -> None:
    switches = sum(
        1
        for a, b in itertools.pairwise(events)
        if (a["topic"], a["partition"]) != (b["topic"], b["partition"])
    )
    assert switches > len(events) // 2


def test_event_ids_are_unique(events: list[dict[str, Any]]) -> None:
    assert len({e["event_id"] for e in events}) == len(events)


def test_acks_and_dispatches_name_published_entries(events: list[dict[str, Any]]) -> None:
    _assert_acks_name_published_entries(events)


def _assert_acks_name_published_entries(events: list[dict[str, Any]]) -> None:
    published: dict[tuple[str, int], dict[tuple[int, int], int]] = defaultdict(dict)
    for e in events:
        key = (e["topic"], e["partition"])
        if e["type"] == "PUBLISH":
            published[key][_position(e)] = e.get("batch_size", 1)
        elif e["type"] == "DISPATCH":
            assert published[key].get(_position(e)) == e.get("batch_size", 1), e
        for m in e.get("message_ids", []):
            assert _position(m) in published[key], e
            if "batch_size" in m:
                assert published[key][_position(m)] == m["batch_size"], e


def test_consumer_commands_come_from_subscribed_consumers(events: list[dict[str, Any]]) -> None:
    _assert_commands_come_from_subscribed_consumers(events)


def _assert_commands_come_from_subscribed_consumers(events: list[dict[str, Any]]) -> None:
    connected: dict[tuple[str, int, str], set[int]] = defaultdict(set)
    for e in events:
        if "subscription" not in e:
            continue
        key = (e["topic"], e["partition"], e["subscription"])
        if e["type"] == "SUBSCRIBE":
            connected[key].add(e["consumer_id"])
        else:
            assert e["consumer_id"] in connected[key], e
            if e["type"] == "CLOSE_CONSUMER":
                connected[key].discard(e["consumer_id"])


def test_ledgers_roll_and_entries_are_consecutive() -> None:
    per_partition: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for e in iter_events(events=60_000, topics=2, partitions=1, subscriptions_per_topic=1, seed=4):
        if e["type"] == "PUBLISH":
            per_partition[(e["topic"], e["partition"])].append(_position(e))
    rolled = 0
    for positions in per_partition.values():
        assert positions[0][1] == 0
        for (l1, e1), (l2, e2) in itertools.pairwise(positions):
            assert (l2 == l1 and e2 == e1 + 1) or (l2 > l1 and e2 == 0)
            rolled += l2 > l1
    assert rolled >= 2


# --------------------------------------------------------------------------- workload shape


def test_every_consumer_event_type_and_sub_type_appears(events: list[dict[str, Any]]) -> None:
    types = Counter(e["type"] for e in events)
    for t in ("SUBSCRIBE", "PUBLISH", "DISPATCH", "ACK", "NACK", "REDELIVER"):
        assert types[t] > 0, t
    assert types["ACK"] + types["DISPATCH"] > types["PUBLISH"]
    sub_types = {e["sub_type"] for e in events if e["type"] == "SUBSCRIBE"}
    assert sub_types == {"Exclusive", "Failover", "Shared", "Key_Shared"}
    positions = Counter(e.get("initial_position", "Latest") for e in events if e["type"] == "SUBSCRIBE")
    assert positions["Earliest"] > positions["Latest"]


def test_subscribe_comes_early_in_each_partition(events: list[dict[str, Any]]) -> None:
    first_subscribe: dict[tuple[str, int], int] = {}
    for e in events:
        key = (e["topic"], e["partition"])
        if e["type"] == "SUBSCRIBE":
            first_subscribe.setdefault(key, e["seq"])
    assert first_subscribe and max(first_subscribe.values()) <= 4


def test_cumulative_acks_only_on_exclusive_and_failover(events: list[dict[str, Any]]) -> None:
    sub_type = {
        (e["topic"], e["partition"], e["subscription"]): e["sub_type"]
        for e in events
        if e["type"] == "SUBSCRIBE"
    }
    cumulative = [e for e in events if e["type"] == "ACK" and e["ack_type"] == "Cumulative"]
    assert cumulative
    for e in cumulative:
        assert sub_type[(e["topic"], e["partition"], e["subscription"])] in ("Exclusive", "Failover")
        assert len(e["message_ids"]) == 1


def test_cumulative_acks_move_forward(events: list[dict[str, Any]]) -> None:
    last: dict[tuple[str, int, str], tuple[int, int]] = {}
    for e in events:
        if e["type"] == "ACK" and e["ack_type"] == "Cumulative":
            key = (e["topic"], e["partition"], e["subscription"])
            pos = _position(e["message_ids"][0])
            assert pos > last.get(key, (-1, -1))
            last[key] = pos


def test_individual_acks_leave_holes_and_come_out_of_order(events: list[dict[str, Any]]) -> None:
    acked: dict[tuple[str, int, str], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["type"] == "ACK" and e["ack_type"] == "Individual":
            key = (e["topic"], e["partition"], e["subscription"])
            acked[key].extend(_position(m) for m in e["message_ids"] if "ack_set" not in m)
    out_of_order = sum(1 for positions in acked.values() if positions != sorted(positions))
    assert out_of_order > 0
    dispatched: dict[tuple[str, int, str], set[tuple[int, int]]] = defaultdict(set)
    for e in events:
        if e["type"] == "DISPATCH":
            dispatched[(e["topic"], e["partition"], e["subscription"])].add(_position(e))
    holes = sum(len(dispatched[k] - set(v)) for k, v in acked.items())
    assert holes > 0
    assert any(len(e["message_ids"]) > 1 for e in events if e["type"] == "ACK")


def test_batches_and_batch_index_acks(events: list[dict[str, Any]]) -> None:
    batches = [e for e in events if e["type"] == "PUBLISH" and e.get("batch_size", 1) > 1]
    assert batches
    for e in batches:
        assert 2 <= e["batch_size"] <= 10
        assert e["highest_sequence_id"] == e["sequence_id"] + e["batch_size"] - 1
    index_acks = [(e, m) for e in events if e["type"] == "ACK" for m in e["message_ids"] if "ack_set" in m]
    assert index_acks
    finished: dict[tuple[Any, ...], bool] = {}
    for e, m in index_acks:
        size = m["batch_size"]
        assert len(m["ack_set"]) == (size + 63) // 64
        word = m["ack_set"][0]
        assert 0 < word < (1 << size), "some index still unacked, none beyond the batch"
        finished[(e["topic"], e["partition"], e["subscription"], _position(m))] = False
    # a batch acked index by index is finished by a plain ACK of the entry, as the client does
    for e in events:
        if e["type"] == "ACK" and e["ack_type"] == "Individual":
            for m in e["message_ids"]:
                key = (e["topic"], e["partition"], e["subscription"], _position(m))
                if "ack_set" not in m and key in finished:
                    finished[key] = True
    assert sum(finished.values()) > 0


def test_producer_sequence_ids_increase(events: list[dict[str, Any]]) -> None:
    next_id: dict[tuple[str, int, str], int] = {}
    for e in events:
        if e["type"] == "PUBLISH":
            key = (e["topic"], e["partition"], e["producer_name"])
            assert e["sequence_id"] == next_id.get(key, 0)
            next_id[key] = e.get("highest_sequence_id", e["sequence_id"]) + 1


# --------------------------------------------------------------------------- malformed records


def test_malformed_fraction_and_kinds() -> None:
    records = list(
        iter_events(
            events=20_000, topics=3, partitions=2, subscriptions_per_topic=2, seed=9, malformed_rate=0.05
        )
    )
    malformed = [r for r in records if MALFORMED_KEY in r]
    assert 800 <= len(malformed) <= 1200  # 1000 expected, binomial sd ~31
    assert {r[MALFORMED_KEY] for r in malformed} == set(MALFORMED_KINDS)
    for r in malformed:
        kind = r[MALFORMED_KEY]
        event = {k: v for k, v in r.items() if k != MALFORMED_KEY}
        if kind == "truncated_json":
            with pytest.raises(ValueError):
                json.loads(r[RAW_KEY])
        elif kind == "missing_field":
            # the runner fills event_id, seq, event_time and topic itself: check the record
            required = COMMON_REQUIRED + REQUIRED.get(event.get("type", ""), ())
            assert any(f not in event for f in required), r
        else:
            assert runner_errors(event), r


def test_malformed_records_change_no_state() -> None:
    """A malformed record takes a seq but publishes, dispatches and acks nothing: the valid
    records around many of them still only name published entries and subscribed consumers."""
    records = iter_events(
        events=20_000, topics=3, partitions=2, subscriptions_per_topic=3, seed=2, malformed_rate=0.2
    )
    valid = [r for r in records if MALFORMED_KEY not in r]
    assert not [e for e in valid if runner_errors(e)][:3]
    _assert_acks_name_published_entries(valid)
    _assert_commands_come_from_subscribed_consumers(valid)
    _assert_seq_increases(valid)


def test_ack_set_words_layout() -> None:
    assert ack_set_words(0b1111_1001, 8) == [249]
    assert ack_set_words((1 << 64) - 1, 64) == [-1]
    assert ack_set_words((1 << 63) | 1, 65) == [-(1 << 63) + 1, 0]
    assert ack_set_words(1 << 64, 65) == [0, 1]
