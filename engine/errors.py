"""Why the engine refused or ignored a command; each maps to a `rejected_events` reason code.

These are not crashes: the broker answers such commands with an error or ignores them, and the
engine records them so that nothing disappears unexplained.
"""

from __future__ import annotations


class EngineRefusal(Exception):
    """A command the broker refuses or ignores; ``reason`` is the `rejected_events` code."""

    reason = "refused"


class InvalidMarkDeletePosition(EngineRefusal):
    """ManagedCursorImpl: "Invalid mark deleted position" (position beyond the last entry)."""

    reason = "ack_beyond_last_published"


class MarkDeletingMarkedPosition(EngineRefusal):
    """ManagedCursorImpl.setAcknowledgedPosition: cumulative ack below mark-delete."""

    reason = "mark_delete_before_mark_delete"


class CumulativeAckNotAllowed(EngineRefusal):
    """Consumer.messageAcked ignores cumulative acks on Shared and Key_Shared subscriptions."""

    reason = "cumulative_ack_not_allowed"


class CumulativeAckMultipleIds(EngineRefusal):
    """Consumer.messageAcked: a cumulative ack must carry exactly one message id."""

    reason = "cumulative_ack_multiple_ids"


class UnknownSubscription(EngineRefusal):
    """A consumer command for a subscription that never saw a SUBSCRIBE."""

    reason = "unknown_subscription"


class PublishOutOfOrder(EngineRefusal):
    """A PUBLISH at or before the last published entry: a managed ledger only appends."""

    reason = "publish_out_of_order"


class CorruptState(ValueError):
    """Encoded state that this version cannot read (wrong magic, version or length)."""


# ---- consumer commands (engine.subscription) ------------------------------------------
class ExclusiveConsumerBusy(EngineRefusal):
    reason = "exclusive_consumer_busy"


class SubscriptionTypeMismatch(EngineRefusal):
    reason = "subscription_type_mismatch"


class ConsumerIdInUse(EngineRefusal):
    reason = "consumer_id_in_use"


class UnknownConsumer(EngineRefusal):
    reason = "unknown_consumer"


class ConsumerNotConnected(EngineRefusal):
    reason = "consumer_not_connected"


class RedeliverNotActiveConsumer(EngineRefusal):
    reason = "redeliver_not_active_consumer"


class RedeliverDuringFailoverSwitch(EngineRefusal):
    reason = "redeliver_during_failover_switch"


class DispatchOfUnknownEntry(EngineRefusal):
    reason = "dispatch_beyond_last_published"


class DispatchOfAckedEntry(EngineRefusal):
    """No longer raised: a real broker dispatches an entry acked while it was being read, and
    counts it (see ``PartitionState``). The reason code stays, as rows that carry it may exist."""

    reason = "dispatch_of_acked_entry"


class InvalidValue(EngineRefusal):
    reason = "invalid_value"
