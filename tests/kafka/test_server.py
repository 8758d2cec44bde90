"""The local Kafka's storage format, the step every Kafka fixture starts with."""

from __future__ import annotations

from pathlib import Path

from jobs.platform.kafka import KafkaServer


def test_a_cluster_id_that_starts_with_a_dash_formats(tmp_path: Path) -> None:
    """One random id in 64 starts with ``-``; passed as a separate argument, Kafka's parser took it
    for an option and the fixture failed (a CI run lost three tests to it)."""
    server = KafkaServer(tmp_path, cluster_id="-dFTYJUwSJaeAA2i-hpL9Q")
    server.format_storage()
    meta = (tmp_path / "data" / "meta.properties").read_text()
    assert "cluster.id=-dFTYJUwSJaeAA2i-hpL9Q" in meta
