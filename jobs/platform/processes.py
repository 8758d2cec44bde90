"""Local server processes of tests and benches: a free port on 127.0.0.1, and a stop by process id."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess

log = logging.getLogger("ackstate.broker")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float, what: str) -> None:
    """SIGTERM (a server's shutdown hook runs), then SIGKILL after ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s %s did not stop in %.0f s; killing it", what, process.pid, timeout)
        process.kill()
        process.wait()
