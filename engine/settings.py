"""The broker settings the engine obeys: each declared once, with Pulsar 4.0's default.

A field is named after the ``broker.conf`` key it mirrors, in snake_case
(``acknowledgmentAtBatchIndexLevelEnabled`` -> ``acknowledgment_at_batch_index_level_enabled``),
and that is also its key in ``--conf``: ``from_config`` reads every field by its own name, and
``jobs.platform.config`` takes the known keys, their types and their defaults from ``conf_defaults``, so a
setting is added by adding a field here and nowhere else. One field is ackstate's own, not a broker's:
``implicit_consumers``, set by ``ingest --implicit-consumers`` (or ``[ingest]
implicit_consumers``), for a stream that starts after its consumers subscribed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from engine.subscription import SubscriptionSettings
from engine.topic import is_persistent, namespace_of, partition_name

_CONVERT = {"bool": bool, "int": int}
#: fields that are not top-level ``--conf`` keys: ``deduplication`` is the ``[deduplication]``
#: table, ``implicit_consumers`` is ``[ingest] implicit_consumers`` (or ``--implicit-consumers``)
_NOT_TOP_LEVEL = frozenset({"deduplication", "implicit_consumers"})


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Broker settings the engine obeys, named after Pulsar's (snake_case in ``--conf``)."""

    acknowledgment_at_batch_index_level_enabled: bool = False
    max_unacked_messages_per_consumer: int = 50_000
    active_consumer_failover_delay_time_millis: int = 1_000
    active_consumer_failover_consistent_hashing: bool = False
    broker_deduplication_enabled: bool = False
    max_concurrent_non_persistent_message_per_connection: int = 1000
    #: the ``[deduplication]`` table: a full topic name (without ``-partition-N``) or
    #: ``tenant/namespace`` -> bool, the topic and namespace policies over the broker setting
    deduplication: Mapping[str, bool] = field(default_factory=dict)
    #: a command from a consumer id the state does not know attaches that consumer (with
    #: defaults for what the command lacks) instead of being refused as ``unknown_consumer``
    implicit_consumers: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EngineSettings:
        """The settings named in ``config`` (the ``--conf`` engine keys); defaults for the rest."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "deduplication":
                values[f.name] = {str(k): bool(v) for k, v in (config.get(f.name) or {}).items()}
            elif f.name in config:
                values[f.name] = _CONVERT[str(f.type)](config[f.name])
        return cls(**values)

    @classmethod
    def conf_defaults(cls) -> dict[str, Any]:
        """The top-level ``--conf`` keys and their defaults: this class is where they are
        declared, so ``jobs.platform.config`` takes them from here (the packaged TOML has none)."""
        return {f.name: f.default for f in fields(cls) if f.name not in _NOT_TOP_LEVEL}

    def for_partition(self, topic: str, partition: int) -> SubscriptionSettings:
        from engine.failover import dispatcher_partition_index

        return SubscriptionSettings(
            acknowledgment_at_batch_index_level_enabled=self.acknowledgment_at_batch_index_level_enabled,
            max_unacked_messages_per_consumer=self.max_unacked_messages_per_consumer,
            active_consumer_failover_delay_time_millis=self.active_consumer_failover_delay_time_millis,
            active_consumer_failover_consistent_hashing=self.active_consumer_failover_consistent_hashing,
            partition_index=dispatcher_partition_index(topic, partition),
            topic_name=partition_name(topic, partition),
            implicit_consumers=self.implicit_consumers,
        )

    def deduplication_enabled(self, topic: str) -> bool:
        """``PersistentTopic.isDeduplicationEnabled``: the topic policy, else the namespace's,
        else the broker's ``brokerDeduplicationEnabled`` (``HierarchyTopicPolicies``). Always
        false on a non-persistent topic."""
        if not is_persistent(topic):
            return False
        if topic in self.deduplication:
            return self.deduplication[topic]
        return self.deduplication.get(namespace_of(topic), self.broker_deduplication_enabled)
