"""A real single-node Kafka (KRaft mode) on 127.0.0.1: the transport between broker and ingest.

Every test here is marked ``kafka`` and ``spark``. The server's jars and Spark's Kafka source come
from the cache ``ackstate setup --kafka`` fills; a missing cache fails the test with that command
named, it is never skipped. One server serves the module; each test uses its own topics.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobs.platform.kafka import KafkaServer


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    with KafkaServer(tmp_path_factory.mktemp("kafka"), quick_jit=True) as server:
        yield server
