"""Settings shared by the whole suite (engine, schemas, Spark and conformance tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parent.parent

# Spark's Python workers must run this interpreter, whichever fixture starts Spark.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Shared 2-core CI machines stall at random: a per-example deadline there only measures the
# neighbours. Property tests keep their example counts; `HYPOTHESIS_PROFILE=dev` restores
# hypothesis's own defaults locally.
settings.register_profile("ackstate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ackstate"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root directory (where pyproject.toml and conf/ are)."""
    return REPO_ROOT


@pytest.fixture(autouse=True)
def _no_user_warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's $ACKSTATE_WAREHOUSE must never receive test tables."""
    monkeypatch.delenv("ACKSTATE_WAREHOUSE", raising=False)
