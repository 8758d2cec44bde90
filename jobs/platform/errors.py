"""The errors the ``ackstate`` command reports as one line instead of a traceback.

Every failure a user can fix (no Java, no Delta jars, a bad ``--conf`` file) is an
``AckstateError`` whose message says what is wrong and what to do; ``jobs.cli.main`` prints it
as ``ackstate: error: <message>`` and exits with status 2 (1 for a filter that matched
nothing). Every error class of ``jobs`` is declared here, grouped by the module that raises it,
so that the command's failure modes can be read in one place.
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


# ---- jobs.ingest.bootstrap -----------------------------------------------------------------


class BootstrapError(AckstateError):
    """The admin API could not be read, or the warehouse may not be bootstrapped."""


# ---- jobs.platform.broker --------------------------------------------------------------------


class PulsarSetupError(AckstateError):
    """The broker's jars or the plugin NAR are missing or could not be built."""


class BrokerStartError(AckstateError):
    """A local standalone broker did not come up (its log is named in the message)."""


# ---- jobs.compact.compaction -------------------------------------------------------------------


class CompactError(AckstateError):
    """``ackstate compact`` was asked for something unsafe or impossible."""


# ---- jobs.ingest.query --------------------------------------------------------------------


class IngestError(AckstateError):
    """The ingest query could not start or failed."""


# ---- jobs.platform.kafka ---------------------------------------------------------------------


class KafkaSetupError(AckstateError):
    """The Kafka jars are missing, or a local Kafka did not start."""


# ---- jobs.platform.locations -----------------------------------------------------------------


class LocationError(AckstateError):
    """A location a command cannot use (a URI where only a local path will do)."""


# ---- jobs.read.report --------------------------------------------------------------------


class ReportError(AckstateError):
    """The report could not be drawn (no warehouse, nothing readable)."""


# ---- jobs.platform.s3 ------------------------------------------------------------------------


class S3SetupError(AckstateError):
    """The S3A jars are missing."""


# ---- jobs.read.sql -----------------------------------------------------------------------


class SqlError(AckstateError):
    """A statement Spark could not parse, analyse or run; the message is Spark's first line."""


# ---- jobs.read.stats ---------------------------------------------------------------------


class WarehouseNotInitializedError(AckstateError):
    """The warehouse lacks the tables ``stats`` reads: nothing was ever initialised there."""


class AsOfError(AckstateError):
    """``--as-of`` names a table version or time that the Delta log does not have."""


class CorruptCursorStateError(AckstateError):
    """A ``cursors.state`` or ``topic_partitions.ledgers`` value this version cannot decode."""


class NotFoundError(AckstateError):
    """A ``--topic`` or ``--subscription`` filter matched nothing: exit 1, not a failure of ackstate."""


class TopicNotFoundError(NotFoundError):
    """``--topic`` matched no topic partition in the warehouse."""


class SubscriptionNotFoundError(NotFoundError):
    """``--subscription`` matched no subscription of the topics asked for."""
