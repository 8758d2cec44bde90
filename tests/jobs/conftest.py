"""Fixtures of the ``jobs`` tests.

The one Spark session of the run is the ``spark`` fixture of tests/conftest.py. A module whose
tests need it (or start the CLI's own JVM) says ``pytestmark = pytest.mark.spark``, so that
``pytest -m "not spark"`` leaves it out.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A fresh, not yet existing, warehouse directory for one test."""
    return tmp_path / "warehouse"
