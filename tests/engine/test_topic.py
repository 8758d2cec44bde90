"""Topic names as Pulsar's ``TopicName`` reads and writes them."""

from __future__ import annotations

import pytest

from engine.topic import (
    admin_path,
    complete_name,
    is_non_persistent,
    is_persistent,
    namespace_of,
    partition_name,
    split_partition,
)


def test_a_partition_is_named_with_its_suffix_and_minus_one_is_the_topic() -> None:
    assert partition_name("persistent://t/ns/x", 3) == "persistent://t/ns/x-partition-3"
    assert partition_name("persistent://t/ns/x", -1) == "persistent://t/ns/x"
    assert partition_name("persistent://t/ns/x", None) == "persistent://t/ns/x"


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("persistent://t/ns/x-partition-12", ("persistent://t/ns/x", 12)),
        ("persistent://t/ns/x", ("persistent://t/ns/x", None)),
        ("persistent://t/ns/x-partition-", ("persistent://t/ns/x-partition-", None)),
        ("persistent://t/ns/a-partition-1-partition-2", ("persistent://t/ns/a-partition-1", 2)),
    ],
)
def test_split_partition_reads_the_suffix_back(name: str, split: tuple[str, int | None]) -> None:
    assert split_partition(name) == split


def test_short_names_complete_as_pulsar_admin_completes_them() -> None:
    assert complete_name("x") == "persistent://public/default/x"
    assert complete_name(" t/ns/x ") == "persistent://t/ns/x"
    assert complete_name("non-persistent://t/ns/x") == "non-persistent://t/ns/x"


def test_domain_and_namespace() -> None:
    assert is_persistent("persistent://t/ns/x") and not is_non_persistent("persistent://t/ns/x")
    assert is_non_persistent("non-persistent://t/ns/x") and not is_persistent("non-persistent://t/ns/x")
    assert namespace_of("persistent://acme/billing/orders") == "acme/billing"
    assert namespace_of("non-persistent://acme/billing/orders") == "acme/billing"


def test_the_admin_path_encodes_the_local_name_as_the_admin_api_reads_it() -> None:
    assert admin_path("persistent://t/ns/x-partition-3") == "/admin/v2/persistent/t/ns/x-partition-3"
    assert admin_path("non-persistent://t/ns/a b%c") == "/admin/v2/non-persistent/t/ns/a%20b%25c"


def test_a_name_of_four_parts_is_a_v1_name_with_a_v1_admin_path() -> None:
    """TopicName: ``property/cluster/namespace/local`` (its local name holds no '/'); the admin
    API serves it under ``/admin`` (v1), not ``/admin/v2``."""
    assert admin_path("persistent://p/c/ns/x-partition-1") == "/admin/persistent/p/c/ns/x-partition-1"
    assert admin_path("persistent://p/c/ns/a/b") == "/admin/persistent/p/c/ns/a%2Fb"
