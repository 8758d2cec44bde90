"""Pulsar topic names (``org.apache.pulsar.common.naming.TopicName``): the one implementation.

ackstate keys a topic partition as (``topic``, ``partition``): the topic without its partition
suffix, and the partition index, -1 for a topic that is not partitioned. Pulsar names each
partition as a topic of its own, ``<topic>-partition-<N>``; stats are keyed by that name, and
Failover's consumer ring hashes it. A name is ``persistent://`` or ``non-persistent://``; a
short name (``x``, ``tenant/ns/x``) means ``persistent://public/default/x`` and
``persistent://tenant/ns/x``, as ``pulsar-admin`` reads it.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

PERSISTENT: Final = "persistent://"
NON_PERSISTENT: Final = "non-persistent://"
PARTITIONED_TOPIC_SUFFIX: Final = "-partition-"  # TopicName.PARTITIONED_TOPIC_SUFFIX
_PARTITION_NAME = re.compile(r"^(?P<base>.+)-partition-(?P<index>\d+)$")


def partition_name(topic: str, partition: int | None) -> str:
    """Pulsar's name of one topic partition (``TopicName.getPartition``, the name a dispatcher's
    ``topic.getName()`` returns): ``<topic>-partition-<N>``; -1 (or None) is the topic itself."""
    if partition is None or partition < 0:
        return topic
    return f"{topic}{PARTITIONED_TOPIC_SUFFIX}{partition}"


def split_partition(name: str) -> tuple[str, int | None]:
    """``(topic, partition)`` of a name that may end in ``-partition-N``; None when it does not."""
    match = _PARTITION_NAME.match(name)
    if match is None:
        return name, None
    return match["base"], int(match["index"])


def is_persistent(topic: str) -> bool:
    return topic.startswith(PERSISTENT)


def is_non_persistent(topic: str) -> bool:
    """A non-persistent topic keeps no ledger and no cursor: its subscriptions have consumers
    and dispatch counts, and no acknowledgement state."""
    return topic.startswith(NON_PERSISTENT)


def namespace_of(topic: str) -> str:
    """``tenant/namespace`` of a full topic name (``property/cluster/namespace`` of a v1 one)."""
    return topic.split("://", 1)[-1].rsplit("/", 1)[0]


def complete_name(text: str) -> str:
    """Complete a short name as ``pulsar-admin`` does: ``x`` and ``t/ns/x`` mean
    ``persistent://public/default/x`` and ``persistent://t/ns/x`` (a v1 ``p/c/ns/x`` likewise)."""
    text = text.strip()
    if "://" in text:
        return text
    parts = text.split("/")
    if len(parts) == 1:
        return f"{PERSISTENT}public/default/{text}"
    if len(parts) in (3, 4):
        return f"{PERSISTENT}{text}"
    return text


def admin_path(name: str) -> str:
    """The topic's path in the admin REST API, as ``TopicName.getRestPath`` makes it:
    ``/admin/v2/persistent/tenant/ns/<local name, URL-encoded>`` (add ``/stats``, ...), or for a
    v1 name (``persistent://property/cluster/ns/local``) ``/admin/persistent/property/cluster/ns/...``."""
    domain, rest = name.split("://", 1)
    parts = rest.split("/", 3)  # TopicName: four parts are a v1 name, three a v2 one
    *namespace, local = parts
    root = "/admin" if len(parts) == 4 else "/admin/v2"
    return f"{root}/{domain}/{'/'.join(namespace)}/{urllib.parse.quote(local, safe='')}"
