"""The broker's admin API against ackstate's ``stats`` / ``internal-stats``, field by field.

Compared, per topic partition and subscription:

* ``internalStats``: ``cursors.<sub>``: markDeletePosition, individuallyDeletedMessages,
  totalNonContiguousDeletedMessagesRange;
* ``stats``: ``subscriptions.<sub>``: msgBacklog, unackedMessages, type, activeConsumerName, and
  ``consumers[]`` (paired by consumerName): unackedMessages, blockedConsumerOnUnackedMsgs.

Left out, each with its reason (only what the broker alone can know qualifies): the cursors
named in ``EXCLUDED_CURSORS``.
"""

from __future__ import annotations

from typing import Any

from engine.topic import admin_path
from jobs.platform.broker import StandaloneBroker

INTERNAL_FIELDS = (
    "markDeletePosition",
    "individuallyDeletedMessages",
    "totalNonContiguousDeletedMessagesRange",
)
SUBSCRIPTION_FIELDS = ("msgBacklog", "unackedMessages", "type", "activeConsumerName")
CONSUMER_FIELDS = ("unackedMessages", "blockedConsumerOnUnackedMsgs")

EXCLUDED_CURSORS = {
    # MessageDeduplication's own cursor on a topic with deduplication on: the broker's
    # bookkeeping of which sequence ids were persisted, not a subscription. ackstate keeps the
    # same knowledge in the `producers` table.
    "pulsar.dedup": "the broker's deduplication cursor, not a subscription",
}


def broker_view(broker: StandaloneBroker, name: str) -> dict[str, Any]:
    """What the admin API shows of one topic partition, reduced to the compared fields."""
    stats = broker.admin(admin_path(name) + "/stats")
    view: dict[str, Any] = {"subscriptions": {}, "cursors": {}}
    for sub, s in stats.get("subscriptions", {}).items():
        view["subscriptions"][sub] = _subscription(s)
    if name.startswith("persistent://"):
        internal = broker.admin(admin_path(name) + "/internalStats")
        for sub, c in internal.get("cursors", {}).items():
            if sub not in EXCLUDED_CURSORS:
                view["cursors"][sub] = {k: c.get(k) for k in INTERNAL_FIELDS}
    return view


def ackstate_view(stats: dict[str, Any], internal: dict[str, Any], name: str) -> dict[str, Any]:
    """The same reduction of ackstate's ``stats`` and ``internal-stats`` output."""
    view: dict[str, Any] = {"subscriptions": {}, "cursors": {}}
    for sub, s in stats.get(name, {}).get("subscriptions", {}).items():
        view["subscriptions"][sub] = _subscription(s)
    if name.startswith("persistent://"):
        for sub, c in internal.get(name, {}).get("cursors", {}).items():
            view["cursors"][sub] = {k: c.get(k) for k in INTERNAL_FIELDS}
    return view


def _subscription(s: dict[str, Any]) -> dict[str, Any]:
    out = {k: s.get(k) for k in SUBSCRIPTION_FIELDS}
    out["consumers"] = sorted(
        (c.get("consumerName"), *(c.get(k) for k in CONSUMER_FIELDS)) for c in s.get("consumers", [])
    )
    return out


def differences(expected: dict[str, Any], actual: dict[str, Any], path: str = "") -> list[str]:
    """One line per leaf where ackstate (``actual``) differs from the broker (``expected``)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines = []
        for key in sorted(set(expected) | set(actual)):
            if key not in actual:
                lines.append(f"{path}/{key}: broker {expected[key]!r}, ackstate has none")
            elif key not in expected:
                lines.append(f"{path}/{key}: ackstate {actual[key]!r}, broker has none")
            else:
                lines.extend(differences(expected[key], actual[key], f"{path}/{key}"))
        return lines
    if expected != actual:
        return [f"{path}: broker {expected!r}, ackstate {actual!r}"]
    return []
