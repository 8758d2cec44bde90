"""The engine's one error hierarchy: refusals, which are answers, and unreadable state, which is
a fault.

* ``EngineRefusal``: a command the broker refuses or ignores. It is not a crash: the engine
  records it in ``rejected_events`` under its ``reason`` code, so that nothing disappears
  unexplained. Each class is named after its reason code and cites the broker code it mirrors.
* ``CorruptState`` and ``SnapshotError``: input the engine cannot read at all (encoded state of
  another version, an admin-API snapshot that is not Pulsar's shape). They stop the work.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of everything the engine raises on purpose."""


class EngineRefusal(EngineError):
    """A command the broker refuses or ignores; ``reason`` is the `rejected_events` code."""

    reason = "refused"


class CorruptState(EngineError, ValueError):
    """Encoded state that this version cannot read (wrong magic, version or length)."""


class SnapshotError(EngineError, ValueError):
    """An admin-API snapshot (``internalStats``/``stats``) that cannot be turned into state."""


# ---- cursor (engine.cursor) ------------------------------------------------------------------
class AckBeyondLastPublished(EngineRefusal):
    """``ManagedCursorImpl``: "Invalid mark deleted position": an ack beyond the last entry."""

    reason = "ack_beyond_last_published"


class MarkDeleteBeforeMarkDelete(EngineRefusal):
    """``ManagedCursorImpl.setAcknowledgedPosition``: a cumulative ack below mark-delete."""

    reason = "mark_delete_before_mark_delete"


# ---- acks (engine.subscription) --------------------------------------------------------------
class CumulativeAckNotAllowed(EngineRefusal):
    """``Consumer.messageAcked`` ignores cumulative acks on Shared and Key_Shared subscriptions."""

    reason = "cumulative_ack_not_allowed"


class CumulativeAckMultipleIds(EngineRefusal):
    """``Consumer.messageAcked``: a cumulative ack must carry exactly one message id."""

    reason = "cumulative_ack_multiple_ids"


class UnknownSubscription(EngineRefusal):
    """A consumer command, or a cursor operation (RESET_CURSOR, MARK_DELETE, UNSUBSCRIBE), for a
    subscription that never saw a SUBSCRIBE (or was deleted since)."""

    reason = "unknown_subscription"


# ---- the ledger (engine.partition) -----------------------------------------------------------
class PublishOutOfOrder(EngineRefusal):
    """A PUBLISH at or before the last published entry: a managed ledger only appends."""

    reason = "publish_out_of_order"


class DispatchBeyondLastPublished(EngineRefusal):
    """A DISPATCH of an entry the ledger does not have yet: a dispatcher reads only entries
    that were added (``ManagedLedgerImpl.asyncReadEntries`` stops at the last confirmed entry)."""

    reason = "dispatch_beyond_last_published"


class InvalidValue(EngineRefusal):
    """A field the broker would never send, such as an unknown subscription type
    (``CommandSubscribe.SubType`` has four values)."""

    reason = "invalid_value"


# ---- consumers (engine.subscription) ---------------------------------------------------------
class ExclusiveConsumerBusy(EngineRefusal):
    """``AbstractDispatcherSingleActiveConsumer.addConsumer``: an Exclusive subscription admits
    one consumer; a second gets ``ConsumerBusyException``."""

    reason = "exclusive_consumer_busy"


class SubscriptionTypeMismatch(EngineRefusal):
    """``PersistentSubscription.addConsumer``: a consumer of another type than the connected
    ones gets ``SubscriptionBusyException`` ("Subscription is of different type")."""

    reason = "subscription_type_mismatch"


class ConsumerIdInUse(EngineRefusal):
    """A SUBSCRIBE with the id of a consumer still connected to the subscription: the broker
    answers a consumer id already in use on a connection with an error (``ServerCnx.handleSubscribe``)."""

    reason = "consumer_id_in_use"


class UnknownConsumer(EngineRefusal):
    """An ACK, DISPATCH or REDELIVER from a consumer id the subscription does not know:
    ``ServerCnx`` drops commands for a consumer id unknown on the connection."""

    reason = "unknown_consumer"


class ConsumerNotConnected(EngineRefusal):
    """A CLOSE_CONSUMER for a consumer that is not connected (already closed, or never was)."""

    reason = "consumer_not_connected"


class RedeliverNotActiveConsumer(EngineRefusal):
    """``PersistentDispatcherSingleActiveConsumer.redeliverUnacknowledgedMessages``: on Exclusive
    and Failover only the active consumer may rewind ("Only the active consumer can call
    resend")."""

    reason = "redeliver_not_active_consumer"


class RedeliverDuringFailoverSwitch(EngineRefusal):
    """A redeliver-all on Failover while the switch to a new active consumer is still pending
    (``activeConsumerFailoverDelayTimeMillis``): the dispatcher ignores it until it settles."""

    reason = "redeliver_during_failover_switch"
