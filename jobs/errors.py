"""The errors the ``ackstate`` command reports as one line instead of a traceback.

Every failure a user can fix (no Java, no Delta jars, a bad ``--conf`` file) is an
``AckstateError`` whose message says what is wrong and what to do; ``jobs.cli.main`` prints it
as ``ackstate: error: <message>`` and exits with status 2.
"""

from __future__ import annotations


class AckstateError(Exception):
    """Base class of the errors ackstate reports to its user in one sentence."""


class ConfigError(AckstateError):
    """A ``--conf`` file is missing, is not TOML, or holds a value of the wrong type."""


class SparkUnavailableError(AckstateError):
    """A Spark session with Delta Lake cannot be started on this machine (Java, jars, JVM)."""


class DeltaJarsMissingError(SparkUnavailableError):
    """The Delta Lake jars are not in the jar cache (and were not allowed or able to be resolved)."""
