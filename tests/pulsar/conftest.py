"""A real Pulsar broker with the ackstate plugin: the source of the events and the judge.

Every test here is marked ``pulsar`` (and ``spark``: ackstate's answers come from the real
ingest). The broker's jars and the plugin NAR come from the cache ``ackstate setup --pulsar``
fills; a missing cache fails the test with that command named, it is never skipped.
"""

from __future__ import annotations
