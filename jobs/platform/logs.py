"""Python-side logging for ackstate: the ``ackstate`` logger, one timestamped line per record.

Only the ``ackstate`` logger tree is configured, so a host application (or pytest) keeps its
own root logging; the JVM's log4j output is configured separately by ``conf/log4j2.properties``.
"""

from __future__ import annotations

import logging
import sys
import time

LOGGER_NAME = "ackstate"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_MARK = "_ackstate_handler"


class _UtcFormatter(logging.Formatter):
    """ISO-8601 UTC timestamps, like every time ackstate writes."""

    converter = time.gmtime

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (pytest and the CLI tests swap it)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


def configure_logging(level: int | str = logging.INFO) -> logging.Logger:
    """Send ``ackstate.*`` records at ``level`` and above to stderr; safe to call again."""
    logger = logging.getLogger(LOGGER_NAME)
    if isinstance(level, str):
        level = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    logger.setLevel(level)
    if not any(getattr(h, _HANDLER_MARK, False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_UtcFormatter(_FORMAT))
        setattr(handler, _HANDLER_MARK, True)
        logger.addHandler(handler)
    logger.propagate = False
    return logger
