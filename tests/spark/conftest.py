"""Fixtures for tests that need a real local Spark with Delta Lake.

The one Spark session of the run is the ``spark`` fixture of tests/conftest.py (tests/pulsar
uses it too). Every test under tests/spark is marked ``spark``: ``pytest -m "not spark"`` skips them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A fresh, not yet existing, warehouse directory for one test."""
    return tmp_path / "warehouse"
