"""Fixtures for tests that need a real local Spark with Delta Lake.

The one Spark session of the run is the ``spark`` fixture of tests/conftest.py (tests/pulsar
uses it too). Every test under tests/spark is marked ``spark``: ``pytest -m "not spark"`` skips them.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A fresh, not yet existing, warehouse directory for one test."""
    return tmp_path / "warehouse"
