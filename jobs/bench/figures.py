"""A bench figure (median of runs, its target) and the machine line every bench prints first."""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    target: str
    runs: list[float]

    def line(self) -> str:
        spread = f"(runs: {', '.join(f'{r:,.3g}' for r in self.runs)})" if len(self.runs) > 1 else ""
        return f"  {self.name:<46} {self.value:>14,.2f} {self.unit:<10} target {self.target:<14} {spread}"


def machine() -> str:
    packages = ("numpy", "pyroaring", "pyarrow", "pyspark", "delta-spark")
    versions = ", ".join(f"{pkg} {_version(pkg)}" for pkg in packages)
    return (
        f"{platform.machine()} {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; {versions}"
    )


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "absent"


def median_of(runs: int, measure: Callable[[], float]) -> tuple[float, list[float]]:
    values = [measure() for _ in range(runs)]
    return statistics.median(values), values
