"""The pure helpers of ``ackstate bench --ingest`` (no Spark, nothing timed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.bench import ingest as b
from jobs.bench.generate import generate


@pytest.mark.parametrize(
    ("topics", "partitions", "expected"), [(1, 0, 1), (3, 0, 3), (1, 4, 4), (2, 4, 5), (5, 3, 11)]
)
def test_topic_partitions_counts_like_the_generator_lays_out(
    tmp_path: Path, topics: int, partitions: int, expected: int
) -> None:
    assert b.topic_partitions(topics, partitions) == expected
    summary = generate(
        tmp_path, events=20, topics=topics, partitions=partitions, subscriptions_per_topic=3, files=1
    )
    assert summary.partitions == expected
    assert summary.subscriptions == 3 * expected


def test_the_design_sizes() -> None:
    assert b.FULL.subscriptions == 10_000
    assert b.FULL.events_per_batch == 1_000_000
    assert b.FULL.batches >= 3
    assert b.QUICK.subscriptions == 1_000
    assert b.QUICK.batches >= 3
    assert b.FULL.events == b.FULL.batches * b.FULL.events_per_batch


def test_sized_finds_the_topic_count_or_refuses() -> None:
    w = b.sized(10_000, 1_000, 2, subscriptions_per_topic=8, partitions=4)
    assert (w.topics, w.topic_partitions, w.subscriptions) == (500, 1_250, 10_000)
    assert b.sized(12, 10, 1, subscriptions_per_topic=4, partitions=0).topics == 3
    with pytest.raises(ValueError, match="multiple"):
        b.sized(10, 10, 1, subscriptions_per_topic=4)
    with pytest.raises(ValueError, match="topic partitions"):
        b.sized(8 * 7, 10, 1, subscriptions_per_topic=8, partitions=4)  # 7 units: no topic count gives it


def test_generated_workload_matches_its_sizing(tmp_path: Path) -> None:
    w = b.sized(48, 25, 3, subscriptions_per_topic=4, partitions=2)
    summary = generate(
        tmp_path,
        events=w.events,
        topics=w.topics,
        partitions=w.partitions,
        subscriptions_per_topic=w.subscriptions_per_topic,
        seed=w.seed,
        files=w.batches,
    )
    assert summary.subscriptions == w.subscriptions == 48
    assert [sum(1 for _ in p.open()) for p in summary.files] == [25, 25, 25]


def test_warmup_and_sustained() -> None:
    assert b.warmup_and_sustained([10.0, 300.0, 100.0, 200.0]) == (10.0, 200.0)
    assert b.warmup_and_sustained([10.0, 300.0, 100.0]) == (10.0, 200.0)
    assert b.warmup_and_sustained([7.0]) == (7.0, None)
    with pytest.raises(ValueError):
        b.warmup_and_sustained([])


def test_ratio() -> None:
    assert b.ratio(150.0, 300.0) == 0.5
    assert b.ratio(None, 300.0) is None
    assert b.ratio(1.0, 0.0) is None
    assert b.ratio(1.0, None) is None


def test_batch_and_phase_lines() -> None:
    t = b.BatchTiming(batch_id=2, rows=1_000_000, seconds=4.0)
    assert t.events_per_second == 250_000
    line = b.batch_line("ackstate", t, first=False)
    assert "batch 2:" in line and "1,000,000 events" in line and "250,000 events/s" in line
    assert "warm-up" not in line
    assert "warm-up" in b.batch_line("ackstate", t, first=True)
    assert b.BatchTiming(0, 5, 0.0).events_per_second == 0.0
    phases = b.phases_line([("read", 1.0), ("validate and apply", 2.5)], 4.0)
    assert phases.strip() == "phases (s): read 1.00, validate and apply 2.50 (sum 3.50 s of 4.00 s)"


def test_figures_take_the_median_over_batches_after_the_first_then_over_runs() -> None:
    def run(ack: list[float], thru: list[float]) -> b.RunResult:
        return b.RunResult(
            ackstate=[b.BatchTiming(i, int(r), 1.0) for i, r in enumerate(ack)],
            passthrough=[b.BatchTiming(i, int(r), 1.0) for i, r in enumerate(thru)],
        )

    figs = {
        f.name.split(",")[0] + (" first" if "first" in f.name else ""): f
        for f in b.figures(
            b.QUICK, [run([10, 100, 300], [20, 400, 400]), run([10, 200, 200], [20, 400, 400])]
        )
    }
    assert figs["ackstate ingest"].value == 200  # run medians 200 and 200
    assert figs["Spark pass-through"].value == 400
    assert figs["ackstate / pass-through"].value == 0.5
    assert figs["ackstate ingest first"].value == 10
    assert figs["ackstate ingest"].target == "(see the ratio)"  # issue 13: the ratio is the target
    assert "ratio" in figs["ackstate / pass-through"].line()


def test_phase_log_collects_the_ingest_debug_lines() -> None:
    import logging

    log = logging.getLogger("ackstate.ingest")
    before = (log.level, log.propagate, list(log.handlers))
    with b.capture_ingest_log() as (phase_log, _):
        log.debug("batch %d: %s took %.2f s", 3, "read", 1.25)
        log.debug("batch %d: %s took %.2f s", 3, "merge cursors", 0.5)
        log.debug("something else %d", 3)
    assert phase_log.phases == {3: [("read", 1.25), ("merge cursors", 0.5)]}
    assert (log.level, log.propagate, list(log.handlers)) == before


@pytest.mark.slow  # a process of its own with its own JVM
def test_the_whole_process_figure_is_an_ingest_a_user_runs(tmp_path: Path) -> None:
    summary = generate(
        tmp_path / "gen", events=300, topics=2, partitions=2, subscriptions_per_topic=2, files=3
    )
    timing = b.run_whole_process(summary.files[:2], tmp_path / "whole")
    lines = sum(len(f.read_text().splitlines()) for f in summary.files[:2])
    assert (timing.rows, timing.seconds > 0) == (lines, True)
    # the command ran with its defaults and applied every event into the fresh warehouse
    assert (tmp_path / "whole" / "warehouse" / "cursors" / "_delta_log").is_dir()
    figure = b.whole_process_figure(timing)
    assert figure.value == pytest.approx(lines / timing.seconds)


def test_the_measured_ingest_runs_with_what_conf_says(tmp_path: Path) -> None:
    """``bench --conf`` measured the defaults whatever the file said (an option read and
    ignored): the engine settings, ``[ingest] write_threads`` and ``warm_state`` now reach the
    measured ingest."""
    from jobs.platform.config import load_config

    conf = tmp_path / "bench.toml"
    conf.write_text(
        "acknowledgment_at_batch_index_level_enabled = true\n"
        "[ingest]\nwrite_threads = 1\nwarm_state = false\n"
    )
    options = b.ackstate_options(load_config(conf), "src", tmp_path / "wh")
    assert options.write_threads == 1
    assert options.warm_state is False
    assert options.settings.acknowledgment_at_batch_index_level_enabled is True
    assert options.max_files_per_trigger == 1
    defaults = b.ackstate_options(None, "src", tmp_path / "wh")
    assert defaults.write_threads == 4
    assert defaults.warm_state is True
    assert defaults.settings.acknowledgment_at_batch_index_level_enabled is False
    assert b.ackstate_options(load_config(), "src", tmp_path / "wh") == defaults
