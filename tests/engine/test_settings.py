"""Every engine setting is read from ``--conf`` by its own name, with Pulsar 4.0's default."""

from __future__ import annotations

from dataclasses import fields

from engine import EngineSettings


def test_defaults_are_pulsar_4_0s() -> None:
    assert EngineSettings.from_config({}) == EngineSettings()
    assert EngineSettings().max_unacked_messages_per_consumer == 50_000
    assert EngineSettings().active_consumer_failover_delay_time_millis == 1_000
    assert EngineSettings().max_concurrent_non_persistent_message_per_connection == 1000
    assert not EngineSettings().acknowledgment_at_batch_index_level_enabled


def test_each_field_is_read_by_its_name() -> None:
    for f in fields(EngineSettings):
        if f.name == "deduplication":
            value: object = {"acme/billing": True}
        elif f.type == "bool":
            value = not getattr(EngineSettings(), f.name)
        else:
            value = getattr(EngineSettings(), f.name) + 7
        assert getattr(EngineSettings.from_config({f.name: value}), f.name) == value, f.name
